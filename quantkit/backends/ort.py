"""ONNX Runtime backend: the backend quantkit tests for real (CPU; CUDA / TensorRT EPs when present)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from quantkit.errors import BackendError, BackendUnavailable, first_line

log = logging.getLogger(__name__)

#: ORT 1.32's CPU optimizer that corrupts FP16 Q/DQ graphs (measured here; see ASSETS.md).
UNSAFE_QDQ_OPTIMIZERS = ("WeightBiasQuantization",)

_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
           "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}

#: How ONNX Runtime executes QuantizeLinear -> DequantizeLinear -> op, as session config
#: entries (onnxruntime_session_options_config_keys.h; read in graph_transformer_utils.cc).
#:
#: - ``fused``: ORT's default. Its QDQ transformers fuse Q/DQ + MatMul / Conv into integer
#:   kernels (MatMulIntegerToFloat, QLinearConv ...). On x86 they convert int8 activations to
#:   uint8 and run MLAS u8s8 GEMMs, which on CPUs without VNNI (AVX2, AVX-512 without VNNI)
#:   add pairs of u8 x s8 products in int16 with saturation (VPMADDUBSW): results depend on
#:   the host ISA. This is what ``target=ort_cpu`` deploys, so it is what is measured there.
#: - ``exact``: ``session.disable_quant_qdq=1`` turns the QDQ transformers off (QDQ
#:   propagation, S8->U8, selector/action fusions); constant folding then folds Q/DQ of
#:   constant weights into float weights. Every Q/DQ runs as written (round half to even,
#:   saturate to [-128, 127]) and the op computes in float on the dequantized values: the
#:   fake-quant semantics TensorRT's int8 x int8 -> int32 GEMMs follow, the same on every host
#:   up to float summation order. Float fusions (LayerNorm, Gelu, attention) still run.
#: - ``integer``: ORT's integer kernels with exact int32 accumulation on every x86 host:
#:   ``session.x64quantprecision=1`` makes ORT rewrite int8 weights to uint8 (the same
#:   products) and run its u8u8 kernels where its u8s8 path can saturate
#:   (``MlasPlatformU8S8Overflow``); on VNNI / AMX hosts it changes nothing. TensorRT's
#:   int8 GEMMs accumulate in int32 too, so ``exact`` vs ``integer`` is the numerics noise
#:   of two correct INT8 executions (float vs int32 accumulation).
QDQ_MODES: dict[str, dict[str, str]] = {
    "fused": {},
    "exact": {"session.disable_quant_qdq": "1"},
    "integer": {"session.x64quantprecision": "1"},
}
#: /proc/cpuinfo flags with which MLAS's u8s8 GEMMs sum int8 products exactly (VNNI / AMX).
EXACT_INT8_ISA = ("avx512_vnni", "avx_vnni", "amx_int8")


#: What to install for an execution provider this onnxruntime build lacks.
_PROVIDER_FIX = {
    "CUDAExecutionProvider": "install onnxruntime-gpu (it replaces the CPU onnxruntime package) "
                             "on a machine with an NVIDIA GPU, CUDA 12 and cuDNN 9",
    "TensorrtExecutionProvider": "install onnxruntime-gpu plus TensorRT (pip install tensorrt) on "
                                 "a machine with an NVIDIA GPU, or use backend=trt for quantkit's "
                                 "own strongly typed engines",
}


def check_providers(requested: Sequence[str] | None) -> list[str]:
    """The providers to use, in order; one clear error for any this onnxruntime lacks.

    The error names the provider, what this build has and the fix. Empty = CPU.
    """
    import onnxruntime as ort

    if not requested:
        return ["CPUExecutionProvider"]
    available = list(ort.get_available_providers())
    missing = [p for p in requested if p not in available]
    if missing:
        p = missing[0]
        how = _PROVIDER_FIX.get(p, "install the onnxruntime build that has it")
        raise BackendUnavailable(
            f"ONNX Runtime execution provider {p} is not available in this onnxruntime "
            f"{ort.__version__} (available: {', '.join(available)})", where="backend.providers",
            value=list(requested),
            fix=f"{how}; or run on the CPU with backend=ort (providers=[CPUExecutionProvider])")
    return list(requested)


def provider_args(providers: Sequence[str],
                  options: Mapping[str, Mapping[str, object]] | None) -> list:
    """``providers`` for ``InferenceSession``: names, or (name, {option: str}) where options
    are configured. Booleans become "True"/"False", everything else ``str``."""
    options = options or {}
    unknown = [k for k in options if k not in providers]
    if unknown:
        raise BackendError("provider options given for a provider that is not requested",
                           where="backend.provider_options", value=unknown[0],
                           fix=f"add it to backend.providers or remove its options "
                               f"(requested: {list(providers)})")
    out: list = []
    for p in providers:
        opts = options.get(p)
        out.append((p, {str(k): str(v) for k, v in opts.items()}) if opts else p)
    return out


def qdq_session_config(mode: str) -> dict[str, str]:
    """The ONNX Runtime session config entries of Q/DQ execution ``mode`` (:data:`QDQ_MODES`)."""
    if mode not in QDQ_MODES:
        raise BackendError("unknown Q/DQ execution mode", where="OrtRunner(qdq_mode)",
                           value=mode, fix=f"use one of {', '.join(QDQ_MODES)}")
    return dict(QDQ_MODES[mode])


def fused_int8_is_exact(cpu_isa: Sequence[str]) -> bool:
    """True when ORT's fused x86 INT8 kernels sum int8 products exactly on a CPU with these
    ISA flags (``quantkit.environment.cpu_isa()``): VNNI or AMX present. False on AVX2-only
    and on AVX-512 without VNNI, where the u8s8 path can saturate."""
    return any(f in EXACT_INT8_ISA for f in cpu_isa)


def evaluation_qdq_mode(target: str) -> str:
    """The ``qdq_mode`` that accuracy and per-layer numbers of ``target`` come from:
    ``exact`` for ``tensorrt`` (the Q/DQ semantics TensorRT computes, on every host),
    ``fused`` for ``ort_cpu`` (ORT's integer kernels are that deployment). Latency and the
    kernel census always use ``fused``."""
    if target == "ort_cpu":
        return "fused"
    if target == "tensorrt":
        return "exact"
    raise BackendError("unknown deployment target", where="evaluation_qdq_mode(target)",
                       value=target, fix="use tensorrt or ort_cpu")


def qdq_mode_note(mode: str, cpu_isa: Sequence[str]) -> str:
    """One line for a candidate's ``numerics``: how its Q/DQ ran and on which ISA it holds."""
    isa = ",".join(cpu_isa) or "unknown ISA"
    if mode == "exact":
        return ("INT8 Q/DQ computed exactly (session.disable_quant_qdq=1: QuantizeLinear -> "
                "DequantizeLinear -> float op), the same on every host up to float summation "
                "order")
    if mode == "integer":
        return (f"INT8 on ONNX Runtime integer kernels with int32-exact accumulation "
                f"(session.x64quantprecision=1) on {isa}")
    qdq_session_config(mode)
    exact = fused_int8_is_exact(cpu_isa)
    return (f"INT8 on ONNX Runtime's fused integer kernels on {isa}: "
            + ("int8 products summed exactly (VNNI/AMX)" if exact else
               "u8s8 pair sums can saturate in int16 (no VNNI); holds for this ISA only"))


class OrtRunner:
    """``with OrtRunner(model) as r: r.infer(feed)`` over an ONNX file path or ModelProto.

    ``extra_outputs`` adds intermediate tensors as graph outputs (for calibration and
    per-layer comparison); they come back in ``infer``'s result under their own names.
    ``qdq_mode``: ``"fused"`` (ORT's integer kernels) or ``"exact"`` (Q/DQ as written, float
    ops; :data:`QDQ_MODES`). ``session_config``: further ORT session config entries.
    ``memory_arena=False``: no CPU memory arena (ORT allocates each tensor from the heap
    and frees it after the run instead of keeping the largest run's buffers pooled until
    the session closes); for debug runs that return many tensors. Numerics are unchanged.
    Leaving the ``with`` block drops the session and gives the freed heap back to the OS
    (backends/memory.py).
    """

    def __init__(self, model: str | os.PathLike | onnx.ModelProto, *, name: str = "ort",
                 providers: Sequence[str] | None = None,
                 provider_options: Mapping[str, Mapping[str, object]] | None = None,
                 disabled_optimizers: Sequence[str] = (),
                 graph_optimization_level: str = "all",
                 intra_op_threads: int = 0,
                 extra_outputs: Sequence[str] = (),
                 save_optimized_to: str | os.PathLike | None = None,
                 qdq_mode: str = "fused",
                 session_config: Mapping[str, str] | None = None,
                 memory_arena: bool = True) -> None:
        self.model = model
        self.name = name
        self.providers = providers
        self.provider_options = dict(provider_options or {})
        self.disabled_optimizers = tuple(disabled_optimizers)
        self.graph_optimization_level = graph_optimization_level
        self.intra_op_threads = intra_op_threads
        self.extra_outputs = tuple(extra_outputs)
        self.save_optimized_to = save_optimized_to
        self.qdq_mode = qdq_mode
        self.session_config = {**qdq_session_config(qdq_mode),
                               **{str(k): str(v) for k, v in (session_config or {}).items()}}
        self.memory_arena = memory_arena
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
        opts.enable_cpu_mem_arena = self.memory_arena
        if self.save_optimized_to:
            opts.optimized_model_filepath = str(self.save_optimized_to)
        for key, value in self.session_config.items():
            opts.add_session_config_entry(key, value)
        try:
            self.session_ = ort.InferenceSession(
                self._model_bytes(), sess_options=opts,
                providers=provider_args(check_providers(self.providers), self.provider_options),
                disabled_optimizers=list(self.disabled_optimizers) or None)
        except BackendUnavailable:
            raise
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise BackendError(f"ONNX Runtime could not load the model: {first_line(exc)}",
                               where=self.name,
                               fix="check the model with `python -m quantkit.cli.lint_cmd` "
                                   "and onnx.checker") from exc
        from quantkit.backends.providers import check_session_providers  # no silent fallback

        check_session_providers(self.session_, check_providers(self.providers), self.provider_options)
        return self

    def __exit__(self, *exc: object) -> None:
        from quantkit.backends.memory import release_free_heap

        self.session_ = None
        release_free_heap()  # the session's weights and buffers: back to the OS, not kept

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
        try:
            values = sess.run(names, feed)
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise self._run_error(feed, exc) from exc
        return dict(zip(names, values))

    def _run_error(self, feed: dict[str, np.ndarray], exc: Exception) -> BackendError:
        """Name the input whose name, rank or dtype does not fit the model, with the fix."""
        first = first_line(exc)
        declared = {i.name: i for i in self._session().get_inputs()}
        spec = ", ".join(f"{i.name}: {i.type}{list(i.shape)}" for i in declared.values())
        fix = f"feed what the model declares ({spec}), or re-export the model to take " \
              "what the data pipeline feeds"
        for name, arg in declared.items():
            if name not in feed:
                return BackendError("the model needs an input the data pipeline does not feed",
                                    where=f"{self.name} input {name}",
                                    value=sorted(feed), fix=fix)
            got = np.asarray(feed[name])
            if len(arg.shape) != got.ndim:
                return BackendError(f"input rank differs from the model's: it declares rank "
                                    f"{len(arg.shape)} {list(arg.shape)}, the feed has rank "
                                    f"{got.ndim}", where=f"{self.name} input {name}",
                                    value=f"{got.dtype}{list(got.shape)}", fix=fix)
            for axis, (want, have) in enumerate(zip(arg.shape, got.shape)):
                if isinstance(want, int) and want >= 0 and want != have:
                    return BackendError(f"input dim {axis} differs from the model's: it declares "
                                        f"{list(arg.shape)}", where=f"{self.name} input {name}",
                                        value=f"{got.dtype}{list(got.shape)}", fix=fix)
        extra = sorted(set(feed) - set(declared))
        if extra:
            return BackendError("the feed has an input the model does not declare",
                                where=f"{self.name} input {extra[0]}", value=extra, fix=fix)
        return BackendError(f"ONNX Runtime could not run the model: {first}", where=self.name,
                            value={k: f"{np.asarray(v).dtype}{list(np.shape(v))}"
                                   for k, v in feed.items()}, fix=fix)


def open_exact_qdq(model: str | os.PathLike | onnx.ModelProto, **kwargs) -> OrtRunner:
    """An :class:`OrtRunner` that computes the Q/DQ semantics exactly (``qdq_mode="exact"``).

    What evaluation must use for ``target=tensorrt``: accuracy and per-layer numbers that
    hold on every host (and match TensorRT's int8 GEMMs up to float rounding), never the
    host's fused integer kernels. Keyword arguments go to :class:`OrtRunner`.
    """
    if kwargs.get("qdq_mode", "exact") != "exact":
        raise BackendError("open_exact_qdq opens exact Q/DQ sessions only",
                           where="open_exact_qdq(qdq_mode)", value=kwargs["qdq_mode"],
                           fix="use OrtRunner(model, qdq_mode=...) for other modes")
    kwargs["qdq_mode"] = "exact"
    return OrtRunner(model, **kwargs)


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
