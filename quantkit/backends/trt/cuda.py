"""CUDA runtime calls the TensorRT runner needs beyond polygraphy.cuda: checked statuses,
events for GPU timing, and CUDA graphs. ctypes over the libcudart polygraphy loaded; every
failure is a ``BackendError`` naming what failed, where and the fix."""

from __future__ import annotations

import ctypes

from quantkit.backends.trt.availability import load_cudart, cuda_error
from quantkit.errors import BackendError

_OOM_FIX = ("free GPU memory (other processes: nvidia-smi), lower backend.batch_size / "
            "bench.batch_sizes or backend.trt.max_batch")


def check(lib, status: int, what: str, *, where: str, fix: str) -> None:
    """Raise ``BackendError`` for a non-zero ``cudaError_t``."""
    if status != 0:
        raise BackendError(f"{what} failed: {cuda_error(lib, status)}", where=where, fix=fix)


def _ptr(value) -> ctypes.c_void_p:
    return ctypes.c_void_p(int(value) if value else None)


class Event:
    """A CUDA event (``cudaEventCreate``); ``record(stream)`` then ``elapsed_ms(start, end)``."""

    def __init__(self, *, where: str) -> None:
        self._lib = load_cudart()
        self.where = where
        handle = ctypes.c_void_p()
        check(self._lib, self._lib.cudaEventCreate(ctypes.byref(handle)), "cudaEventCreate",
              where=where, fix=_OOM_FIX)
        self.handle = handle

    def record(self, stream_ptr: int) -> None:
        check(self._lib, self._lib.cudaEventRecord(self.handle, _ptr(stream_ptr)),
              "cudaEventRecord", where=self.where, fix="check the CUDA stream is alive")

    def synchronize(self) -> None:
        check(self._lib, self._lib.cudaEventSynchronize(self.handle), "cudaEventSynchronize",
              where=self.where, fix="an earlier kernel failed: rerun with CUDA_LAUNCH_BLOCKING=1 "
                                    "to find it")

    def free(self) -> None:
        if self.handle is not None:
            self._lib.cudaEventDestroy(self.handle)
            self.handle = None


def elapsed_ms(start: Event, end: Event) -> float:
    """GPU time between two recorded events (waits for ``end``)."""
    end.synchronize()
    ms = ctypes.c_float(0.0)
    check(start._lib, start._lib.cudaEventElapsedTime(ctypes.byref(ms), start.handle, end.handle),
          "cudaEventElapsedTime", where=start.where, fix="record both events on the same device")
    return float(ms.value)


_CAPTURE_MODE_THREAD_LOCAL = 1  # cudaStreamCaptureModeThreadLocal


class CudaGraph:
    """One captured launch sequence (``cudaStreamBeginCapture`` .. ``cudaGraphInstantiate``),
    replayed with :meth:`launch`. Capture ``execute_async_v3`` after one plain run for the shape."""

    def __init__(self, stream_ptr: int, capture, *, where: str) -> None:
        lib = self._lib = load_cudart()
        self.where = where
        self.stream = _ptr(stream_ptr)
        fix = ("set backend.trt.cuda_graphs=false (this engine has layers that cannot be "
               "captured, e.g. data-dependent shapes)")
        check(lib, lib.cudaStreamBeginCapture(self.stream, _CAPTURE_MODE_THREAD_LOCAL),
              "cudaStreamBeginCapture", where=where, fix=fix)
        graph = ctypes.c_void_p()
        try:
            capture()
        finally:
            status = lib.cudaStreamEndCapture(self.stream, ctypes.byref(graph))
        check(lib, status, "cudaStreamEndCapture", where=where, fix=fix)
        self.graph = graph
        exec_ = ctypes.c_void_p()
        check(lib, lib.cudaGraphInstantiate(ctypes.byref(exec_), graph, ctypes.c_ulonglong(0)),
              "cudaGraphInstantiate", where=where, fix=fix)
        self.exec = exec_

    def launch(self) -> None:
        check(self._lib, self._lib.cudaGraphLaunch(self.exec, self.stream), "cudaGraphLaunch",
              where=self.where, fix="set backend.trt.cuda_graphs=false")

    def free(self) -> None:
        if self.exec is not None:
            self._lib.cudaGraphExecDestroy(self.exec)
            self.exec = None
        if self.graph is not None:
            self._lib.cudaGraphDestroy(self.graph)
            self.graph = None
