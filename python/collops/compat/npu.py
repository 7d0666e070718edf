"""``torch_npu.npu`` / ``torch.npu`` on CPU: device bookkeeping only, since work is synchronous.

collops executes collectives synchronously on CPU, so ``synchronize`` has nothing to wait for;
``set_device`` records the rank's device index so ``current_device`` answers as on an NPU.
"""
import threading

__all__ = ["set_device", "current_device", "device_count", "is_available", "synchronize",
           "current_stream", "empty_cache", "manual_seed", "manual_seed_all", "Stream",
           "check_device"]

_state = threading.local()


def check_device(device):
    """Accepts None, an int, "npu", "npu:<n>", or a cpu device ("cpu", "cpu:<n>", torch.device);
    raises otherwise."""
    if device is None or isinstance(device, int):
        return
    text = str(device)
    kind, _, index = text.partition(":")
    if kind in ("cpu", "npu") and (not index or index.isdigit()):
        return
    raise RuntimeError(f"collops torch_npu shim: unsupported device {device!r} "
                       "(cpu, npu, npu:<n>)")


def set_device(device):
    """Records the device index (int, "npu:<n>"); tensors stay on CPU regardless."""
    check_device(device)
    text = str(device)
    _state.device = int(text.split(":", 1)[1]) if ":" in text else (
        device if isinstance(device, int) else 0)


def current_device():
    """The index last given to set_device in this thread (0 by default)."""
    return getattr(_state, "device", 0)


def device_count():
    """Scripts size their jobs by this; any rank count works on CPU, so report a generous 8."""
    return 8


def is_available():
    """True: the shim stands in for an available NPU."""
    return True


def synchronize(device=None):
    """Nothing to wait for: collops' CPU execution has finished when execute returns."""
    check_device(device)


class Stream:
    """A stream whose work is always complete."""

    def __init__(self, device=None, priority=0):
        check_device(device)

    def synchronize(self):
        """Nothing to wait for."""

    def wait_stream(self, stream):
        """Nothing to wait for."""


def current_stream(device=None):
    """A Stream that is always complete."""
    return Stream(device)


def empty_cache():
    """CPU memory is returned by the allocator; nothing is cached here."""


def manual_seed(seed):
    """Seeds torch's CPU generator, which is the one CPU tensors use."""
    import torch
    torch.manual_seed(seed)


manual_seed_all = manual_seed
