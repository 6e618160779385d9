"""RunRecord: everything a run measured, one typed dataclass per section (quantkit/record/),
written to record.json by :func:`quantkit.record.serde.encode` and read back by
:func:`quantkit.record.migrate.load_record` (any schema version) into the same types.
Reports render it; they compute nothing."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import metadata

from quantkit.environment import host_facts
from quantkit.fsutil import atomic_write_json
from quantkit.models.model import Model
from quantkit.record.calibration import CalibrationRecord
from quantkit.record.candidate import CandidateRecord
from quantkit.record.latency import LatencyRecord
from quantkit.record.provenance import (
    CacheCount,
    DataRecord,
    JobRecord,
    StageTiming,
)
from quantkit.record.ptq import PtqRecord
from quantkit.record.search import SearchRecord, SearchSkipped
from quantkit.record.serde import JsonObject, JsonValue, encode, optional, section
from quantkit.record.signoff import RecommendationRecord, SignoffRecord, SignoffSkipped

__all__ = ["PACKAGES", "RunRecord", "SCHEMA_VERSION", "host_info", "package_versions"]

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


def host_info() -> JsonObject:
    return host_facts()


#: Version of the record's layout; bump when a field changes meaning, and teach
#: quantkit/record/migrate.py to upgrade the version before it (it documents each one).
SCHEMA_VERSION = 4


@dataclass(kw_only=True)
class RunRecord:
    """The record of one run (record.json). Sections of stages that did not run are None
    (written ``{}``); ``search`` / ``signoff`` say why when the stage was skipped."""

    experiment: str
    run_dir: str
    command: str
    config: JsonObject
    seed: int
    started: str = ""
    finished: str = ""
    host: JsonObject = field(default_factory=host_info)
    packages: dict[str, str | None] = field(default_factory=package_versions)
    model: Model | None = section()
    data: DataRecord | None = section()
    stages: dict[str, StageTiming] = field(default_factory=dict)
    ptq: PtqRecord | None = section()  # schema 3 on
    calibration: CalibrationRecord | None = section()
    candidates: dict[str, CandidateRecord] = field(default_factory=dict)
    search: SearchRecord | SearchSkipped | None = section()
    latency: LatencyRecord | None = section()
    recommended: str | None = None
    recommendation: RecommendationRecord | None = section()
    signoff: SignoffRecord | SignoffSkipped | None = section()  # schema 2 on
    artifacts: dict[str, str] = field(default_factory=dict)
    stage_cache: dict[str, CacheCount] = field(default_factory=dict)
    job: JobRecord | None = optional()  # where a sweep job ran (run/job.py)
    notes: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> JsonObject:
        out = encode(self)
        assert isinstance(out, dict)
        return out

    def write(self, path: str | os.PathLike) -> None:
        atomic_write_json(path, self.to_dict())

    def candidate(self, name: str | None) -> CandidateRecord | None:
        """Candidate ``name``, None when the record has no such candidate."""
        return self.candidates.get(name) if name is not None else None

    def configured(self, *path: str) -> JsonValue:
        """The recorded config's value at ``path`` (``"verdict", "alpha"``), None when the
        record's config has no such key."""
        node: JsonValue = self.config
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return node

    @property
    def hostname(self) -> str | None:
        """The host the run ran on (``host.hostname``), None when not recorded."""
        name = self.host.get("hostname")
        return name if isinstance(name, str) else None

    @property
    def search_run(self) -> SearchRecord | None:
        """The search's record when it ran (not skipped)."""
        return self.search if isinstance(self.search, SearchRecord) else None

    @property
    def signed(self) -> SignoffRecord | None:
        """The sign-off's record when it ran (not skipped)."""
        return self.signoff if isinstance(self.signoff, SignoffRecord) else None
