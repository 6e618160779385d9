"""Typed settings: dataclass schemas registered in Hydra's ConfigStore, validated once.

``conf/config.yaml`` lists ``base_config`` (the schema below) first, so Hydra type-checks
every override while composing. :func:`build` turns the composed DictConfig into plain
frozen-ish dataclasses and checks ranges that types cannot express; every problem becomes
one :class:`~quantkit.errors.ConfigError` line naming the key, the value and the fix.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from quantkit.errors import ConfigError
from quantkit.graph.weights import WEIGHTED_OPS

CALIBRATOR_NAMES = ("minmax", "percentile", "entropy", "mse")


@dataclass
class HeadConfig:
    """Classification head fitted with scikit-learn on the train split (zoo models)."""

    C: float = 1.0
    max_iter: int = 2000
    # image zoo models: fit on a seeded subset of this many train images (null = all); the
    # calibration images are then drawn from the train images the head never saw
    n_train: Optional[int] = None


@dataclass
class ModelConfig:
    kind: str = MISSING  # zoo | onnx | hub
    name: str = MISSING
    path: Optional[str] = None  # kind=onnx: the ONNX file
    hub_id: Optional[str] = None  # kind=hub: a Hugging Face model id or local directory
    output: Optional[str] = None  # the logits output; default: the model's first output
    opset: int = 17
    pooling: str = "mean"  # kind=hub: mean | cls
    trust_remote_code: bool = False
    head: HeadConfig = field(default_factory=HeadConfig)


@dataclass
class CalibSplitConfig:
    num_samples: int = 256


@dataclass
class EvalSplitConfig:
    limit: Optional[int] = None  # first N eval examples (after the seeded split)


@dataclass
class ImageConfig:
    """How images become model input (data.kind=image): resize, channels, normalization."""

    size: int = 112  # resized to size x size
    channels: int = 3  # 3: grayscale replicated; 1: RGB reduced to luma
    mean: list[float] = field(default_factory=lambda: [0.485, 0.456, 0.406])  # on [0, 1]
    std: list[float] = field(default_factory=lambda: [0.229, 0.224, 0.225])
    resize: str = "bilinear"  # bilinear (as torch, align_corners=False) | none
    layout: str = "NCHW"  # NCHW | NHWC: the model input's layout


@dataclass
class DataConfig:
    name: str = MISSING
    kind: str = "text"  # text | image
    source: str = "embedded"  # embedded | local | hub
    path: Optional[str] = None  # local: csv/json/parquet file(s); hub: dataset id
    format: Optional[str] = None  # local: csv | json | parquet (default: from the suffix)
    hub_config: Optional[str] = None
    train_split: str = "train"  # hub datasets that come pre-split
    eval_split: Optional[str] = None  # hub: a named split for eval; None = split train
    text_column: str = "text"
    image_column: str = "image"  # hub image datasets: the column with the images
    label_column: str = "label"
    group_column: Optional[str] = None  # split by this column: no group in both splits
    label_names: list[str] = field(default_factory=list)  # class id -> name
    label_map: dict[str, int] = field(default_factory=dict)  # raw label value -> class id
    drop_values: list[str] = field(default_factory=list)  # labels whose rows are dropped
    eval_fraction: float = 0.2
    tokenizer: Optional[str] = None  # name or path; default: the model's own
    max_length: int = 128
    batch_size: int = 32
    calib: CalibSplitConfig = field(default_factory=CalibSplitConfig)
    eval: EvalSplitConfig = field(default_factory=EvalSplitConfig)
    image: ImageConfig = field(default_factory=ImageConfig)


@dataclass
class CalibratorConfig:
    methods: list[str] = field(default_factory=lambda: list(CALIBRATOR_NAMES))
    percentile: float = 99.99
    num_bins: int = 2048
    num_quant_bins: int = 128
    bootstrap: int = 0  # > 0: recompute ranges on this many bootstrap resamples
    batch_size: int = 16  # calibration batches (small batches keep peak memory low)
    ranges_files: list[str] = field(default_factory=list)  # saved ranges JSON: skip calibration


@dataclass
class SearchConfig:
    enabled: bool = True
    max_full_evals: int = 14
    max_minutes: float = 8.0
    subset: int = 256  # eval examples used to measure per-layer sensitivity
    measure_top: int = 12  # re-rank the proxy's top N layers by measured damage (0 = proxy only)
    prune: bool = True
    # Hydra multirun jobs skip the search: a sweep compares calibrators / margins on full
    # INT8, and the search is run once, for the chosen setting (the sweep report names it).
    in_sweeps: bool = False


@dataclass
class PrecisionConfig:
    op_types: list[str] = field(default_factory=lambda: list(WEIGHTED_OPS))
    include_nodes: list[str] = field(default_factory=list)  # regexes; empty = all in scope
    exclude_nodes: list[str] = field(default_factory=list)
    force: dict[str, str] = field(default_factory=dict)  # node/op regex -> int8|fp16|fp32
    remainder: str = "fp16"  # precision of everything not INT8: fp16 | fp32
    search: SearchConfig = field(default_factory=SearchConfig)


@dataclass
class TrtConfig:
    """TensorRT engine build settings (backend=trt). Precision comes from the graph only."""

    workspace_mb: int = 4096
    min_batch: int = 1
    opt_batch: int = 32
    max_batch: int = 64
    min_sequence: int = 1
    opt_sequence: Optional[int] = 128
    max_sequence: Optional[int] = 128
    timing_cache: Optional[str] = None  # default: <cache_dir>/engines/timing.cache
    builder_optimization_level: int = 3
    rebuild: bool = False
    device: int = 0


@dataclass
class BackendConfig:
    name: str = "ort"
    providers: list[str] = field(default_factory=lambda: ["CPUExecutionProvider"])
    # per provider, e.g. {TensorrtExecutionProvider: {trt_engine_cache_enable: true}}
    provider_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    disabled_optimizers: list[str] = field(default_factory=lambda: ["WeightBiasQuantization"])
    intra_op_threads: int = 0
    batch_size: int = 64
    trt: TrtConfig = field(default_factory=TrtConfig)


@dataclass
class CompareConfig:
    subset: int = 256  # eval examples for the per-layer debug run
    batch_size: int = 16  # per-layer debug run: every tensor is an output, keep batches small
    floor_multiple: float = 10000.0  # flag a layer whose INT8 noise > this x its FP16 noise (40 dB)
    backend_check_subset: int = 512  # eval examples for the FP16-vs-FP32-remainder check
    backend_check_min_agreement: float = 0.9
    backend_check_max_accuracy_gap: float = 0.05
    fp16_range_samples: int = 64  # calibration samples scanned for FP16 overflow


@dataclass
class VerdictConfig:
    metric: str = "accuracy"  # accuracy | macro_f1
    margin: float = 0.01
    margin_kind: str = "relative"  # relative | absolute
    alpha: float = 0.05
    n_boot: int = 2000
    min_slice_n: int = 30


@dataclass
class ReportConfig:
    formats: list[str] = field(default_factory=lambda: ["json", "md", "html"])
    reviewer: str = ""


@dataclass
class BenchConfig:
    """Latency stage (quantkit/bench): warm-up, then timed runs per candidate and batch size."""

    enabled: bool = True
    batch_sizes: list[int] = field(default_factory=lambda: [1, 32])
    warmup: int = 2  # untimed runs per candidate and batch size
    min_repeats: int = 4  # timed runs at least (then whole cycles over the feeds) ...
    repeats: int = 200  # ... and at most (bounds memory and time)
    max_seconds: float = 2.0  # stop timing after this long once min_repeats are done
    feeds: int = 4  # distinct eval batches per batch size, cycled (same for every candidate)
    n_boot: int = 1000  # bootstrap resamples for the intervals
    level: float = 0.95
    target_qps: float = 1000.0  # cost projection: queries per second to serve ...
    p99_budget_ms: float = 250.0  # ... with P99 batch latency within this budget
    candidates: list[str] = field(default_factory=list)  # empty = every candidate
    # reuse a measurement of the same artifact, feeds, host and settings from the stage
    # cache (the report says when it was taken); true = always time afresh
    remeasure: bool = False


@dataclass
class Settings:
    experiment_name: str = "default"
    # deployment target the INT8 artifacts are written for (quantkit/qdq/targets.py):
    # tensorrt (TRT_RULES.md) | ort_cpu (ONNX Runtime x86 INT8 kernels; forces an FP32 remainder)
    target: str = "tensorrt"
    seed: int = 0
    cache_dir: Optional[str] = None  # default: $QUANTKIT_CACHE or ~/.cache/quantkit
    progress: bool = True
    stage_cache: bool = True  # reuse stage results stored under <cache_dir>/stages
    stage_cache_dir: Optional[str] = None  # default: <cache_dir>/stages
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    calibrator: CalibratorConfig = field(default_factory=CalibratorConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    compare: CompareConfig = field(default_factory=CompareConfig)
    verdict: VerdictConfig = field(default_factory=VerdictConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)


def register() -> None:
    """Register the schema as ``base_config`` (idempotent)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="base_config", node=Settings)


_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_plain_name(key: str, value: Any) -> None:
    """``value`` names a file or directory: a plain name that cannot leave its parent
    directory (no ``/``, no ``..``, not hidden). ConfigError otherwise."""
    if not isinstance(value, str) or not _PLAIN_NAME.match(value) or ".." in value:
        raise ConfigError(f"config key {key} must be a plain name (it names a directory or "
                          "file, which must stay inside its parent)", where=key, value=value,
                          fix=f"use letters, digits and _ . - only, e.g. {key}=my_experiment")


def _choice(key: str, value: Any, allowed: tuple[str, ...] | list[str]) -> None:
    if value not in allowed:
        raise ConfigError(f"config key {key} must be one of {list(allowed)}", value=value,
                          fix=f"set {key}={allowed[0]} (or another listed value)")


def _positive(key: str, value: float | int | None, *, allow_none: bool = False,
              allow_zero: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"config key {key} must be {'>= 0' if allow_zero else '> 0'}",
                          value=value, fix=f"set {key} to a positive number")


def validate(s: Settings) -> Settings:
    """Range checks that types cannot express. Raises ConfigError (one line)."""
    check_plain_name("experiment_name", s.experiment_name)
    _choice("model.kind", s.model.kind, ("zoo", "onnx", "hub"))
    if s.model.kind == "onnx" and not s.model.path:
        raise ConfigError("model=onnx needs a file", where="model.path", value=s.model.path,
                          fix="add model.path=/path/to/model.onnx")
    if s.model.kind == "hub" and not s.model.hub_id:
        raise ConfigError("model.kind=hub needs a model id", where="model.hub_id",
                          value=s.model.hub_id, fix="add model.hub_id=<org/name or local dir>")
    _choice("model.pooling", s.model.pooling, ("mean", "cls"))
    _choice("data.source", s.data.source, ("embedded", "local", "hub"))
    _choice("data.kind", s.data.kind, ("text", "image"))
    if s.data.kind == "image":
        validate_image(s)
    elif s.model.head.n_train is not None:
        raise ConfigError("model.head.n_train applies to image zoo models only",
                          where="model.head.n_train", value=s.model.head.n_train,
                          fix="remove it (text heads are fitted on the whole train split)")
    if s.data.source in ("local", "hub") and not s.data.path:
        raise ConfigError(f"data.source={s.data.source} needs a path", where="data.path",
                          value=s.data.path,
                          fix="add data.path=<file.csv|json|parquet> (local) or <dataset id> (hub)")
    if s.data.format is not None:
        _choice("data.format", s.data.format, ("csv", "json", "parquet"))
    if not 0.0 < s.data.eval_fraction < 1.0:
        raise ConfigError("config key data.eval_fraction must be in (0, 1)",
                          value=s.data.eval_fraction, fix="e.g. data.eval_fraction=0.2")
    _positive("data.max_length", s.data.max_length)
    _positive("data.batch_size", s.data.batch_size)
    _positive("data.calib.num_samples", s.data.calib.num_samples)
    _positive("data.eval.limit", s.data.eval.limit, allow_none=True)
    if not s.calibrator.methods:
        raise ConfigError("config key calibrator.methods is empty", value=[],
                          fix=f"list at least one of {list(CALIBRATOR_NAMES)}")
    for i, m in enumerate(s.calibrator.methods):
        _choice(f"calibrator.methods[{i}]", m, CALIBRATOR_NAMES)
    if not 0.0 < s.calibrator.percentile <= 100.0:
        raise ConfigError("config key calibrator.percentile must be in (0, 100]",
                          value=s.calibrator.percentile, fix="e.g. calibrator.percentile=99.99")
    _positive("calibrator.num_bins", s.calibrator.num_bins)
    if s.calibrator.num_bins < 2 * s.calibrator.num_quant_bins:
        raise ConfigError("config key calibrator.num_bins must be >= 2 x num_quant_bins",
                          value=s.calibrator.num_bins, fix="e.g. calibrator.num_bins=2048")
    _positive("calibrator.batch_size", s.calibrator.batch_size)
    _positive("calibrator.bootstrap", s.calibrator.bootstrap, allow_zero=True)
    _choice("precision.remainder", s.precision.remainder, ("fp16", "fp32"))
    for pattern, prec in s.precision.force.items():
        _choice(f"precision.force[{pattern}]", prec, ("int8", "fp16", "fp32"))
    _positive("precision.search.max_full_evals", s.precision.search.max_full_evals, allow_zero=True)
    _positive("precision.search.subset", s.precision.search.subset)
    _positive("precision.search.measure_top", s.precision.search.measure_top, allow_zero=True)
    _positive("precision.search.max_minutes", s.precision.search.max_minutes, allow_zero=True)
    _choice("backend.name", s.backend.name, ("ort", "trt"))
    _choice("target", s.target, ("tensorrt", "ort_cpu"))
    if s.target == "ort_cpu" and s.backend.name == "trt":
        raise ConfigError("target=ort_cpu artifacts are for ONNX Runtime, not TensorRT",
                          where="target", value=s.target,
                          fix="use target=tensorrt with backend=trt, or backend=ort")
    _positive("backend.batch_size", s.backend.batch_size)
    _positive("compare.subset", s.compare.subset)
    _positive("compare.batch_size", s.compare.batch_size)
    _positive("compare.floor_multiple", s.compare.floor_multiple)
    _positive("compare.backend_check_subset", s.compare.backend_check_subset, allow_zero=True)
    _positive("compare.fp16_range_samples", s.compare.fp16_range_samples)
    _choice("verdict.metric", s.verdict.metric, ("accuracy", "macro_f1"))
    _choice("verdict.margin_kind", s.verdict.margin_kind, ("relative", "absolute"))
    if s.verdict.margin_kind == "relative" and not 0.0 < s.verdict.margin < 1.0:
        raise ConfigError("config key verdict.margin (relative) must be in (0, 1)",
                          value=s.verdict.margin, fix="e.g. verdict.margin=0.01 for 99% of FP32")
    if s.verdict.margin_kind == "absolute" and s.verdict.margin < 0:
        raise ConfigError("config key verdict.margin (absolute) must be >= 0",
                          value=s.verdict.margin, fix="e.g. verdict.margin=0.005")
    if not 0.0 < s.verdict.alpha < 1.0:
        raise ConfigError("config key verdict.alpha must be in (0, 1)", value=s.verdict.alpha,
                          fix="e.g. verdict.alpha=0.05")
    _positive("verdict.n_boot", s.verdict.n_boot)
    for i, f in enumerate(s.report.formats):
        _choice(f"report.formats[{i}]", f, ("json", "md", "html"))
    validate_backend_bench(s)
    return s


def validate_backend_bench(s: Settings) -> None:
    """backend.providers / provider_options and the bench (latency) settings."""
    for p in s.backend.provider_options:
        if p not in s.backend.providers:
            raise ConfigError("config key backend.provider_options names a provider that "
                              "backend.providers does not request", value=p,
                              fix=f"add {p} to backend.providers or drop its options")
    b = s.bench
    if not b.batch_sizes:
        raise ConfigError("config key bench.batch_sizes is empty", value=[],
                          fix="e.g. bench.batch_sizes=[1,32], or bench.enabled=false")
    for i, n in enumerate(b.batch_sizes):
        _positive(f"bench.batch_sizes[{i}]", n)
    if len(set(b.batch_sizes)) != len(b.batch_sizes):
        raise ConfigError("config key bench.batch_sizes repeats a value",
                          value=list(b.batch_sizes), fix="list each batch size once")
    _positive("bench.warmup", b.warmup, allow_zero=True)
    _positive("bench.min_repeats", b.min_repeats)
    if b.repeats < b.min_repeats:
        raise ConfigError("config key bench.repeats must be >= bench.min_repeats",
                          value=b.repeats, fix=f"set bench.repeats >= {b.min_repeats}")
    _positive("bench.max_seconds", b.max_seconds, allow_zero=True)
    _positive("bench.feeds", b.feeds)
    _positive("bench.n_boot", b.n_boot)
    if not 0.0 < b.level < 1.0:
        raise ConfigError("config key bench.level must be in (0, 1)", value=b.level,
                          fix="e.g. bench.level=0.95")
    _positive("bench.target_qps", b.target_qps)
    _positive("bench.p99_budget_ms", b.p99_budget_ms)


def validate_image(s: Settings) -> None:
    """Image data settings (data.kind=image)."""
    im = s.data.image
    _positive("data.image.size", im.size)
    _choice("data.image.channels", im.channels, (3, 1))
    _choice("data.image.resize", im.resize, ("bilinear", "none"))
    _choice("data.image.layout", im.layout, ("NCHW", "NHWC"))
    for key in ("mean", "std"):
        values = getattr(im, key)
        if len(values) != im.channels:
            raise ConfigError(f"config key data.image.{key} needs one value per channel",
                              value=list(values), fix=f"give {im.channels} values "
                              f"(data.image.channels={im.channels})")
    if any(v <= 0 for v in im.std):
        raise ConfigError("config key data.image.std must be positive", value=list(im.std),
                          fix="e.g. data.image.std=[0.229,0.224,0.225] (ImageNet)")
    if s.model.kind == "hub":
        raise ConfigError("model=hub exports text encoders; it cannot take image data",
                          where="model.kind", value="hub",
                          fix="use model=mobilenet_fashion or model=onnx with data.kind=image")
    _positive("model.head.n_train", s.model.head.n_train, allow_none=True)


def build(cfg: DictConfig | dict) -> Settings:
    """Composed config -> validated :class:`Settings`. One ConfigError line on any problem."""
    try:
        schema = OmegaConf.structured(Settings)
        merged = OmegaConf.merge(schema, cfg if isinstance(cfg, DictConfig) else OmegaConf.create(cfg))
        obj = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(omegaconf_message(exc),
                          fix="see `python -m quantkit --cfg job` for the valid keys") from exc
    assert isinstance(obj, Settings)
    return apply_target(validate(obj))


def target_overrides(s: Settings) -> dict[str, Any]:
    """What the deployment target forces, as dotted config keys -> values: target=ort_cpu
    runs the remainder in FP32 (ONNX Runtime CPU has no fast FP16 kernels). The run record's
    config has these written in, so it shows the configuration that ran."""
    return {"precision.remainder": "fp32"} if s.target == "ort_cpu" else {}


def apply_target(s: Settings) -> Settings:
    """Apply :func:`target_overrides` to ``s`` (logged; the run record notes it)."""
    for dotted, value in target_overrides(s).items():
        *parents, leaf = dotted.split(".")
        node = s
        for key in parents:
            node = getattr(node, key)
        if getattr(node, leaf) != value:
            import logging

            logging.getLogger(__name__).info(
                "target=%s: %s %s -> %s", s.target, dotted, getattr(node, leaf), value)
            setattr(node, leaf, value)
    return s


def omegaconf_message(exc: BaseException) -> str:
    """One line from an OmegaConf error: the key, then what was wrong."""
    key = getattr(exc, "full_key", None)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "could not be converted to" in first or "Value '" in first:
        first = first.replace(" of type 'str'", "")
    return f"config key {key}: {first}" if key else first


def instantiate(node: Any, **kwargs: Any) -> Any:
    """Instantiate ``node._target_``; only ``quantkit.*`` targets are allowed."""
    target = node.get("_target_") if hasattr(node, "get") else None
    if not isinstance(target, str) or not target.startswith("quantkit."):
        raise ConfigError("only quantkit.* targets may be instantiated", where="_target_",
                          value=target, fix="point _target_ at a quantkit class or function")
    module_name, _, attr = target.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("_target_ does not name a quantkit class or function",
                          where="_target_", value=target, fix="check the spelling") from exc
    if not callable(obj) or not str(getattr(obj, "__module__", "")).startswith("quantkit."):
        # e.g. quantkit.assets.subprocess: reachable through a quantkit module, not ours
        raise ConfigError("only classes and functions defined in quantkit may be "
                          "instantiated", where="_target_", value=target,
                          fix="point _target_ at a quantkit class or function")
    params = {k: v for k, v in dict(node).items() if k != "_target_"}
    params.update(kwargs)
    return obj(**params)
