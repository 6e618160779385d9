"""Every record.json this project has written, read into the current RunRecord: the one place
that knows older layouts. :func:`upgrade` lifts a loaded record one ``schema_version`` at a
time to :data:`~quantkit.record.run_record.SCHEMA_VERSION`; :func:`parse_record` then
decodes it strictly (quantkit/record/serde.py). Fixtures of each version:
tests/record/data/README.md.

Versions (what each step changes):

- 0 (no ``schema_version``; before issue 14): the eval split is one ``eval`` split; a
  candidate's verdict has McNemar's a / b / c / d / p and per-slice verdicts; the backend
  check is an agreement check (``checked``, ``ok``, ``agreement``, ``n``, ``accuracy``).
  0 -> 1 changes no key: 1 marks the spine refactor (the recorded config is the one that
  ran; ``target=ort_cpu`` records ``precision.remainder: fp32``).
- 1: as 0, with ``schema_version``. 1 -> 2: a verdict's margin gains the ``threshold`` it
  was decided at (-abs: the labelled margins 1 wrote); the sections 2 added are left
  empty (``signoff``: no dev / test sign-off ran; ``recommendation``: not recorded).
- 2: the dev / test sign-off (``signoff``; a family member's ``metrics`` / ``verdict`` on
  test and its ``dev`` entry on dev; every other verdict ``split == "dev"``) and
  ``recommendation``. 2 -> 3: ``calibration.ptq`` becomes the record's own ``ptq`` section
  (schema 2 had no recipe: per-step settings, no proofs: recipe / steps_on recorded as
  "", proofs empty).
- 3: the ptq section (recipe, steps, proofs, auto's choice) and the persistent
  test ledger (``signoff.ledger``, ``signoff.not_tested``, the decision's ``look``).
  Keys added while 3 was current (the search's ``confirmation`` / ``dev_halves`` /
  ``format_fill``, ``calibration.fp8``, ``data.info``; the ledger facts of issue 49,
  ``signoff.ledger.location`` / ``model_looks`` / ``first_in_ledger`` / ``ledger_knows`` /
  ``joined_by`` / ``new_study`` / ``execution_check``...) are optional in the types: absent
  in the records 3 wrote before them. ``signoff.ledger.model_key`` of a user's ONNX file was
  its sha256 before issue 49 and is its fingerprint's key since (the same key, its meaning
  in ``model_key_basis``): no step needed. 3 -> 4: a detector's scalar metrics are
  ``candidate.metrics``' alone: ``candidate.detection`` drops ``map`` / ``map50`` /
  ``map75`` and its ``vs_fp32`` those and ``recall50`` / ``mean_iou`` (3 wrote each value
  twice, the same number in ``metrics``).
- 4 (current): as 3, each detection metric once.

Besides the record, the persistent test ledger stores each look's family, power plan and
decision (quantkit/ledger_store.py); :func:`upgrade_look_family` / :func:`upgrade_look_decision`
fill what looks written before a key existed lack.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping

from quantkit.errors import RecordError
from quantkit.record.run_record import SCHEMA_VERSION, RunRecord
from quantkit.record.serde import JsonObject, decode

__all__ = ["as_record", "load_record", "parse_record", "upgrade", "upgrade_look_decision",
           "upgrade_look_family"]


def _candidates(d: JsonObject) -> list[JsonObject]:
    cands = d.get("candidates")
    return [c for c in cands.values() if isinstance(c, dict)] if isinstance(cands, dict) else []


def _v0_to_v1(d: JsonObject) -> JsonObject:
    for c in _candidates(d):
        if "first_diverging" in c:  # 0 named the tensor only
            c.setdefault("first_diverging_node", None)
    d.setdefault("stage_cache", {})  # not counted before 1
    d.setdefault("latency", {})  # not measured
    return d


def _verdicts(d: JsonObject) -> list[JsonObject]:
    """Every verdict of the record: the candidates' (and their dev entries'), the search's."""
    out = [c.get("verdict") for c in _candidates(d)]
    out += [c["dev"].get("verdict") for c in _candidates(d) if isinstance(c.get("dev"), dict)]
    search = d.get("search")
    for e in search.get("evaluations", []) if isinstance(search, dict) else []:
        out.append(e.get("extra", {}).get("verdict") if isinstance(e, dict) else None)
    return [v for v in out if isinstance(v, dict)]


def _v1_to_v2(d: JsonObject) -> JsonObject:
    for v in _verdicts(d):
        mg = v.get("margin")
        if isinstance(mg, dict) and "metric" in mg and "abs" in mg:
            mg.setdefault("threshold", -mg["abs"])  # a labelled margin: decided at -margin
    d.setdefault("signoff", {})
    d.setdefault("recommendation", {})
    return d


def _v2_to_v3(d: JsonObject) -> JsonObject:
    cal = d.get("calibration")
    old = cal.pop("ptq", None) if isinstance(cal, dict) else None
    if isinstance(old, dict):
        d["ptq"] = {"recipe": "", "steps_on": "", "settings": old.get("settings", {}),
                    "graph_rewritten": old.get("graph_rewritten", False),
                    "graph_sha256": old.get("graph_sha256", ""), "steps": old.get("steps", []),
                    "proofs": [], "dropped_compare_tensors": old.get("dropped_compare_tensors", {})}
    d.setdefault("ptq", {})
    model = d.get("model")
    if isinstance(model, dict) and model:  # logits, unpooled: all that was written before
        model.setdefault("output_kind", "logits")
        model.setdefault("pooling", "none")
    return d


def _v3_to_v4(d: JsonObject) -> JsonObject:
    for c in _candidates(d):
        det = c.get("detection")
        if not isinstance(det, dict):
            continue
        for key in ("map", "map50", "map75"):  # metrics.<key> holds the same value
            det.pop(key, None)
        vs = det.get("vs_fp32")
        for key in ("map", "map50", "map75", "recall50", "mean_iou") if isinstance(vs, dict) else ():
            vs.pop(key, None)  # metrics.<key>_vs_fp32 / recall50_fp32 / mean_iou_fp32
    return d


#: version -> the step that makes a record of it one version newer
STEPS: dict[int, Callable[[JsonObject], JsonObject]] = {0: _v0_to_v1, 1: _v1_to_v2, 2: _v2_to_v3,
                                                        3: _v3_to_v4}


def upgrade(d: JsonObject) -> JsonObject:
    """A copy of the loaded record ``d`` in the current layout (:data:`SCHEMA_VERSION`)."""
    d = copy.deepcopy(d)
    version = d.get("schema_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version > SCHEMA_VERSION:
        raise RecordError("a record of a schema version this quantkit does not know",
                          where="record.schema_version", value=version,
                          fix=f"read it with the quantkit that wrote it (this one knows 0 to "
                              f"{SCHEMA_VERSION})")
    while version < SCHEMA_VERSION:
        d = STEPS[version](d)
        version += 1
    d["schema_version"] = SCHEMA_VERSION
    return d


def parse_record(d: object) -> RunRecord:
    """A loaded record.json of any schema version as the current RunRecord."""
    if not isinstance(d, dict):
        raise RecordError("a record must be a JSON object", where="record",
                          value=type(d).__name__, fix="pass a loaded record.json")
    return decode(RunRecord, upgrade(d), "record")


def as_record(record: RunRecord | Mapping[str, object]) -> RunRecord:
    """``record`` as a RunRecord: a loaded record.json (any schema version) is parsed."""
    return record if isinstance(record, RunRecord) else parse_record(dict(record))


def load_record(path: str | os.PathLike) -> RunRecord:
    """Read a record.json written by any version of quantkit."""
    with open(path, encoding="utf-8") as f:
        return parse_record(json.load(f))


def upgrade_look_family(d: JsonObject) -> JsonObject:
    """A look's stored family (SignoffFamily.to_dict) with the keys older looks lack."""
    return {"order_rule": "dev_evidence", "basis": {}, "supersedes": None,
            "order": list(d.get("candidates", [])), **d}


def upgrade_look_decision(d: JsonObject) -> JsonObject:
    """A look's stored decision (FamilyDecision.to_dict) with the keys older looks lack."""
    return {"stopped_at": None, "look": None, **d}
