"""gpu.* schema: the target GPU, which decides the quantized formats and the cost table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class GpuConfig:
    """The target GPU (``gpu.*``): which quantized formats exist and whose cost table applies."""

    # compute capability (75, 80, 86, 87, 89, 90, 100, 120) or a GPU name (T4, A100, A10, Orin,
    # L4, L40S, H100, H200, B200: quantkit/precision/gpus.py); null: not stated (INT8 only)
    sm: Optional[str] = None
