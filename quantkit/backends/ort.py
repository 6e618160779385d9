"""ONNX Runtime backend: the backend quantkit tests for real (CPU; CUDA / TensorRT EPs when present)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import numpy as np
import onnx

from quantkit.errors import BackendError, BackendUnavailable

log = logging.getLogger(__name__)

#: ORT 1.32's CPU optimizer that corrupts FP16 Q/DQ graphs (measured here; see ASSETS.md).
UNSAFE_QDQ_OPTIMIZERS = ("WeightBiasQuantization",)

_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
           "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


def _providers(requested: Sequence[str] | None) -> list[str]:
    import onnxruntime as ort

    available = ort.get_available_providers()
    if not requested:
        return ["CPUExecutionProvider"]
    missing = [p for p in requested if p not in available]
    if missing:
        raise BackendUnavailable(
            "ONNX Runtime execution provider not available", where="backend.providers",
            value=missing[0],
            fix=f"choose from {available} or install the onnxruntime build that has it")
    return list(requested)


class OrtRunner:
    """``with OrtRunner(model) as r: r.infer(feed)`` over an ONNX file path or ModelProto.

    ``extra_outputs`` adds intermediate tensors as graph outputs (for calibration and
    per-layer comparison); they come back in ``infer``'s result under their own names.
    """

    def __init__(self, model: str | os.PathLike | onnx.ModelProto, *, name: str = "ort",
                 providers: Sequence[str] | None = None,
                 disabled_optimizers: Sequence[str] = (),
                 graph_optimization_level: str = "all",
                 intra_op_threads: int = 0,
                 extra_outputs: Sequence[str] = (),
                 save_optimized_to: str | os.PathLike | None = None) -> None:
        self.model = model
        self.name = name
        self.providers = providers
        self.disabled_optimizers = tuple(disabled_optimizers)
        self.graph_optimization_level = graph_optimization_level
        self.intra_op_threads = intra_op_threads
        self.extra_outputs = tuple(extra_outputs)
        self.save_optimized_to = save_optimized_to
        self.session_ = None

    def _model_bytes(self) -> bytes | str:
        model = self.model
        if not self.extra_outputs:
            if isinstance(model, onnx.ModelProto):
                return model.SerializeToString()
            return str(model)
        if not isinstance(model, onnx.ModelProto):
            model = onnx.load(str(model))
        return with_outputs(model, self.extra_outputs).SerializeToString()

    def __enter__(self) -> "OrtRunner":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = getattr(
            ort.GraphOptimizationLevel, _LEVELS[self.graph_optimization_level])
        opts.intra_op_num_threads = self.intra_op_threads
        opts.log_severity_level = 3
        if self.save_optimized_to:
            opts.optimized_model_filepath = str(self.save_optimized_to)
        try:
            self.session_ = ort.InferenceSession(
                self._model_bytes(), sess_options=opts,
                providers=_providers(self.providers),
                disabled_optimizers=list(self.disabled_optimizers) or None)
        except BackendUnavailable:
            raise
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise BackendError(f"ONNX Runtime could not load the model: {exc}".splitlines()[0],
                               where=self.name,
                               fix="check the model with `python -m quantkit.lint` "
                                   "and onnx.checker") from exc
        return self

    def __exit__(self, *exc: object) -> None:
        self.session_ = None

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self._session().get_inputs()]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self._session().get_outputs()]

    def _session(self):
        if self.session_ is None:
            raise BackendError("runner used outside its `with` block", where=self.name,
                               fix="use `with OrtRunner(model) as r: r.infer(feed)`")
        return self.session_

    def infer(self, feed: dict[str, np.ndarray],
              output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        sess = self._session()
        names = list(output_names) if output_names else self.output_names
        values = sess.run(names, feed)
        return dict(zip(names, values))


def with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph also outputs the intermediate tensors ``names``.

    Types come from shape inference where known; ORT accepts outputs with no type info.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    existing = {o.name for o in out.graph.output}
    try:
        inferred = onnx.shape_inference.infer_shapes(out)
        vi = {v.name: v for v in inferred.graph.value_info}
    except Exception:  # shape inference is best-effort here
        vi = {}
    for n in names:
        if n in existing:
            continue
        if n in vi:
            out.graph.output.append(vi[n])
        else:
            out.graph.output.append(onnx.helper.make_empty_tensor_value_info(n))
        existing.add(n)
    return out


def kernel_census(optimized_model: str | os.PathLike) -> dict[str, int]:
    """Count op types in ORT's optimized graph (evidence which INT8 kernels ran)."""
    m = onnx.load(str(optimized_model), load_external_data=False)
    counts: dict[str, int] = {}
    for node in m.graph.node:
        key = node.op_type if not node.domain or node.domain == "ai.onnx" else f"{node.domain}.{node.op_type}"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))
