"""RecordView: a loaded record.json as typed sections, each parsed once with the defaults an
older record needs (missing sections are None or empty); ``to_dict`` writes them back."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quantkit.record.calibration_view import CalibrationView
from quantkit.record.candidate_view import CandidateView
from quantkit.record.dict_parse import mapping, seq, view_field, view_to_dict
from quantkit.record.latency_view import LatencySection
from quantkit.record.provenance_view import (
    CacheCount,
    ConfigView,
    DataInfo,
    JobInfo,
    ModelInfo,
    StageTiming,
)
from quantkit.record.ptq_view import PtqView
from quantkit.record.search_view import SearchView
from quantkit.record.signoff_view import SignoffView

__all__ = ["RecordView", "as_view"]


@dataclass(frozen=True)
class RecordView:
    """Every section of a RunRecord the reports read. Sections a record lacks (records of
    older schema versions, a failed stage) are None (ptq, calibration, search, latency,
    signoff) or empty."""

    experiment: Any = None
    run_dir: Any = None
    command: Any = None
    seed: Any = None
    started: Any = None
    finished: Any = None
    config: ConfigView = field(default_factory=ConfigView)
    host: dict[str, Any] = field(default_factory=dict)
    packages: dict[str, Any] = field(default_factory=dict)
    model: ModelInfo = field(default_factory=ModelInfo)
    data: DataInfo = field(default_factory=DataInfo)
    stages: dict[str, StageTiming] = field(default_factory=dict)
    ptq: PtqView | None = None
    calibration: CalibrationView | None = None
    candidates: dict[str, CandidateView] = field(default_factory=dict)
    search: SearchView | None = None
    latency: LatencySection | None = None
    recommended: Any = None
    recommendation_reason: Any = view_field("recommendation", "reason")
    signoff: SignoffView | None = None
    artifacts: dict[str, Any] = field(default_factory=dict)
    stage_cache: dict[str, CacheCount] = field(default_factory=dict)
    job: JobInfo = field(default_factory=JobInfo)
    notes: list[Any] = field(default_factory=list)
    schema_version: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> RecordView:
        d = mapping(d)
        return cls(
            experiment=d.get("experiment"), run_dir=d.get("run_dir"), command=d.get("command"),
            seed=d.get("seed"), started=d.get("started"), finished=d.get("finished"),
            config=ConfigView.from_dict(d.get("config")), host=mapping(d.get("host")),
            packages=mapping(d.get("packages")), model=ModelInfo.from_dict(d.get("model")),
            data=DataInfo.from_dict(d.get("data")),
            stages={str(n): StageTiming.from_dict(s) for n, s in mapping(d.get("stages")).items()
                    if isinstance(s, Mapping)},
            ptq=PtqView.parse(d.get("ptq")),
            calibration=CalibrationView.parse(d.get("calibration")),
            candidates={str(n): CandidateView.from_dict(c)
                        for n, c in mapping(d.get("candidates")).items() if isinstance(c, Mapping)},
            search=SearchView.parse(d.get("search")),
            latency=LatencySection.parse(d.get("latency")),
            recommended=d.get("recommended"),
            recommendation_reason=mapping(d.get("recommendation")).get("reason"),
            signoff=SignoffView.parse(d.get("signoff")), artifacts=mapping(d.get("artifacts")),
            stage_cache=CacheCount.per_stage(d.get("stage_cache")),
            job=JobInfo.from_dict(d.get("job")), notes=seq(d.get("notes")),
            schema_version=d.get("schema_version"))

    @classmethod
    def load(cls, path: str | os.PathLike) -> RecordView:
        """Read a record.json (of any schema version)."""
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    def candidate(self, name: Any) -> CandidateView | None:
        """Candidate ``name``, None when the record has no such candidate."""
        return self.candidates[name] if name in self.candidates else None

    @property
    def hostname(self) -> Any:
        return self.host["hostname"] if "hostname" in self.host else None

    @property
    def label_names(self) -> Any:
        """The class names (data's, else the model's), None when not recorded."""
        return self.data.label_names or self.model.label_names

    def to_dict(self) -> dict[str, Any]:
        d = view_to_dict(self)
        return {k: v for k, v in d.items() if v is not None or k in ("recommended",)}


def as_view(record: RecordView | Mapping[str, Any]) -> RecordView:
    """``record`` as a RecordView: a RunRecord dict (a loaded record.json) is parsed once."""
    return record if isinstance(record, RecordView) else RecordView.from_dict(record)
