"""Running inside another library's CUDA work (CuPy, PyTorch): which device an address lives on, which
device the lab's context is on, and the caller's stream order, through the driver's own Python binding
(``cuda.bindings``, installed with nvmath-python).

The lab's launchers enqueue on the legacy default stream (PyCUDA's ``stream=None``). A caller working on
a stream of its own gets the launch in that stream's order all the same: an event recorded on the caller's
stream is waited for on the legacy stream before the launch, and one recorded on the legacy stream after it
is waited for on the caller's stream, so work queued there before the call is read, and work queued after
it reads the result, as if the launch had been queued there itself (no host wait either way)."""

from __future__ import annotations

from contextlib import contextmanager

from ..errors import LabError

LEGACY = (None, 0, 1)  # stream handles that are the legacy default stream itself (1: CU_STREAM_LEGACY)


def _bindings():
    from cuda.bindings import driver as cu

    return cu


def _ok(result, what: str):
    """The values of a ``cuda.bindings`` call (it returns the error code first), or a one-line error."""
    cu = _bindings()
    err, *values = result
    if err != cu.CUresult.CUDA_SUCCESS:
        raise LabError(f"{what}: the CUDA driver says {err.name}")
    return values[0] if len(values) == 1 else values


def pointer_device(ptr: int) -> int | None:
    """The ordinal of the device whose memory ``ptr`` points into; None where the driver knows no
    allocation there (a host address, or memory of another process)."""
    cu = _bindings()
    err, ordinal = cu.cuPointerGetAttribute(cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
    return int(ordinal) if err == cu.CUresult.CUDA_SUCCESS else None


def context_device() -> int:
    """The ordinal of the device of this thread's current context (the lab's primary context)."""
    return int(_ok(_bindings().cuCtxGetDevice(), "which device the context is on"))


def stream_handle(stream) -> int | None:
    """A stream given as a handle (int), a PyTorch stream (``cuda_stream``) or a CuPy stream (``ptr``)."""
    if stream is None or isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    raise LabError(f"matmul: stream is a {type(stream).__name__}: pass a CUDA stream handle (int), a PyTorch "
                   "or a CuPy stream")


class StreamOrder:
    """Two events (made once, on first use) that put a legacy-stream launch in a caller's stream order."""

    def __init__(self):
        self._events = None

    def _pair(self):
        if self._events is None:
            cu = _bindings()
            flags = int(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
            self._events = tuple(_ok(cu.cuEventCreate(flags), "creating an event") for _ in range(2))
        return self._events

    @contextmanager
    def inside(self, handle: int | None):
        """Launches in the body run after the work queued on stream ``handle`` so far, and before the work
        queued there after the body (nothing to do on the legacy stream itself)."""
        if handle in LEGACY:
            yield
            return
        cu = _bindings()
        before, after = self._pair()
        legacy = cu.CUstream(1)
        _ok(cu.cuEventRecord(before, cu.CUstream(handle)), "recording the caller's stream")
        _ok(cu.cuStreamWaitEvent(legacy, before, 0), "ordering after the caller's stream")
        yield
        _ok(cu.cuEventRecord(after, legacy), "recording the launch")
        _ok(cu.cuStreamWaitEvent(cu.CUstream(handle), after, 0), "ordering the caller's stream after the launch")
