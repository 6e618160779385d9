"""backend.* schema: the runtime that evaluates the models; the provider-options check."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from quantkit.errors import ConfigError
from quantkit.settings.trt_schema import TrtConfig


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


def validate_provider_options(b: BackendConfig) -> None:
    """backend.provider_options names only providers that backend.providers requests."""
    for p in b.provider_options:
        if p not in b.providers:
            raise ConfigError("config key backend.provider_options names a provider that "
                              "backend.providers does not request", value=p,
                              fix=f"add {p} to backend.providers or drop its options")
