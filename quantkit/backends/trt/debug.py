"""TensorRT debug tensors: the values of marked intermediate tensors of an engine, for a
per-layer comparison on TensorRT itself (the signed-off engine has no tensor marked; a debug
engine with ``build_engine(..., debug_tensors=names)`` is built apart, like trtexec
``--markDebug``).

The listener copies each debug tensor to a fresh host array inside TensorRT's callback (the
address is only valid during it), the way Polygraphy's ``TrtRunner`` does.
"""

from __future__ import annotations

import ctypes
import functools
import logging

import numpy as np

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _listener_class(trt, pcuda):
    class _Collector(trt.IDebugListener):
        """Keeps the last value of every debug tensor, by name, as a host array."""

        def __init__(self) -> None:
            trt.IDebugListener.__init__(self)
            self.values: dict[str, np.ndarray] = {}
            self.skipped: dict[str, str] = {}

        def process_debug_tensor(self, addr, location, type, shape, name, stream):  # noqa: A002
            try:
                dtype = np.dtype(trt.nptype(type))
            except TypeError:
                self.skipped[name] = str(type)  # fp8 / int4 / fp4 / bf16: no NumPy type
                return
            dims = tuple(int(d) for d in shape)
            host = np.empty(dims, dtype=dtype)
            if host.size:
                nbytes = host.size * dtype.itemsize
                if location == trt.TensorLocation.HOST:
                    ctypes.memmove(host.ctypes.data, addr, nbytes)
                else:
                    wrapper = pcuda.wrapper()
                    wrapper.memcpy(dst=host.ctypes.data, src=addr, nbytes=nbytes,
                                   kind=pcuda.MemcpyKind.DeviceToHost, stream_ptr=stream)
                    wrapper.stream_synchronize(stream)
            self.values[name] = host

    return _Collector


def make_listener(trt, pcuda):
    """A fresh debug-tensor collector (``values``: name -> host array of the last run)."""
    return _listener_class(trt, pcuda)()
