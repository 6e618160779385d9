"""Run an engine: ``with TrtRunner("model.engine", device=0) as r: outputs = r.infer(feed)``.

``TrtRunner`` drives the TensorRT 10+ I/O tensor API itself (``set_input_shape``,
``set_tensor_address``, ``execute_async_v3``) over device buffers and a stream from
``polygraphy.cuda`` (ctypes over libcudart). Polygraphy's own ``TrtRunner`` was considered: it
returns arrays that alias host buffers reused by the next ``infer`` call and attaches a
debug-tensor listener by default; ours returns fresh arrays and raises quantkit errors that
name the tensor, the engine and the fix.

Besides ``infer`` (host in, host out) the runner exposes the steps separately for GPU timing
(``quantkit.bench.gpu_timing``): :meth:`stage` copies a feed to the device once,
:meth:`launch` enqueues the engine on device-resident buffers, :meth:`fetch` copies outputs
back.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from quantkit.backends.engine_meta import check_compatible, load_meta, meta_path_for
from quantkit.backends.trt.availability import (cuda_device_info, require_cuda_runtime,
                                                require_tensorrt, use_device)
from quantkit.backends.trt.session import errors_text, init_plugins, trt_logger
from quantkit.errors import BackendError, first_line

log = logging.getLogger(__name__)

Shape = tuple[int, ...]

_MEMORY_FIX = ("free GPU memory (other processes: nvidia-smi), lower backend.batch_size / "
               "bench.batch_sizes or backend.trt.max_batch")


class TrtRunner:
    """``with TrtRunner("model.engine") as r: outputs = r.infer(feed)``.

    On entry the engine's ``.meta.json`` (when present) is checked against GPU ``device`` and
    this TensorRT version; a mismatch raises ``BackendError`` with the rebuild fix. ``infer``
    takes host arrays of the engine's exact input dtypes and returns fresh host arrays.
    """

    def __init__(self, engine_path: str | os.PathLike, *, name: str = "trt",
                 check_meta: bool = True, device: int = 0, debug: bool = False) -> None:
        self.engine_path = Path(engine_path)
        self.debug = debug  # collect the engine's debug tensors; infer() returns them by name
        self._listener = None
        self.name = name
        self.check_meta = check_meta
        self.device = device
        self.engine_ = None
        self.context_ = None
        self.stream_ = None
        self._trt = None
        self._pcuda = None
        self._runtime = None
        self._logger = None
        self._buffers: dict = {}
        self._inputs: list[str] = []
        self._outputs: list[str] = []
        self._dtypes: dict[str, np.dtype] = {}
        self._shapes: dict[str, Shape] = {}
        self._profile = 0

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> "TrtRunner":
        trt = require_tensorrt()
        pcuda = require_cuda_runtime(self.device)
        if not self.engine_path.is_file():
            raise BackendError("engine file not found", where=str(self.engine_path),
                               fix="build it with quantkit.backends.trt.build_engine (backend=trt)")
        meta_path = meta_path_for(self.engine_path)
        if self.check_meta:
            if meta_path.is_file():
                gpu = cuda_device_info(self.device)
                check_compatible(load_meta(meta_path), tensorrt_version=trt.__version__,
                                 gpu_name=gpu.name, compute_capability=gpu.compute_capability,
                                 engine_path=self.engine_path)
            else:
                log.warning("%s has no %s; cannot check it was built for this GPU/TensorRT",
                            self.engine_path, meta_path.name)
        use_device(self.device)
        self._trt = trt
        self._logger = trt_logger(trt)
        init_plugins(trt)
        self._logger.take_errors()
        self._runtime = trt.Runtime(self._logger)
        engine = self._runtime.deserialize_cuda_engine(self.engine_path.read_bytes())
        if engine is None:
            raise BackendError("TensorRT could not deserialize the engine: "
                               + errors_text(self._logger.take_errors(), "no error reported"),
                               where=str(self.engine_path),
                               fix="engines are specific to GPU and TensorRT version: rebuild it "
                                   f"(delete {self.engine_path} or run with backend.trt.rebuild=true)")
        context = engine.create_execution_context()
        if context is None:
            raise BackendError("TensorRT could not create an execution context: "
                               + errors_text(self._logger.take_errors(), "no error reported"),
                               where=str(self.engine_path), fix=_MEMORY_FIX)
        self.engine_, self.context_ = engine, context
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self._inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self._outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        for n in self._inputs + self._outputs:
            if engine.is_shape_inference_io(n):
                raise BackendError("engine has a shape-tensor I/O, which TrtRunner does not feed",
                                   where=self.name, value=n,
                                   fix="export the model without shape-tensor inputs/outputs")
            dtype = engine.get_tensor_dtype(n)
            try:
                self._dtypes[n] = np.dtype(trt.nptype(dtype))
            except TypeError as exc:
                raise BackendError(f"engine I/O tensor {n!r} has type {dtype}, which has no NumPy "
                                   "equivalent", where=self.name, value=str(dtype),
                                   fix="keep graph inputs/outputs FP32, FP16 or integer") from exc
        self._pcuda = pcuda
        self.stream_ = self._cuda("create a CUDA stream", None, pcuda.Stream)
        if self.debug:
            self._attach_debug_listener(trt, pcuda)
        return self

    def _attach_debug_listener(self, trt, pcuda) -> None:
        from quantkit.backends.trt.debug import make_listener

        self._listener = make_listener(trt, pcuda)
        if not self.context_.set_debug_listener(self._listener):
            raise BackendError("TensorRT refused the debug-tensor listener", where=self.name,
                               fix="debug tensors need TensorRT >= 10 and an engine built with "
                                   "build_engine(..., debug_tensors=[...])")
        if hasattr(self.context_, "set_all_tensors_debug_state"):
            self.context_.set_all_tensors_debug_state(True)
            return
        meta_path = meta_path_for(self.engine_path)  # older 10.x: tensor by tensor
        names = load_meta(meta_path).settings.get("debug_tensors", []) if meta_path.is_file() else []
        for n in names:
            self.context_.set_tensor_debug_state(n, True)

    def __exit__(self, *exc: object) -> None:
        for buf in self._buffers.values():
            buf.free()
        self._buffers.clear()
        if self.stream_ is not None:
            self.stream_.free()
            self.stream_ = None
        self._listener = None
        self.context_ = None  # context before engine before runtime
        self.engine_ = None
        self._runtime = None

    @property
    def input_names(self) -> list[str]:
        self._active()
        return list(self._inputs)

    @property
    def output_names(self) -> list[str]:
        self._active()
        return list(self._outputs)

    def _active(self):
        if self.context_ is None:
            raise BackendError("runner used outside its `with` block", where=self.name,
                               fix="use `with TrtRunner(engine_path) as r: r.infer(feed)`")
        return self.engine_, self.context_

    def _cuda(self, what: str, tensor: str | None, fn, *args, **kwargs):
        """Call a polygraphy.cuda operation; a CUDA failure becomes a BackendError naming the
        tensor and the engine (polygraphy reports them as its own exceptions)."""
        try:
            return fn(*args, **kwargs)
        except BackendError:
            raise
        except Exception as exc:  # PolygraphyException (CUDA error), MemoryError, OSError
            on = f" for tensor {tensor!r}" if tensor else ""
            raise BackendError(f"CUDA could not {what}{on}: {first_line(exc)}",
                               where=f"{self.name} ({self.engine_path.name}, GPU {self.device})",
                               fix=_MEMORY_FIX) from exc

    def _device_buffer(self, name: str, n_elements: int):
        buf = self._buffers.get(name)
        shape = (max(n_elements, 1),)  # never a null address, even for an empty tensor
        if buf is None:
            buf = self._cuda("allocate device memory", name, self._pcuda.DeviceArray,
                             shape=shape, dtype=self._dtypes[name])
            self._buffers[name] = buf
        else:
            self._cuda("resize device memory", name, buf.resize, shape)
        return buf

    def _set_address(self, name: str, ptr: int) -> None:
        if not self.context_.set_tensor_address(name, ptr):
            raise BackendError(f"TensorRT refused the device address of tensor {name!r}: "
                               + errors_text(self._logger.take_errors(), "no error reported"),
                               where=f"{self.name} ({self.engine_path.name})",
                               fix="the buffer must be 256-byte aligned device memory of this GPU; "
                                   "rebuild the engine if its I/O changed")

    def _profile_range(self, name: str) -> str:
        try:
            lo, _, hi = self.engine_.get_tensor_profile_shape(name, 0)
            return f"{tuple(lo)}..{tuple(hi)}"
        except Exception:  # informational only
            return "unknown"

    def _check_feed(self, feed: Mapping[str, np.ndarray]) -> None:
        missing = [n for n in self._inputs if n not in feed]
        if missing:
            raise BackendError("feed lacks an engine input", where=self.name, value=missing[0],
                               fix=f"feed all of {self._inputs}")
        extra = [n for n in feed if n not in self._inputs]
        if extra:
            raise BackendError("feed has a tensor that is not an engine input", where=self.name,
                               value=extra[0], fix=f"the engine inputs are {self._inputs}")

    # -- the steps: stage, launch, fetch ---------------------------------------------------
    def stage(self, feed: Mapping[str, np.ndarray]) -> None:
        """Copy ``feed`` to device buffers, set input shapes and every I/O address (enqueued on
        the runner's stream; :meth:`launch` then runs on device-resident inputs)."""
        _, context = self._active()
        self._check_feed(feed)
        self._select_profile(feed)
        keep_alive = []
        for name in self._inputs:
            arr = np.asarray(feed[name])
            expected = self._dtypes[name]
            if arr.dtype != expected:
                raise BackendError(f"input {name!r} has dtype {arr.dtype}; the engine expects "
                                   f"{expected}", where=self.name, value=str(arr.dtype),
                                   fix=f"cast the feed to {expected} (ONNX Runtime refuses it too)")
            arr = np.ascontiguousarray(arr)
            if not context.set_input_shape(name, arr.shape):
                raise BackendError(f"input {name!r} shape {arr.shape} is outside the engine's "
                                   f"optimization profile {self._profile_range(name)}",
                                   where=self.name, value=arr.shape,
                                   fix="feed smaller batches/sequences or rebuild with a wider "
                                       "profile (backend.trt.max_batch, backend.trt.max_sequence)")
            buf = self._device_buffer(name, arr.size)
            self._cuda("copy the input to the GPU", name, buf.copy_from, arr, stream=self.stream_)
            keep_alive.append(arr)
            self._set_address(name, buf.ptr)
        for name in self._outputs:  # every output needs an address, wanted or not
            shape = tuple(int(d) for d in context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise BackendError(f"output {name!r} has a data-dependent shape {shape}",
                                   where=self.name, value=shape,
                                   fix="TrtRunner needs output shapes known from the input shapes")
            self._shapes[name] = shape
            buf = self._device_buffer(name, int(np.prod(shape, dtype=np.int64)))
            self._set_address(name, buf.ptr)
        self.synchronize()  # the host arrays may be freed after this
        del keep_alive

    def _select_profile(self, feed: Mapping[str, np.ndarray]) -> None:
        """Engines with latency profiles (``backend.trt.latency_profiles``): run a feed on the
        profile tuned for its batch size when there is one, else on profile 0."""
        engine, context = self.engine_, self.context_
        n = int(getattr(engine, "num_optimization_profiles", 1))
        if n <= 1:
            return
        want = 0
        for i in range(1, n):
            fits = True
            for name in self._inputs:
                lo, _, hi = engine.get_tensor_profile_shape(name, i)
                shape = np.shape(feed[name])
                if len(shape) != len(lo) or not all(a <= d <= b for a, d, b in zip(lo, shape, hi)):
                    fits = False
                    break
            if fits:
                want = i
                break
        if want != self._profile:
            if not context.set_optimization_profile_async(want, self.stream_.ptr):
                raise BackendError(f"TensorRT could not switch to optimization profile {want}: "
                                   + errors_text(self._logger.take_errors(), "no error reported"),
                                   where=f"{self.name} ({self.engine_path.name})",
                                   fix="rebuild with backend.trt.latency_profiles=false")
            self.synchronize()
            self._profile = want

    def launch(self) -> None:
        """Enqueue the engine on the staged device buffers (no synchronization)."""
        _, context = self._active()
        if not context.execute_async_v3(self.stream_.ptr):
            raise BackendError("TensorRT execute_async_v3 failed: "
                               + errors_text(self._logger.take_errors(), "no error reported"),
                               where=f"{self.name} ({self.engine_path.name})",
                               fix="read the TensorRT errors above")

    def synchronize(self) -> None:
        self._cuda("synchronize the stream", None, self.stream_.synchronize)

    def fetch(self, output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Copy the last launch's outputs to fresh host arrays (synchronizes)."""
        self._active()
        wanted = list(output_names) if output_names else list(self._outputs)
        unknown = [n for n in wanted if n not in self._outputs]
        if unknown:
            raise BackendError("requested output is not an engine output", where=self.name,
                               value=unknown[0],
                               fix=f"choose from {self._outputs} (intermediate tensors need a "
                                   "debug run: quantkit.backends.trt.debug_tensors)")
        results: dict[str, np.ndarray] = {}
        for name in wanted:
            host = np.empty(self._shapes[name], dtype=self._dtypes[name])
            if host.size:
                self._cuda("copy the output from the GPU", name, self._buffers[name].copy_to,
                           host, stream=self.stream_)
            results[name] = host
        self.synchronize()
        return results

    # -- inference -------------------------------------------------------------------------
    def infer(self, feed: Mapping[str, np.ndarray],
              output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Outputs ``output_names`` (default: every engine output). In a ``debug=True`` runner
        names may also be debug tensors of the engine; their values come from the listener."""
        self._active()
        wanted = list(output_names) if output_names else list(self._outputs)
        debug = [n for n in wanted if n not in self._outputs]
        if debug and self._listener is None:
            raise BackendError("requested output is not an engine output", where=self.name,
                               value=debug[0],
                               fix=f"choose from {self._outputs}; intermediate tensors need a "
                                   "debug engine (build_engine(..., debug_tensors=[...])) run "
                                   "with TrtRunner(..., debug=True)")
        if self._listener is not None:
            self._listener.values.clear()
        self.stage(feed)
        self.launch()
        out = self.fetch([n for n in wanted if n in self._outputs])
        for n in debug:
            if n not in self._listener.values:
                why = self._listener.skipped.get(n)
                raise BackendError(f"debug tensor {n!r} was not reported by TensorRT"
                                   + (f" (type {why} has no NumPy equivalent)" if why else ""),
                                   where=self.name, value=n,
                                   fix="mark it when building the debug engine (debug_tensors=...); "
                                       "a tensor fused away inside a layer has no value")
            out[n] = self._listener.values[n]
        return out
