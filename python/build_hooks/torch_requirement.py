"""The wheel's torch requirement, computed when the wheel is built (pyproject.toml).

libcollops_torch.so is compiled against the torch that the build sees, and only that torch's C++
ABI loads it: the wheel requires exactly that version (its public part: 2.13.0 of 2.13.0+cpu).
The build never installs torch (build with --no-build-isolation, against the torch already
there); without one it stops and says so, rather than let pip fetch some torch to build against.
"""

import importlib.metadata

from packaging.version import Version


def torch_requirement():
    """ "torch==<the installed torch's public version>"."""
    try:
        installed = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError(
            "collops is built against the torch installed in the build environment, and there "
            "is none: install torch first (scripts/setup.sh installs torch==2.13.0) and build "
            "with pip's --no-build-isolation"
        ) from None
    return f"torch=={Version(installed).public}"


class Provider:
    """A dynamic-metadata provider for [[tool.dynamic-metadata]] (scikit-build-core): adds the
    torch requirement to `dependencies`."""

    @staticmethod
    def dynamic_metadata(settings, project):
        if settings.get("field", "dependencies") != "dependencies":
            raise RuntimeError("torch_requirement provides the field 'dependencies' only")
        return {"dependencies": [torch_requirement()]}
