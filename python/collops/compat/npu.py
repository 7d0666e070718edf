"""``torch_npu.npu`` / ``torch.npu`` on CPU: device bookkeeping only, since work is synchronous.

collops executes collectives synchronously on CPU, so streams and events have nothing to wait
for and ``synchronize`` returns at once; ``set_device`` records the rank's device index so
``current_device`` answers as on an NPU. The rest answers what frameworks written for torch_npu
ask of it (DeepSpeed's NPU accelerator reads most of this namespace): random state is torch's CPU
generator's, memory counters are those of a device allocator that holds nothing (tensors are CPU
tensors), ``get_device_properties`` reports the host's memory, and the legacy tensor types are
torch's CPU ones. Graph capture (``NPUGraph``) and the ACL runtime (``npurt``) have no CPU
counterpart and are absent, as they are from a torch_npu build without them.
"""

import contextlib
import os
import threading
import time
from collections import OrderedDict
from types import SimpleNamespace

import torch

__all__ = [
    "set_device",
    "current_device",
    "device_count",
    "is_available",
    "synchronize",
    "Stream",
    "Event",
    "stream",
    "current_stream",
    "default_stream",
    "empty_cache",
    "memory_allocated",
    "max_memory_allocated",
    "reset_max_memory_allocated",
    "memory_cached",
    "max_memory_cached",
    "reset_max_memory_cached",
    "memory_reserved",
    "max_memory_reserved",
    "memory_stats",
    "reset_peak_memory_stats",
    "get_device_properties",
    "get_rng_state",
    "set_rng_state",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
    "default_generators",
    "is_bf16_supported",
    "check_device",
    "BFloat16Tensor",
    "ByteTensor",
    "DoubleTensor",
    "FloatTensor",
    "HalfTensor",
    "IntTensor",
    "LongTensor",
]

_state = threading.local()
_DEVICES = 8


def check_device(device):
    """Accepts None, an int, "npu", "npu:<n>", or a cpu device ("cpu", "cpu:<n>", torch.device);
    raises otherwise."""
    if device is None or isinstance(device, int):
        return
    text = str(device)
    kind, _, index = text.partition(":")
    if kind in ("cpu", "npu") and (not index or index.isdigit()):
        return
    raise RuntimeError(f"collops torch_npu shim: unsupported device {device!r} (cpu, npu, npu:<n>)")


def set_device(device):
    """Records the device index (int, "npu:<n>"); tensors stay on CPU regardless."""
    check_device(device)
    text = str(device)
    _state.device = (
        int(text.split(":", 1)[1]) if ":" in text else (device if isinstance(device, int) else 0)
    )


def current_device():
    """The index last given to set_device in this thread (0 by default)."""
    return getattr(_state, "device", 0)


def device_count():
    """Scripts size their jobs by this; any rank count works on CPU, so report a generous 8."""
    return _DEVICES


def is_available():
    """True: the shim stands in for an available NPU."""
    return True


def synchronize(device=None):
    """Nothing to wait for: collops' CPU execution has finished when execute returns."""
    check_device(device)


# Streams and events. Work is complete when its call returns, so every stream is idle, every
# recorded event has happened, and an event's time is the moment it was recorded.


class Event:
    """An event that has happened once recorded; with ``enable_timing``, ``elapsed_time`` gives
    the milliseconds between two recordings, as torch_npu's does."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        self._recorded_at = None

    def record(self, stream=None):
        """Marks now; the work before it on `stream` is done already."""
        self._recorded_at = time.perf_counter()

    def query(self):
        """True: what was recorded has run."""
        return True

    def synchronize(self):
        """Nothing to wait for."""

    def wait(self, stream=None):
        """Nothing to wait for."""

    def elapsed_time(self, end_event):
        """Milliseconds from this event's recording to `end_event`'s; both must be recorded with
        ``enable_timing=True``."""
        for event in (self, end_event):
            if not event.enable_timing:
                raise RuntimeError(
                    "collops torch_npu shim: elapsed_time needs both events "
                    "created with enable_timing=True"
                )
            if event._recorded_at is None:
                raise RuntimeError(
                    "collops torch_npu shim: elapsed_time needs both events recorded"
                )
        return (end_event._recorded_at - self._recorded_at) * 1000.0


class Stream:
    """A stream whose work is always complete."""

    def __init__(self, device=None, priority=0):
        check_device(device)
        self.priority = priority

    def synchronize(self):
        """Nothing to wait for."""

    def query(self):
        """True: the stream has no pending work."""
        return True

    def wait_stream(self, stream):
        """Nothing to wait for."""

    def wait_event(self, event):
        """Nothing to wait for: a recorded event has happened."""

    def record_event(self, event=None):
        """Records `event` (a new one if None) and returns it."""
        event = Event() if event is None else event
        event.record(self)
        return event


_DEFAULT_STREAM = Stream()


def default_stream(device=None):
    """The stream work runs on unless a ``stream(...)`` context says otherwise."""
    check_device(device)
    return _DEFAULT_STREAM


def current_stream(device=None):
    """The stream of the innermost ``stream(...)`` context of this thread, else the default."""
    check_device(device)
    return getattr(_state, "stream", None) or _DEFAULT_STREAM


@contextlib.contextmanager
def stream(s):
    """Makes `s` the current stream of this thread for the block (None: leaves it as it is)."""
    if s is None:
        yield
        return
    previous = getattr(_state, "stream", None)
    _state.stream = s
    try:
        yield
    finally:
        _state.stream = previous


# Memory. Tensors are CPU tensors, so the device allocator that these counters describe holds
# nothing, and has nothing to free.


def empty_cache():
    """CPU memory is returned by the allocator; nothing is cached here."""


def memory_allocated(device=None):
    """0: no tensor lives in device memory."""
    check_device(device)
    return 0


def memory_reserved(device=None):
    """0: the device allocator reserves nothing."""
    check_device(device)
    return 0


def memory_stats(device=None):
    """No allocator counters: an empty mapping."""
    check_device(device)
    return OrderedDict()


def reset_peak_memory_stats(device=None):
    """Nothing to reset."""
    check_device(device)


max_memory_allocated = memory_cached = max_memory_cached = max_memory_reserved = memory_allocated
reset_max_memory_allocated = reset_max_memory_cached = reset_peak_memory_stats


def get_device_properties(device=None):
    """The host as the device: its name and physical memory (``total_memory``, bytes)."""
    check_device(device)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return SimpleNamespace(
        name="CPU (collops torch_npu shim)",
        total_memory=memory,
        multi_processor_count=os.cpu_count() or 1,
    )


# Random numbers: CPU tensors draw from torch's CPU generator, which every device index names.


def get_rng_state(device="npu"):
    """The CPU generator's state."""
    check_device(device)
    return torch.get_rng_state()


def set_rng_state(new_state, device="npu"):
    """Sets the CPU generator's state."""
    check_device(device)
    torch.set_rng_state(new_state)


def manual_seed(seed):
    """Seeds torch's CPU generator, which is the one CPU tensors use."""
    torch.manual_seed(seed)


manual_seed_all = manual_seed


def seed():
    """Seeds the CPU generator from a nondeterministic source."""
    torch.seed()


seed_all = seed


def initial_seed():
    """The CPU generator's initial seed."""
    return torch.initial_seed()


default_generators = (torch.default_generator,) * _DEVICES


def is_bf16_supported():
    """True: torch's CPU kernels compute in bfloat16."""
    return True


def _lazy_call(callback):
    """torch_npu defers `callback` until the device is initialised; this one always is."""
    callback()


BFloat16Tensor = torch.BFloat16Tensor
ByteTensor = torch.ByteTensor
DoubleTensor = torch.DoubleTensor
FloatTensor = torch.FloatTensor
HalfTensor = torch.HalfTensor
IntTensor = torch.IntTensor
LongTensor = torch.LongTensor
