"""precision.* schema: which layers are quantized, in which formats, and the layer search."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from quantkit.graph.mixed_concat import DEFAULT_CONCAT_RANGE_RATIO
from quantkit.graph.weights import WEIGHTED_OPS


#: values of ``precision.fp8_weight_rounding`` (quantkit/run/fp8_weights.py)
FP8_WEIGHT_ROUNDING = ("auto", "nearest", "gptq")


@dataclass
class SearchConfig:
    enabled: bool = True
    max_full_evals: int = 14
    max_minutes: float = 90.0  # wall-clock stop (an error, never a smaller answer)
    subset: int = 256  # eval examples used to measure per-layer sensitivity
    # re-rank the proxy's top N layers by measured damage (0 = proxy only); the default
    # covers every layer of both shipped models (one subset evaluation per layer)
    measure_top: int = 64
    # only: damage with only that layer INT8 (the rest FP32) - low noise, each layer's own
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
    # a Concat whose inputs' calibrated amax differ by more than this (widest / narrowest), or
    # that joins box-like and score-like (Sigmoid / Softmax) inputs, never gets one Q/DQ
    # after it: its readers stay in the remainder (quantkit/graph/mixed_concat.py; the lint
    # rule concat-shared-scale). A finite number > 1; 16 leaves the narrowest input ~8 of
    # INT8's 127 steps
    concat_range_ratio: float = DEFAULT_CONCAT_RANGE_RATIO
    # Q/DQ scales of FP16-remainder artifacts: fp32 (opset >= 13, Cast before each Q) | fp16
    # (opset 19 Q/DQ with float16 scales: no Cast(fp16->fp32) -> Q pairs)
    qdq_scale_dtype: str = "fp32"
    # quantized formats the run may write: int8 | fp8 (FP8 E4M3 needs gpu.sm >= 89;
    # quantkit/precision/gpus.py refuses a format the target GPU cannot run)
    formats: list[str] = field(default_factory=lambda: ["int8"])
    # the FP8 candidates' weights: auto (GPTQ on the FP8 grid where it scores lower than
    # round-to-nearest on the dev subset) | gptq | nearest (quantkit/run/fp8_weights.py)
    fp8_weight_rounding: str = "auto"
    search: SearchConfig = field(default_factory=SearchConfig)
