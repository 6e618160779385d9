"""Stage "record": every stage's typed result -> the one RunRecord, built once at the end (with
the slower-than-FP32 warning), the ranges/ and plans/ files hashed, SHA256SUMS written."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from quantkit.assets import sha256_file
from quantkit.calibrate.io import atomic_write_text
from quantkit.record.candidate import CandidateRecord
from quantkit.record.run_record import SCHEMA_VERSION, RunRecord
from quantkit.record.search import SearchSkipped
from quantkit.record.serde import decode, encode
from quantkit.record.signoff import RecommendationRecord, SignoffSkipped
from quantkit.run.artifact import Artifact
from quantkit.run.evaluation import Evaluation
from quantkit.run.stages.backend_check import BackendCheck
from quantkit.run.stages.calibration import Calibration
from quantkit.run.stages.latency import LatencyReport
from quantkit.run.stages.layerwise import LayerReport
from quantkit.run.stages.model import Prepared
from quantkit.run.stages.ptq import Sources
from quantkit.run.stages.search import SearchOutcome
from quantkit.run.stages.signoff import SignOff
from quantkit.verdict.protocol import Recommendation

__all__ = ["RunResults", "candidate_records", "record", "slower_than_fp32", "write_sha256sums"]

log = logging.getLogger(__name__)


@dataclass
class RunResults:
    """What the stages returned, in stage order (None: the stage did not run)."""

    prepared: Prepared | None = None
    reference: Evaluation | None = None  # fp32 on dev
    sources: Sources | None = None  # the ptq stage: the recipe, one source per format
    calibration: Calibration | None = None
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    evaluations: dict[str, Evaluation] = field(default_factory=dict)  # on dev
    backend_checks: dict[str, BackendCheck] = field(default_factory=dict)
    layers: LayerReport | None = None
    search: SearchOutcome | None = None
    search_skipped: str | None = None
    latency: LatencyReport | None = None
    reference_test: Evaluation | None = None  # fp32 on the test split
    signoff: SignOff | None = None  # family declared on dev, tested once on test
    signoff_skipped: str | None = None  # why the test split was left alone (sweep jobs)
    recommendation: Recommendation | None = None
    notes: list[str] = field(default_factory=list)  # what a reviewer must read beside it


def _dev_summary(evidence: dict) -> dict:
    return {k: evidence[k] for k in ("metrics", "verdict", "n", "agreement_fp32", "split")
            if k in evidence}


def _signed(dev_entry: dict, test_eval, signoff) -> dict:
    """A family member's entry: its test evidence (verdict status adjusted over the family),
    the artifact facts of the dev entry, and its dev numbers under ``dev``."""
    name = test_eval.name
    entry = {**dev_entry, **test_eval.to_record(), "dev": _dev_summary(dev_entry)}
    row = next(r for r in signoff.decision.rows if r["candidate"] == name)
    verdict = dict(entry["verdict"])
    if row["status"] != verdict["status"]:
        verdict["reasons"] = [*verdict["reasons"], f"familywise ({signoff.decision.method}): "
                              f"{verdict['status']} on its own becomes {row['status']}: "
                              f"{row.get('reason', '')}"]
    verdict["status"] = row["status"]
    verdict["raw_status"] = row.get("raw_status", entry["verdict"]["status"])
    entry["verdict"] = verdict
    entry["signoff"] = {"family_position": list(signoff.family.candidates).index(name) + 1,
                        "status": row["status"], "raw_status": verdict["raw_status"]}
    look = signoff.decision.look  # the persistent ledger's look and the alpha it tested at
    if look:
        entry["signoff"].update(look=look.get("look"), look_id=look.get("id"),
                                alpha_one_sided=look.get("alpha_one_sided"))
    return entry


def candidate_records(results: RunResults) -> dict[str, CandidateRecord]:
    """name -> the candidate's record entry, from the typed stage results only: the entry's
    parts (the evaluation's evidence, the artifact's and the per-layer facts, the engine
    check, the sign-off, latency) joined in the order the record writes them, then read as
    a CandidateRecord (strict: a part that does not fit the schema stops the record here).

    Family members carry their test-split evidence (and ``dev``); the other candidates their
    dev evidence (``verdict.split == "dev"``): they were compared, never signed off."""
    ref = results.reference.to_record()
    if results.reference_test is not None:
        ref = {**results.reference_test.to_record(), "dev": _dev_summary(ref)}
    out = {"fp32": ref}
    for name, art in results.artifacts.items():
        entry = {**results.evaluations[name].to_record(), **art.to_record()}
        if results.layers is not None:
            entry.update(results.layers.to_record(name))
        out[name] = entry
    if results.search is not None:
        out["mixed"] = results.search.candidate_record()
    for name, check in results.backend_checks.items():
        out[name]["backend_check"] = check.to_record()
    if results.signoff is not None:
        for name, ev in results.signoff.evaluations.items():
            out[name] = _signed(out[name], ev, results.signoff)
    if results.latency is not None:
        for name in results.latency.candidates:
            out[name]["latency"] = results.latency.candidate_record(name)
    return {name: decode(CandidateRecord, encode(entry), f"candidates.{name}")
            for name, entry in out.items()}


def record(record: RunRecord, results: RunResults, run_dir: Path) -> RunRecord:
    """Fill ``record`` (made at the start with the run's identity) from ``results``; hash the
    run dir's ranges/ and plans/ files into ``record.artifacts`` and write SHA256SUMS."""
    record.schema_version = SCHEMA_VERSION
    record.candidates = candidate_records(results)
    if results.sources is not None:
        record.ptq = results.sources.to_record()
    if results.calibration is not None:
        record.calibration = results.calibration.to_record()
    if results.search_skipped:
        record.search = SearchSkipped(skipped=results.search_skipped)
    elif results.search is not None:
        record.search = results.search.to_record()
    if results.latency is not None:
        record.latency = results.latency.to_record()
    if results.recommendation is not None:
        record.recommended = results.recommendation.candidate
        record.recommendation = RecommendationRecord(**results.recommendation.to_dict())
        record.signoff = results.signoff.to_record(results.recommendation)
    else:  # no sign-off ran: nothing is recommended on dev evidence alone
        record.recommended = None
        record.recommendation = RecommendationRecord(
            candidate=None, reason=results.signoff_skipped or "no sign-off family")
        if results.signoff_skipped:
            record.signoff = SignoffSkipped(skipped=results.signoff_skipped)
    for note in results.notes:
        log.warning(note)
        record.notes.append(note)
    slow = slower_than_fp32(record.candidates, record.recommended)
    if slow:
        log.warning(slow)
        record.notes.append(slow)
    arts = dict(results.artifacts)
    if results.search is not None:
        arts["mixed"] = results.search.artifact
    record.artifacts = {Path(a.path).name: a.sha256 for a in arts.values()}
    for sub in ("ranges", "plans", "detections"):  # detections/: the report's sample grids
        for f in sorted((run_dir / sub).glob("*")):
            record.artifacts[f"{sub}/{f.name}"] = sha256_file(f)
    write_sha256sums(run_dir, record.artifacts)
    return record


def slower_than_fp32(candidates: dict[str, CandidateRecord], name: str | None) -> str | None:
    """A warning when the recommended candidate's measured throughput is below FP32's at a
    batch size (e.g. a mixed ort_cpu plan whose INT8/FP32 boundaries cost more than INT8
    saves), or None. Only compares numbers measured in this run on the same backend."""
    if not name or name == "fp32" or name not in candidates or "fp32" not in candidates:
        return None
    lat, ref = candidates[name].latency, candidates["fp32"].latency
    if lat is None or ref is None:
        return None
    slower = [f"batch {b}: {lat[b].throughput:.1f}/s vs FP32 {ref[b].throughput:.1f}/s"
              for b in sorted(lat, key=int) if b in ref
              and lat[b].throughput < ref[b].throughput]
    if not slower:
        return None
    return (f"recommended candidate {name} passes on accuracy but was slower than FP32 here ("
            + "; ".join(slower) + "): check the latency table before deploying it")


def write_sha256sums(run_dir: Path, artifacts: dict[str, str]) -> None:
    lines = "".join(f"{sha}  {name}\n" for name, sha in sorted(artifacts.items()))
    atomic_write_text(run_dir / "SHA256SUMS", lines)
