"""Typed settings: dataclass schemas registered in Hydra's ConfigStore, validated once.

``conf/config.yaml`` lists ``base_config`` (the schema below) first, so Hydra type-checks
every override while composing. :func:`build` turns the composed DictConfig into plain
frozen-ish dataclasses and checks ranges that types cannot express; every problem becomes
one :class:`~quantkit.errors.ConfigError` line naming the key, the value and the fix.
"""

from __future__ import annotations

import importlib
import numbers
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from quantkit.errors import ConfigError
from quantkit.graph.weights import WEIGHTED_OPS
from quantkit.ptq.recipe import RECIPE_NAMES, ROUNDING_METHODS, Recipe

CALIBRATOR_NAMES = ("minmax", "percentile", "entropy", "mse")
#: verdict.metric: labeled (accuracy, macro_f1) and label-free per-example scores vs FP32
VERDICT_METRICS = ("accuracy", "macro_f1", "agreement", "kl", "abs_logit", "cosine",
                   "recall_at_k")


@dataclass
class HeadConfig:
    """Classification head fitted with scikit-learn on the train split (zoo models)."""

    C: float = 1.0
    max_iter: int = 2000
    # pose the fit on standardized features (quantkit/models/head.py solve_logistic_head):
    # the same kind of optimum, far better conditioned when the features' scales differ
    standardize: bool = False
    # image zoo models: fit on a seeded subset of this many train images (null = all); the
    # calibration images are then drawn from the train images the head never saw
    n_train: Optional[int] = None


@dataclass
class OutputConfig:
    """Which model output is compared, what it is, and how token-level outputs are pooled."""

    name: Optional[str] = None  # the output to compare; default: the model's first output
    # auto: rank 2 [B, C] with labels -> logits; rank 3 [B, T, H] or no labels -> embedding
    kind: str = "auto"  # auto | logits | embedding
    pooling: str = "mean"  # token-level [B, T, H] outputs: mean (attention-masked) | cls | none


@dataclass
class InputsConfig:
    """Model input names for the tokenizer's fields (null: the field's own name)."""

    input_ids: Optional[str] = None
    attention_mask: Optional[str] = None
    token_type_ids: Optional[str] = None  # fed only when the model has this input


@dataclass
class ModelConfig:
    kind: str = MISSING  # zoo | onnx | hub
    name: str = MISSING
    path: Optional[str] = None  # kind=onnx: the ONNX file
    hub_id: Optional[str] = None  # kind=hub: a Hugging Face model id or local directory
    output: OutputConfig = field(default_factory=OutputConfig)
    inputs: InputsConfig = field(default_factory=InputsConfig)
    opset: int = 17
    pooling: str = "mean"  # kind=hub: mean | cls
    trust_remote_code: bool = False
    head: HeadConfig = field(default_factory=HeadConfig)


@dataclass
class TrainSplitConfig:
    # examples the head is fitted on (zoo / hub text models): whole groups, trimmed to
    # exactly this many; null = every example left after test, dev and calibration
    size: Optional[int] = None


@dataclass
class CalibSplitConfig:
    num_samples: int = 256  # calibration examples: whole groups, disjoint from every split
    warn_below: int = 64  # fewer: a named warning (calib_small): ranges may be unstable
    min_samples: int = 8  # fewer: refused (ConfigError at data.calib.num_samples)


@dataclass
class DevSplitConfig:
    """The split every choice is made on (calibrator, layer ranking, search)."""

    size: Optional[int] = None  # examples (whole groups); overrides data.dev_fraction
    limit: Optional[int] = None  # seeded subsample, stratified by label, after splitting


@dataclass
class TestSplitConfig:
    """The split the sign-off is evaluated on, once per candidate."""

    __test__ = False  # not a pytest test class

    limit: Optional[int] = None  # seeded subsample, stratified by label, after splitting


@dataclass
class EvalSplitConfig:
    # deprecated alias of data.test.limit (the test split was called "eval")
    limit: Optional[int] = None


@dataclass
class ImageConfig:
    """How images become model input (data.kind=image): resize, channels, normalization."""

    size: int = 112  # resized to size x size
    channels: int = 3  # 3: grayscale replicated; 1: RGB reduced to luma
    mean: list[float] = field(default_factory=lambda: [0.485, 0.456, 0.406])  # on [0, 1]
    std: list[float] = field(default_factory=lambda: [0.229, 0.224, 0.225])
    resize: str = "bilinear"  # bilinear (as torch, align_corners=False) | none
    layout: str = "NCHW"  # NCHW | NHWC: the model input's layout
    # RGB | BGR: the channel order the model was trained on (OpenCV / Caffe models: BGR);
    # mean and std are given in that order
    channel_order: str = "RGB"
    # image files with transparency: composite over white | black, or drop the alpha channel
    alpha: str = "white"


@dataclass
class DataConfig:
    name: str = MISSING
    kind: str = "text"  # text | image
    source: str = "embedded"  # embedded | local | hub
    path: Optional[str] = None  # local: csv/json/parquet file(s) or image folder; hub: id
    format: Optional[str] = None  # local: csv | json | parquet (default: from the suffix)
    encoding: Optional[str] = None  # local csv/json text encoding (default utf-8), e.g. latin-1
    hub_config: Optional[str] = None
    train_split: str = "train"  # hub datasets that come pre-split
    eval_split: Optional[str] = None  # hub: a named split used as the test split
    text_column: str = "text"
    image_column: str = "image"  # hub image datasets: the column with the images
    # null: label-free data (no labels; verdicts on agreement with FP32). Image folders
    # without class subfolders are label-free whatever this says.
    label_column: Optional[str] = "label"
    group_column: Optional[str] = None  # split by this column: no group in two splits
    label_names: list[str] = field(default_factory=list)  # class id -> name
    label_map: dict[str, int] = field(default_factory=dict)  # raw label value -> class id
    drop_values: list[str] = field(default_factory=list)  # labels whose rows are dropped
    # fraction of the examples (whole groups) in the test split, unless the source comes
    # with one (Fashion-MNIST's test images, data.eval_split); null: data.eval_fraction
    test_fraction: Optional[float] = None
    eval_fraction: Optional[float] = None  # deprecated alias of test_fraction (default 0.2)
    # fraction of the examples (whole groups) in the dev split; null: whatever is left
    # after test, calibration and data.train.size
    dev_fraction: Optional[float] = 0.2
    tokenizer: Optional[str] = None  # tokenizer.json / vocab.txt / directory / hub name
    lowercase: Optional[bool] = None  # vocab.txt tokenizers: default tokenizer_config.json, else true
    max_length: int = 128  # tokens; at most the model's limit (tokenizer_config / config.json)
    batch_size: int = 32
    train: TrainSplitConfig = field(default_factory=TrainSplitConfig)
    calib: CalibSplitConfig = field(default_factory=CalibSplitConfig)
    dev: DevSplitConfig = field(default_factory=DevSplitConfig)
    test: TestSplitConfig = field(default_factory=TestSplitConfig)
    eval: EvalSplitConfig = field(default_factory=EvalSplitConfig)
    image: ImageConfig = field(default_factory=ImageConfig)


DEFAULT_TEST_FRACTION = 0.2


def resolve_test_fraction(d: DataConfig) -> tuple[str, float]:
    """(the key the user set, the test fraction): data.test_fraction, else its deprecated
    alias data.eval_fraction, else the default 0.2."""
    if d.test_fraction is not None:
        return "data.test_fraction", d.test_fraction
    if d.eval_fraction is not None:
        return "data.eval_fraction", d.eval_fraction
    return "data.test_fraction", DEFAULT_TEST_FRACTION


def resolve_test_limit(d: DataConfig) -> tuple[str, Optional[int]]:
    """(key, limit) of the test split: data.test.limit, else its alias data.eval.limit."""
    if d.test.limit is not None:
        return "data.test.limit", d.test.limit
    return ("data.eval.limit" if d.eval.limit is not None else "data.test.limit"), d.eval.limit


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
    max_minutes: float = 90.0  # wall-clock stop (an error, never a smaller answer)
    subset: int = 256  # eval examples used to measure per-layer sensitivity
    # re-rank the proxy's top N layers by measured damage (0 = proxy only); the default
    # covers every layer of both shipped models (one subset evaluation per layer)
    measure_top: int = 64
    # only: damage with only that layer INT8 (the rest FP16) - low noise, each layer's own
    # contribution; restore: damage of full INT8 minus damage with only that layer FP16
    measure_mode: str = "only"
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
    # op types kept FP32 in an FP16 remainder (normalizations: TensorRT 11 computes them in
    # their input dtype); null = the default list (precision/fp16_rules.py), [] = none
    fp32_ops: Optional[list[str]] = None
    # Q/DQ scales of FP16-remainder artifacts: fp32 (opset >= 13, Cast before each Q) | fp16
    # (opset 19 Q/DQ with float16 scales: no Cast(fp16->fp32) -> Q pairs)
    qdq_scale_dtype: str = "fp32"
    # quantized formats the run may write: int8 | fp8 (FP8 E4M3 needs gpu.sm >= 89;
    # quantkit/precision/gpus.py refuses a format the target GPU cannot run)
    formats: list[str] = field(default_factory=lambda: ["int8"])
    search: SearchConfig = field(default_factory=SearchConfig)


#: Oldest TensorRT major version quantkit builds with (I/O tensor API, strongly typed networks).
TRT_MIN_MAJOR = 10


@dataclass
class TrtConfig:
    """TensorRT engine settings (``backend.trt.*``): the one schema for building, running and
    timing engines (``quantkit.backends.trt.EngineSettings`` is this class). Precision comes
    from the graph only.

    Shapes: the batch dim (axis 0) takes min/opt/max_batch; other dynamic dims of a text
    model take the sequence range, of an image model ``image_range`` (default: the run's
    ``data.image.size``), unless ``dim_overrides`` (by ONNX dim name, e.g. ``height``) or
    ``shape_overrides`` (by input name: ``[min_shape, opt_shape, max_shape]``) say otherwise.
    Validated on construction (one ConfigError naming ``backend.trt.<key>``).
    """

    workspace_mb: int = 4096
    min_batch: int = 1
    opt_batch: int = 32
    max_batch: int = 64
    min_sequence: int = 1
    opt_sequence: Optional[int] = 128
    max_sequence: Optional[int] = 128
    image_range: Optional[list[int]] = None  # [min, opt, max] of dynamic H/W dims of images
    dim_overrides: dict[str, list[int]] = field(default_factory=dict)
    shape_overrides: dict[str, list[list[int]]] = field(default_factory=dict)
    timing_cache: Optional[str] = None  # directory or file stem; keyed by TensorRT + GPU
    builder_optimization_level: int = 3
    tensorrt_major: Optional[int] = None  # 10 or 11 pins the major; null accepts any >= 10
    # TF32 for FP32-typed layers (TensorRT enables it by default; off here so "fp32" is FP32)
    tf32: bool = False
    cuda_graphs: bool = False  # latency: replay one captured CUDA graph per input shape
    # one more optimization profile per bench batch size (batch fixed there, TensorRT tunes for
    # it); profile 0 stays the general one every other stage runs on
    latency_profiles: bool = False
    rebuild: bool = False
    device: int = 0  # CUDA device index: build, run and time on it

    def __post_init__(self) -> None:
        check_trt_config(self)


def _trt_shape(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ConfigError("a shape must be a list of integers", where=where, value=value,
                          fix="write it like [1, 128]")
    dims = list(value)
    if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in dims):
        raise ConfigError("a shape must be a list of integers", where=where, value=value,
                          fix="write it like [1, 128]")
    return tuple(int(d) for d in dims)


def _trt_range(value: Any, where: str) -> tuple[int, int, int]:
    rng = _trt_shape(value, where)
    if len(rng) != 3 or not 1 <= rng[0] <= rng[1] <= rng[2]:
        raise ConfigError("a dimension range must be [min, opt, max] with 1 <= min <= opt <= max",
                          where=where, value=value, fix="e.g. [1, 128, 512]")
    return rng  # type: ignore[return-value]


def check_trt_config(t: TrtConfig) -> None:
    """Range checks of ``backend.trt``; normalizes shapes to int tuples. ConfigError (one line)."""
    def positive(name: str, *, allow_zero: bool = False) -> None:
        value = getattr(t, name)
        if (not isinstance(value, int) or isinstance(value, bool)
                or value < (0 if allow_zero else 1)):
            raise ConfigError(f"backend.trt.{name} must be a {'non-negative' if allow_zero else 'positive'} "
                              "integer", where=f"backend.trt.{name}", value=value,
                              fix=f"e.g. backend.trt.{name}={0 if allow_zero else 1}")

    for name in ("workspace_mb", "min_batch", "opt_batch", "max_batch", "min_sequence"):
        positive(name)
    positive("device", allow_zero=True)
    if not t.min_batch <= t.opt_batch <= t.max_batch:
        raise ConfigError("batch range must satisfy min_batch <= opt_batch <= max_batch",
                          where="backend.trt.min_batch/opt_batch/max_batch",
                          value=(t.min_batch, t.opt_batch, t.max_batch),
                          fix="e.g. min_batch=1 opt_batch=8 max_batch=64")
    if (t.opt_sequence is None) != (t.max_sequence is None):
        raise ConfigError("set both backend.trt.opt_sequence and backend.trt.max_sequence, or "
                          "neither", where="backend.trt.opt_sequence/max_sequence",
                          value=(t.opt_sequence, t.max_sequence),
                          fix="e.g. opt_sequence=128 max_sequence=512")
    if t.opt_sequence is not None:
        positive("opt_sequence")
        positive("max_sequence")
        if not t.min_sequence <= t.opt_sequence <= t.max_sequence:
            raise ConfigError("sequence range must satisfy min <= opt <= max",
                              where="backend.trt.min_sequence/opt_sequence/max_sequence",
                              value=(t.min_sequence, t.opt_sequence, t.max_sequence),
                              fix="e.g. min_sequence=1 opt_sequence=128 max_sequence=512")
    lvl = t.builder_optimization_level
    if not isinstance(lvl, int) or isinstance(lvl, bool) or not 0 <= lvl <= 5:
        raise ConfigError("backend.trt.builder_optimization_level must be an integer in 0..5",
                          where="backend.trt.builder_optimization_level", value=lvl,
                          fix="3 is TensorRT's default; 5 searches longest")
    major = t.tensorrt_major
    if major is not None and (not isinstance(major, int) or major < TRT_MIN_MAJOR):
        raise ConfigError(f"backend.trt.tensorrt_major must be >= {TRT_MIN_MAJOR} or null",
                          where="backend.trt.tensorrt_major", value=major, fix="10, 11 or null")
    if t.image_range is not None:
        t.image_range = _trt_range(t.image_range, "backend.trt.image_range")
    t.dim_overrides = {str(k): _trt_range(v, f"backend.trt.dim_overrides.{k}")
                       for k, v in dict(t.dim_overrides).items()}
    overrides: dict[str, tuple] = {}
    for name, shapes in dict(t.shape_overrides).items():
        where = f"backend.trt.shape_overrides.{name}"
        fix = "e.g. [[1, 16], [8, 128], [64, 512]]"
        if isinstance(shapes, (str, bytes)) or not hasattr(shapes, "__iter__"):
            raise ConfigError("a shape override must be [min_shape, opt_shape, max_shape]",
                              where=where, value=shapes, fix=fix)
        triple = [_trt_shape(s, where) for s in shapes]
        if len(triple) != 3 or len({len(s) for s in triple}) != 1:
            raise ConfigError("a shape override must be three shapes of equal rank "
                              "[min_shape, opt_shape, max_shape]", where=where, value=shapes,
                              fix=fix)
        if not all(1 <= a <= b <= c for a, b, c in zip(*triple)):
            raise ConfigError("shape override dims must satisfy 1 <= min <= opt <= max",
                              where=where, value=shapes, fix=fix)
        overrides[str(name)] = (triple[0], triple[1], triple[2])
    t.shape_overrides = overrides  # type: ignore[assignment]


@dataclass
class BackendConfig:
    name: str = "ort"
    providers: list[str] = field(default_factory=lambda: ["CPUExecutionProvider"])
    # per provider, e.g. {TensorrtExecutionProvider: {trt_engine_cache_enable: true}}
    provider_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    disabled_optimizers: list[str] = field(default_factory=lambda: ["WeightBiasQuantization"])
    intra_op_threads: int = 0
    batch_size: int = 64
    # how evaluation runs Q/DQ on ONNX Runtime: auto (exact for target=tensorrt, fused for
    # ort_cpu) | exact | fused | integer (backends/ort.py QDQ_MODES)
    qdq_mode: str = "auto"
    trt: TrtConfig = field(default_factory=TrtConfig)


@dataclass
class CompareConfig:
    subset: int = 256  # eval examples for the per-layer debug run
    batch_size: int = 16  # per-layer debug run: every tensor is an output, keep batches small
    # per-layer debug run: at most this many compared tensors fetched per inference (more
    # are fetched in several passes over the same batch: same numbers, bounded memory)
    max_outputs_per_run: int = 64
    floor_multiple: float = 10000.0  # flag a layer whose INT8 noise > this x its FP16 noise (40 dB)
    # dev examples for the engine check (run/backend_check.py): the artifact as the deployment
    # runtime runs it vs the execution its numbers come from; the whole dev split when
    # smaller (the gate must show the engine within its tolerance: more examples, tighter
    # bound); 0: no check, so no candidate can be recommended where the check gates
    backend_check_subset: int = 100000
    # the engine's share of the declared margin (run/deployment.py, verdict/engine_gate.py):
    # the sign-off decides with the rest, so the deployed artifact has one bound
    numerics_margin_share: float = 0.5
    fp16_range_samples: int = 64  # calibration samples scanned for FP16 overflow


@dataclass
class VerdictConfig:
    # accuracy | macro_f1 (labels); label-free, per-example scores vs FP32: agreement,
    # kl, abs_logit (logit outputs), cosine, recall_at_k (embedding outputs)
    metric: str = "accuracy"
    margin: float = 0.01
    margin_kind: str = "relative"  # relative | absolute
    alpha: float = 0.05  # two-sided interval level 1 - alpha; sign-off is one-sided alpha / 2
    n_boot: int = 2000
    # dev / test sign-off (quantkit/verdict/protocol.py)
    family: str = "fixed_sequence"  # familywise control: fixed_sequence (dev order) | holm
    min_n: int = 100  # fewer examples: INCONCLUSIVE whatever the interval
    min_groups: int = 75  # grouped data with fewer groups: INCONCLUSIVE (group_validity.py)
    power: float = 0.8  # planned power of the test split at the margin
    max_flip_rate: Optional[float] = 0.10  # churn gate vs FP32 predictions; null = no gate
    min_agreement: float = 0.99  # the declared minimum for metric=agreement (label-free)
    # Hydra multirun jobs compare settings on dev and leave the test split alone; the
    # sweep's chosen setting is signed off by one plain run (true: every job signs off)
    signoff_in_sweeps: bool = False
    # a re-test (e.g. an INCONCLUSIVE re-tested on a grown or fresh test split) is another
    # look: the id (or a unique prefix, >= 8 hex) of the earlier look it replaces
    # (record.signoff.ledger.look_id, `quantkit ledger`); the new look joins that look's
    # lineage and is charged (quantkit/verdict/ledger.py)
    supersedes: Optional[str] = None
    # the persistent test ledger (SQLite): every look at the test split of a model, across
    # runs; null = <cache_dir>/ledger.sqlite. A team shares one file on one host's local disk
    ledger_path: Optional[str] = None
    # a family member whose planned power on the test split (for the decision rule used,
    # at the look's alpha) is below this is not tested: the test split is not spent on it
    min_power: float = 0.5
    # simulated test splits per planned power (quantkit/verdict/rule_power.py); 0: the
    # analytic approximation only (simulation benchmarks that plan thousands of times)
    power_sims: int = 400
    # label-free scores vs FP32, tested as the share of examples within a per-example
    # tolerance (exact binomial bound; quantkit/verdict/family.py score_signoff):
    min_cosine: float = 0.99  # metric=cosine: per-example floor of the cosine to FP32
    recall_k: int = 10  # metric=recall_at_k: neighbours per query, searched in the gallery
    min_recall: float = 0.9  # metric=recall_at_k: per-query floor of recall@k of FP32's
    gallery_size: int = 1000  # recall@k gallery: seeded train examples (all when fewer)
    max_kl: float = 0.01  # metric=kl: per-example ceiling of KL(FP32 || candidate), nats
    max_abs_logit: float = 0.1  # metric=abs_logit: per-example ceiling of mean |logit delta|
    # at most this share of examples may be outside the tolerance (0.05: the 5% quantile
    # of cosine >= min_cosine, the 95% quantile of KL <= max_kl); PASS when the exact lower
    # bound of the share within it is above 1 - score_quantile
    score_quantile: Optional[float] = 0.05


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
class PtqAutoConfig:
    """``ptq.recipe=auto``: the recipes tried on dev (quantkit/run/recipe_choice.py).

    ``budget``: at most this many recipe evaluations (each one dev-subset evaluation of full
    INT8); ``subset``: dev examples a recipe is scored on (mean KL vs FP32 for logits,
    1 - mean cosine for embeddings); ``calibrator``: the calibrator whose plan scores a
    recipe."""

    budget: int = 12
    subset: int = 512
    calibrator: str = "percentile"


@dataclass
class PtqConfig(Recipe):
    """Post-training steps on the graph that gets quantized (quantkit/ptq; the stage
    quantkit/run/ptq_stage.py). ``recipe``: ``auto`` (default: chosen per model on dev among the
    declared recipes), a named recipe (``none``, ``generic``, ``bert``, ``mobilenet``:
    quantkit/ptq/recipe.py), or ``custom``: exactly the step keys below (the fields of
    :class:`~quantkit.ptq.recipe.Recipe`, all off by default). The FP32 reference stays the
    original model; every rewrite is proven to keep its FP32 function on the run's own
    calibration data, or dropped with its reason."""

    recipe: str = "auto"
    range_search_samples: int = 32  # calibration examples the range search captures (memory)
    auto: PtqAutoConfig = field(default_factory=PtqAutoConfig)


@dataclass
class GpuConfig:
    """The target GPU (``gpu.*``): which quantized formats exist and whose cost table applies."""

    # compute capability (75, 80, 86, 87, 89, 90, 100, 120) or a GPU name (T4, A100, A10, Orin,
    # L4, L40S, H100, H200, B200: quantkit/precision/gpus.py); null: not stated (INT8 only)
    sm: Optional[str] = None


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
    ptq: PtqConfig = field(default_factory=PtqConfig)
    gpu: GpuConfig = field(default_factory=GpuConfig)


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
    _choice("model.output.kind", s.model.output.kind, ("auto", "logits", "embedding"))
    _choice("model.output.pooling", s.model.output.pooling, ("mean", "cls", "none"))
    _choice("data.source", s.data.source, ("embedded", "local", "hub"))
    _choice("data.kind", s.data.kind, ("text", "image"))
    if s.data.kind == "image":
        validate_image(s)
    elif s.model.head.n_train is not None:
        raise ConfigError("model.head.n_train applies to image zoo models only",
                          where="model.head.n_train", value=s.model.head.n_train,
                          fix="remove it; for text models set data.train.size")
    if s.data.source in ("local", "hub") and not s.data.path:
        raise ConfigError(f"data.source={s.data.source} needs a path", where="data.path",
                          value=s.data.path,
                          fix="add data.path=<file.csv|json|parquet> (local) or <dataset id> (hub)")
    if s.data.format is not None:
        _choice("data.format", s.data.format, ("csv", "json", "parquet"))
    validate_data_splits(s.data)
    _positive("data.max_length", s.data.max_length)
    _positive("data.batch_size", s.data.batch_size)
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
    _choice("precision.search.measure_mode", s.precision.search.measure_mode, ("only", "restore"))
    _positive("precision.search.max_minutes", s.precision.search.max_minutes, allow_zero=True)
    _choice("backend.name", s.backend.name, ("ort", "trt"))
    _choice("precision.qdq_scale_dtype", s.precision.qdq_scale_dtype, ("fp32", "fp16"))
    if s.precision.qdq_scale_dtype == "fp16" and s.precision.remainder != "fp16":
        raise ConfigError("FP16 Q/DQ scales need an FP16 remainder",
                          where="precision.qdq_scale_dtype", value="fp16",
                          fix="set precision.remainder=fp16 (not with target=ort_cpu), or keep "
                              "precision.qdq_scale_dtype=fp32")
    _choice("backend.qdq_mode", s.backend.qdq_mode, ("auto", "exact", "fused", "integer"))
    _choice("target", s.target, ("tensorrt", "ort_cpu"))
    from quantkit.precision.gpus import check_formats

    check_formats(s.gpu.sm, s.precision.formats)
    if "fp8" in s.precision.formats and s.target != "tensorrt":
        raise ConfigError("format fp8 is written for TensorRT only", where="precision.formats",
                          value=s.target, fix="use target=tensorrt, or precision.formats=[int8]")
    if "fp8" in s.precision.formats:
        from quantkit.calibrate.calibrators import FP8_CALIBRATORS

        if not any(m in FP8_CALIBRATORS for m in s.calibrator.methods):
            raise ConfigError("format fp8 requested, but no calibrator in calibrator.methods has "
                              "an FP8 form", where="calibrator.methods",
                              value=list(s.calibrator.methods),
                              fix=f"add one of {sorted(FP8_CALIBRATORS)} (e.g. "
                                  "calibrator.methods=[minmax,entropy])")
    if s.target == "ort_cpu" and s.backend.name == "trt":
        raise ConfigError("target=ort_cpu artifacts are for ONNX Runtime, not TensorRT",
                          where="target", value=s.target,
                          fix="use target=tensorrt with backend=trt, or backend=ort")
    _positive("backend.batch_size", s.backend.batch_size)
    _positive("compare.subset", s.compare.subset)
    _positive("compare.batch_size", s.compare.batch_size)
    _positive("compare.max_outputs_per_run", s.compare.max_outputs_per_run)
    _positive("compare.floor_multiple", s.compare.floor_multiple)
    _positive("compare.backend_check_subset", s.compare.backend_check_subset, allow_zero=True)
    share = s.compare.numerics_margin_share
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 < share < 1.0:
        raise ConfigError("config key compare.numerics_margin_share must be in (0, 1)",
                          value=share, fix="e.g. compare.numerics_margin_share=0.5: the engine "
                                           "check may use half the margin, the sign-off the rest")
    _positive("compare.fp16_range_samples", s.compare.fp16_range_samples)
    _choice("verdict.metric", s.verdict.metric, VERDICT_METRICS)
    _choice("verdict.margin_kind", s.verdict.margin_kind, ("relative", "absolute"))
    validate_ledger(s.verdict)
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
    _choice("verdict.family", s.verdict.family, ("fixed_sequence", "holm"))
    _positive("verdict.min_n", s.verdict.min_n)
    _positive("verdict.min_groups", s.verdict.min_groups)
    _positive("verdict.recall_k", s.verdict.recall_k)
    _positive("verdict.gallery_size", s.verdict.gallery_size)
    if s.verdict.score_quantile is None and s.verdict.metric in ("cosine", "recall_at_k", "kl",
                                                                  "abs_logit"):
        raise ConfigError(f"verdict.metric={s.verdict.metric} is tested as the share of "
                          "examples within a per-example tolerance; score_quantile=null (the "
                          "test of the mean) is gone: not valid for skewed or heavy-tailed "
                          "scores", where="verdict.score_quantile", value=None,
                          fix="set verdict.score_quantile=0.05 (at least 95% of examples "
                              "within the tolerance), or another share")
    for key, value in (("verdict.max_kl", s.verdict.max_kl),
                       ("verdict.max_abs_logit", s.verdict.max_abs_logit)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError(f"config key {key} must be a number > 0", value=value,
                              fix=f"e.g. {key}=0.01")
    for key, value in (("verdict.power", s.verdict.power),
                       ("verdict.min_agreement", s.verdict.min_agreement),
                       ("verdict.min_cosine", s.verdict.min_cosine),
                       ("verdict.min_recall", s.verdict.min_recall),
                       ("verdict.score_quantile", s.verdict.score_quantile),
                       ("verdict.max_flip_rate", s.verdict.max_flip_rate)):
        if value is not None and not 0.0 < value < 1.0:
            raise ConfigError(f"config key {key} must be in (0, 1)", value=value,
                              fix="e.g. verdict.power=0.8, verdict.min_agreement=0.99, "
                                  "verdict.max_flip_rate=0.10 (null: no churn gate)")
    for i, f in enumerate(s.report.formats):
        _choice(f"report.formats[{i}]", f, ("json", "md", "html"))
    validate_backend_bench(s)
    validate_ptq(s.ptq)
    if s.backend.name == "trt":
        validate_trt_shapes(s)
    return s


def validate_ledger(v: VerdictConfig) -> None:
    """verdict.supersedes (a look id), verdict.ledger_path and verdict.min_power."""
    if v.supersedes is not None and not re.fullmatch(r"[0-9a-f]{8,64}", str(v.supersedes)):
        raise ConfigError("config key verdict.supersedes must be the id of an earlier look "
                          "(8 to 64 hex characters)", value=v.supersedes,
                          fix="copy record.signoff.ledger.look_id of the run this re-test "
                              "replaces (or an id from `quantkit ledger`)")
    if v.ledger_path is not None:
        path = str(v.ledger_path).strip()
        target = Path(path).expanduser() if path else None
        if target is None or target.is_dir() or path.endswith(("/", os.sep)):
            raise ConfigError("config key verdict.ledger_path must name a file",
                              value=v.ledger_path,
                              fix="e.g. verdict.ledger_path=/srv/quantkit/ledger.sqlite (a local "
                                  "file system: SQLite's WAL mode does not work over NFS), or "
                                  "null for <cache_dir>/ledger.sqlite")
        parent = next((p for p in target.parents if p.exists()), None)
        if parent is not None and not parent.is_dir():
            raise ConfigError("config key verdict.ledger_path lies under a file",
                              value=v.ledger_path, fix=f"{parent} is a file: choose a path in a "
                                                       "directory")
    _positive("verdict.power_sims", v.power_sims, allow_zero=True)
    if isinstance(v.min_power, bool) or not isinstance(v.min_power, (int, float)) \
            or not 0.0 <= v.min_power < 1.0:
        raise ConfigError("config key verdict.min_power must be in [0, 1)", value=v.min_power,
                          fix="e.g. verdict.min_power=0.5 (0: test every declared member "
                              "whatever its planned power)")


def validate_ptq(q: PtqConfig) -> None:
    """Ranges of the ptq keys (ConfigError naming the key); step keys set beside a recipe
    that is not ``custom`` are refused (they would be ignored)."""
    _choice("ptq.recipe", q.recipe, ("auto", *RECIPE_NAMES, "custom"))
    if q.recipe != "custom":
        default = Recipe()
        changed = [k for k, v in Recipe.from_config(q).key().items()
                   if v != getattr(default, k)]
        if changed:
            raise ConfigError(f"config key ptq.{changed[0]} is set, but ptq.recipe={q.recipe} "
                              "chooses the steps", value=getattr(q, changed[0]),
                              fix="add ptq.recipe=custom to run exactly the steps you set, or "
                                  f"drop ptq.{changed[0]}")
    for key, value in (("ptq.smoothquant_alpha", q.smoothquant_alpha),
                       ("ptq.equalization_alpha", q.equalization_alpha)):
        if value is not None and not 0.0 < value < 1.0:
            raise ConfigError(f"config key {key} must be in (0, 1) or null (off)", value=value,
                              fix=f"e.g. {key}=0.8, or {key}=null")
    _choice("ptq.equalization", q.equalization, ("off", "per_channel_clip", "skip"))
    _choice("ptq.range_search_combine", q.range_search_combine, ("widest", "sum"))
    _choice("ptq.range_search_error", q.range_search_error, ("tensor", "row"))
    _choice("ptq.weight_rounding", q.weight_rounding, ROUNDING_METHODS)
    _choice("ptq.auto.calibrator", q.auto.calibrator, CALIBRATOR_NAMES)
    _positive("ptq.smoothquant_min_outlier_ratio", q.smoothquant_min_outlier_ratio,
              allow_zero=True)
    for key, value in (("ptq.equalization_iterations", q.equalization_iterations),
                       ("ptq.range_search_grid", q.range_search_grid),
                       ("ptq.range_search_samples", q.range_search_samples),
                       ("ptq.auto.budget", q.auto.budget), ("ptq.auto.subset", q.auto.subset)):
        _positive(key, value)


def _fraction(key: str, value: float | None) -> None:
    if value is not None and not 0.0 < value < 1.0:
        raise ConfigError(f"config key {key} must be in (0, 1)", value=value,
                          fix=f"e.g. {key}=0.2")


def validate_data_splits(d: DataConfig) -> None:
    """Split sizes and fractions (data.test_fraction / dev_fraction / *.size / *.limit)."""
    if (d.test_fraction is not None and d.eval_fraction is not None
            and d.test_fraction != d.eval_fraction):
        raise ConfigError("data.eval_fraction is a deprecated alias of data.test_fraction and "
                          "the two differ", where="data.eval_fraction", value=d.eval_fraction,
                          fix=f"set only data.test_fraction={d.test_fraction}")
    if (d.test.limit is not None and d.eval.limit is not None and d.test.limit != d.eval.limit):
        raise ConfigError("data.eval.limit is a deprecated alias of data.test.limit and the "
                          "two differ", where="data.eval.limit", value=d.eval.limit,
                          fix=f"set only data.test.limit={d.test.limit}")
    key, test_fraction = resolve_test_fraction(d)
    _fraction(key, test_fraction)
    _fraction("data.dev_fraction", d.dev_fraction)
    _positive("data.train.size", d.train.size, allow_none=True)
    _positive("data.dev.size", d.dev.size, allow_none=True)
    _positive("data.dev.limit", d.dev.limit, allow_none=True)
    _positive("data.test.limit", d.test.limit, allow_none=True)
    _positive("data.eval.limit", d.eval.limit, allow_none=True)
    c = d.calib
    _positive("data.calib.num_samples", c.num_samples)
    _positive("data.calib.min_samples", c.min_samples)
    if c.warn_below < c.min_samples:
        raise ConfigError("config key data.calib.warn_below must be >= data.calib.min_samples",
                          value=c.warn_below, fix=f"set data.calib.warn_below >= {c.min_samples}")
    if d.encoding is not None:
        import codecs

        try:
            codecs.lookup(d.encoding)
        except LookupError:
            raise ConfigError("config key data.encoding names no known text encoding",
                              value=d.encoding, fix="e.g. data.encoding=latin-1 or utf-8") from None


def validate_trt_shapes(s: Settings) -> None:
    """backend=trt: every batch size the run feeds (backend.batch_size, bench.batch_sizes) and
    the text length (data.max_length) must fit the engine profile ranges of ``backend.trt``,
    one clear error before any work. Inputs with ``shape_overrides`` are checked against the
    model when the engine is built (quantkit.backends.trt.check_profiles_cover)."""
    t = s.backend.trt
    if t.shape_overrides:
        return
    renamed = bool(t.dim_overrides)  # a dim override may set the batch or sequence range
    sizes = [("backend.batch_size", s.backend.batch_size)]
    if s.bench.enabled:
        sizes += [(f"bench.batch_sizes[{i}]", b) for i, b in enumerate(s.bench.batch_sizes)]
    if not renamed:
        for key, b in sizes:
            if not t.min_batch <= b <= t.max_batch:
                raise ConfigError(f"{key}={b} does not fit the TensorRT engine's batch range "
                                  f"{t.min_batch}..{t.max_batch}", where="backend.trt.max_batch",
                                  value=b, fix=f"set backend.trt.min_batch <= {b} <= "
                                               f"backend.trt.max_batch, or change {key}")
    if (s.data.kind == "text" and t.max_sequence is not None and not renamed
            and s.data.max_length > t.max_sequence):
        raise ConfigError(f"data.max_length={s.data.max_length} does not fit the TensorRT "
                          f"engine's sequence range {t.min_sequence}..{t.max_sequence}",
                          where="backend.trt.max_sequence", value=s.data.max_length,
                          fix=f"set backend.trt.max_sequence >= {s.data.max_length} (and "
                              "opt_sequence), or lower data.max_length")


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
    _choice("data.image.channel_order", im.channel_order, ("RGB", "BGR"))
    _choice("data.image.alpha", im.alpha, ("white", "black", "drop"))
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
