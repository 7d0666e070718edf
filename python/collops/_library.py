"""Finds libcollops_torch.so and loads it into this process, once: the library registers
``torch.classes.OperationTorch.OperationTorch``, and every other module of the package uses what
it holds (``_c10d_backend`` imports its ``_c10d`` module from the same file).

Where the library is looked for, first match wins:
  1. ``$COLLOPS_LIBRARY_DIR/libcollops_torch.so``
  2. ``$COLLOPS_BUILD_DIR/torch_bindings/lib/libcollops_torch.so`` (a CMake build tree)
  3. ``lib/libcollops_torch.so`` in the package (where ``pip install`` puts it)
"""

import os
import sys

import torch  # first: libcollops_torch.so resolves its torch symbols against the loaded torch

_LIB_NAME = "libcollops_torch.so"

#: How to get the library when none is found: install the package, or build a tree and point
#: COLLOPS_BUILD_DIR at it (README.md, "Install").
_HOW_TO_GET_IT = (
    "install the package (pip install --no-build-isolation <collops checkout>), or build it "
    "(scripts/build.sh build in the checkout) and set COLLOPS_BUILD_DIR=<checkout>/build"
)


def _candidates():
    """The library paths to try, in order, each with where it came from."""
    if os.environ.get("COLLOPS_LIBRARY_DIR"):
        yield os.path.join(os.environ["COLLOPS_LIBRARY_DIR"], _LIB_NAME), "COLLOPS_LIBRARY_DIR"
    if os.environ.get("COLLOPS_BUILD_DIR"):
        yield (
            os.path.join(os.environ["COLLOPS_BUILD_DIR"], "torch_bindings", "lib", _LIB_NAME),
            "COLLOPS_BUILD_DIR",
        )
    # Every directory of the package: an editable install's holds the source tree and the
    # install tree, whose lib/ has the library.
    for package_dir in sys.modules[__package__].__path__:
        yield os.path.join(package_dir, "lib", _LIB_NAME), "package"


def library_path():
    """The path of the libcollops_torch.so that ``import collops`` loads.

    Raises ImportError naming every place looked at and how to get the library. An explicit
    COLLOPS_LIBRARY_DIR or COLLOPS_BUILD_DIR that lacks the library is an error rather than a
    silent fall-through, so tests never run against another copy by accident.
    """
    tried = []
    for path, source in _candidates():
        if os.path.isfile(path):
            return path
        tried.append(f"{path} ({source})")
        if source != "package":
            break
    raise ImportError(
        "collops: the PyTorch binding library is not there; looked for "
        + ", ".join(tried)
        + f". To get it: {_HOW_TO_GET_IT}"
    )


def _already_registered():
    """True when OperationTorch is registered already, e.g. by an ATB script that loaded
    $ATB_HOME_PATH/lib/libatb_test_framework.so itself before importing collops."""
    try:
        torch.classes.OperationTorch.OperationTorch
        return True
    except RuntimeError:
        return False


#: The name ATB scripts load from $ATB_HOME_PATH/lib: the alias that the build and the install
#: put beside libcollops_torch.so (torch_bindings/CMakeLists.txt), which loads that library.
_ATB_LIB_NAME = "libatb_test_framework.so"


def _mapped_binding():
    """The path of the binding library this process has mapped already, or None: the copy that
    registered OperationTorch, which every later use must share. The alias maps beside the
    library it loads, so the library's own name is preferred; the ATB name counts only alone
    (a copy of the library under that name)."""
    mapped = {}
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6:
                path = fields[5].strip()
                mapped.setdefault(os.path.basename(path), path)
    return mapped.get(_LIB_NAME) or mapped.get(_ATB_LIB_NAME)


def _check_atb_home(path):
    """An ATB script loads $ATB_HOME_PATH/lib/libatb_test_framework.so itself. Were that a copy of
    the library other than `path`, the process would hold two, and the second registration of
    OperationTorch aborts it (torch allows one TORCH_LIBRARY per namespace): refuse instead. The
    alias beside `path` (a link to it, or the build's alias library that loads it) is safe."""
    atb_home = os.environ.get("ATB_HOME_PATH")
    if not atb_home:
        return
    atb_lib = os.path.join(atb_home, "lib", _ATB_LIB_NAME)
    if (
        os.path.isfile(atb_lib)
        and not os.path.samefile(atb_lib, path)
        and not os.path.samefile(os.path.dirname(atb_lib), os.path.dirname(path))
    ):
        raise ImportError(
            f"collops: ATB_HOME_PATH's {atb_lib} and the library collops loads, {path}, are "
            "different files; an ATB script would load both, and torch aborts on the second. "
            "Point ATB_HOME_PATH and COLLOPS_BUILD_DIR / COLLOPS_LIBRARY_DIR at the same build, "
            "or unset one of them."
        )


def _bind_onednn_to_itself():
    """Loads the system's oneDNN (libdnnl.so.2, which libcollops links for LinearParallel's
    products) with RTLD_DEEPBIND before the library, so oneDNN's references to its own
    symbols stay inside it. torch carries its own oneDNN, of another version, whose symbols it
    exports: loaded after torch without this, oneDNN's one-time initialisations of its gemm
    kernel tables bind to torch's copies, torch's tables get filled and oneDNN's stay empty,
    and every product that oneDNN runs on its `gemm:jit` kernels (float32 on a CPU without
    AVX-512, for one) fails to execute. A build without oneDNN has no such library to load."""
    import ctypes

    try:
        ctypes.CDLL("libdnnl.so.2", mode=os.RTLD_LOCAL | os.RTLD_DEEPBIND)
    except OSError:
        pass


def _register_torch_functional_collectives():
    """Imports torch's functional collectives, whose Python registrations (autograd and Meta
    kernels of the _c10d_functional ops) must come before the library's: where collops fills a
    dispatch key of those ops that torch leaves empty (torch_bindings/missing_c10d_kernels.cpp),
    it reads what torch would do there while loading, which any later call must see the same."""
    try:
        import torch.distributed._functional_collectives  # noqa: F401
    except ImportError:  # torch built without distributed: no such ops to fill
        pass


def _load():
    if _already_registered():
        # A second copy of the library would register OperationTorch twice; use the first.
        return _mapped_binding()
    path = library_path()
    _check_atb_home(path)
    _bind_onednn_to_itself()
    _register_torch_functional_collectives()
    # torch.ops.load_library dlopens the file and runs its TORCH_LIBRARY registration; loading
    # the same file again is a no-op for the dynamic loader.
    torch.ops.load_library(path)
    return path


#: The path of the loaded library.
LIBRARY = _load() or library_path()
