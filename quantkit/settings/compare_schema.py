"""compare.* schema: the per-layer debug run and the engine check; compare checks."""

from __future__ import annotations

from dataclasses import dataclass

from quantkit.errors import ConfigError
from quantkit.settings.value_checks import _positive


@dataclass
class CompareConfig:
    subset: int = 256  # eval examples for the per-layer debug run
    batch_size: int = 16  # per-layer debug run: every tensor is an output, keep batches small
    # per-layer debug run: at most this many compared tensors fetched per inference (more
    # are fetched in several passes over the same batch: same numbers, bounded memory).
    # 256 holds every compared tensor of the zoo models in one pass: fewer passes, the same
    # peak RSS (measured: benchmarks/results/bert_int8.md, "Per-layer debug run")
    max_outputs_per_run: int = 256
    floor_multiple: float = 10000.0  # flag a layer whose INT8 noise > this x its FP16 noise (40 dB)
    # dev examples for the engine check (run/stages/backend_check.py): the artifact as the deployment
    # runtime runs it vs the execution its numbers come from; the whole dev split when
    # smaller (the gate must show the engine within its tolerance: more examples, tighter
    # bound); 0: no check, so no candidate can be recommended where the check gates
    backend_check_subset: int = 100000
    # the engine's share of the declared margin (run/deployment.py, verdict/engine_gate.py):
    # the sign-off decides with the rest, so the deployed artifact has one bound
    numerics_margin_share: float = 0.5
    fp16_range_samples: int = 64  # calibration samples scanned for FP16 overflow


def validate_compare(c: CompareConfig) -> None:
    """Subset and batch sizes, thresholds and the engine's margin share (compare.*)."""
    _positive("compare.subset", c.subset)
    _positive("compare.batch_size", c.batch_size)
    _positive("compare.max_outputs_per_run", c.max_outputs_per_run)
    _positive("compare.floor_multiple", c.floor_multiple)
    _positive("compare.backend_check_subset", c.backend_check_subset, allow_zero=True)
    share = c.numerics_margin_share
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 < share < 1.0:
        raise ConfigError("config key compare.numerics_margin_share must be in (0, 1)",
                          value=share, fix="e.g. compare.numerics_margin_share=0.5: the engine "
                                           "check may use half the margin, the sign-off the rest")
    _positive("compare.fp16_range_samples", c.fp16_range_samples)
