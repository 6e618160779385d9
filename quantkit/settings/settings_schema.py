"""The top-level Settings schema (one field per config group) and its Hydra registration."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from quantkit.settings.backend_schema import BackendConfig
from quantkit.settings.bench_schema import BenchConfig
from quantkit.settings.calibrator_schema import CalibratorConfig
from quantkit.settings.compare_schema import CompareConfig
from quantkit.settings.data_schema import DataConfig
from quantkit.settings.gpu_schema import GpuConfig
from quantkit.settings.model_schema import ModelConfig
from quantkit.settings.precision_schema import PrecisionConfig
from quantkit.settings.ptq_schema import PtqConfig
from quantkit.settings.report_schema import ReportConfig
from quantkit.settings.verdict_schema import VerdictConfig


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
