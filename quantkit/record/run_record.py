"""RunRecord: everything a run measured, JSON-serializable. Reports render it; they compute nothing."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from quantkit.fsutil import atomic_write_json

PACKAGES = ("quantkit", "onnx", "onnxruntime", "onnx-graphsurgeon", "polygraphy", "numpy", "scipy",
            "scikit-learn", "datasets", "tokenizers", "hydra-core", "omegaconf", "torch",
            "transformers", "tensorrt")


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def host_info() -> dict[str, Any]:
    from quantkit.environment import host_facts

    return host_facts()


#: Version of the record's layout; bump when a field changes meaning. 1: issue 14's spine
#: (the recorded config is the one that ran). 2: dev / test sign-off (``signoff``; a family
#: member's ``metrics`` / ``verdict`` are on test, its ``dev`` entry on dev; every other
#: candidate's verdict is a dev verdict, ``verdict.split == "dev"``). 3: the ptq stage's own
#: section ``ptq`` (recipe, steps, the proof of every rewrite, auto's choice; was
#: ``calibration.ptq``) and the persistent test ledger (issue 24): ``signoff.alpha_one_sided``
#: is the look's alpha (``signoff.ledger``: look number, declared alpha, earlier looks),
#: ``signoff.decision`` / ``family`` may be empty when no member had the planned power to be
#: tested (``signoff.not_tested``). Older records lack them.
SCHEMA_VERSION = 3


@dataclass
class RunRecord:
    experiment: str
    run_dir: str
    command: str
    config: dict[str, Any]
    seed: int
    started: str = ""
    finished: str = ""
    host: dict[str, Any] = field(default_factory=host_info)
    packages: dict[str, str | None] = field(default_factory=package_versions)
    model: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> seconds, cached
    ptq: dict[str, Any] = field(default_factory=dict)  # recipe, steps, proofs, auto's choice
    calibration: dict[str, Any] = field(default_factory=dict)
    candidates: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> evidence
    search: dict[str, Any] = field(default_factory=dict)
    latency: dict[str, Any] = field(default_factory=dict)  # what the timings belong to, cost
    recommended: str | None = None
    recommendation: dict[str, Any] = field(default_factory=dict)  # candidate, reason, excluded
    signoff: dict[str, Any] = field(default_factory=dict)  # family, power plan, ledger, decision
    artifacts: dict[str, str] = field(default_factory=dict)  # relative path -> sha256
    stage_cache: dict[str, dict[str, int]] = field(default_factory=dict)  # stage -> hits, misses
    job: dict[str, Any] = field(default_factory=dict)  # launcher, worker host, attempt (run/job.py)
    notes: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), default=_jsonable))

    def write(self, path: str | os.PathLike) -> None:
        atomic_write_json(path, self.to_dict())


def _jsonable(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, Path):
        return str(o)
    return str(o)
