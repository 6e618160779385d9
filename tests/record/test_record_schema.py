"""The record schema (quantkit/record/): one set of types writes record.json and reads it
back; every older record this project wrote loads through the migration
(quantkit/record/migrate.py) and renders; decoding is strict and names the key path."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import quantkit
from quantkit.errors import RecordError
from quantkit.record.migrate import load_record, parse_record, upgrade, upgrade_look_decision, \
    upgrade_look_family
from quantkit.record.run_record import SCHEMA_VERSION, RunRecord
from quantkit.record.serde import JsonValue, decode, encode, inline, optional, section
from quantkit.record.signoff import DecisionRecord, FamilyRecord
from quantkit.report.render import render_reports
from quantkit.report.summary import summary_lines

TESTS = Path(__file__).resolve().parents[1]
#: every fixture record: what produced it and its schema version is in tests/record/data/README.md
FIXTURES = {p.stem: p for p in [*(TESTS / "report" / "data").glob("record_*.json"),
                                *(TESTS / "record" / "data").glob("record_*.json"),
                                *(TESTS / "run" / "data").glob("record_*.json")]}


def _raw(name: str) -> dict:
    return json.loads(FIXTURES[name].read_text(encoding="utf-8"))


def test_a_fixture_of_every_schema_version():
    versions = {_raw(n).get("schema_version", 0) for n in FIXTURES}
    assert versions == set(range(SCHEMA_VERSION + 1))


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_every_fixture_loads_through_the_migration_and_renders(name, tmp_path):
    rec = load_record(FIXTURES[name])
    assert isinstance(rec, RunRecord) and rec.schema_version == SCHEMA_VERSION
    assert parse_record(rec.to_dict()) == rec  # the same types write and read it
    paths = render_reports(rec, tmp_path, formats=("md", "html"))
    for fmt in ("md", "html"):
        text = paths[fmt].read_text(encoding="utf-8")
        assert rec.experiment in text and "Provenance" in text
    assert summary_lines(rec)[0].startswith(f"quantkit run: {rec.experiment}")


@pytest.mark.parametrize("name", sorted(n for n in FIXTURES
                                        if _raw(n).get("schema_version") == SCHEMA_VERSION))
def test_a_current_record_is_written_back_as_it_was_read(name):
    raw = _raw(name)
    assert load_record(FIXTURES[name]).to_dict() == raw


def test_the_api_returns_the_type_a_run_returns():
    rec = quantkit.load_record(FIXTURES["record_v1"])
    assert type(rec) is RunRecord and rec.candidates["int8.minmax"].verdict.status == "PASS"


def test_the_migration_steps():
    v0 = upgrade(_raw("record_small"))
    assert v0["schema_version"] == SCHEMA_VERSION and v0["stage_cache"] == {}
    assert v0["signoff"] == {} and v0["recommendation"] == {} and v0["ptq"] == {}
    fp16 = v0["candidates"]["int8.minmax"]
    assert fp16["first_diverging_node"] is None  # 0 named only the tensor
    assert fp16["verdict"]["margin"]["threshold"] == -fp16["verdict"]["margin"]["abs"]
    assert v0["model"]["output_kind"] == "logits" and v0["model"]["pooling"] == "none"
    v2 = _raw("record_signed")
    up = upgrade(v2)
    assert "ptq" not in up["calibration"]  # 2 -> 3: the ptq stage's own section
    assert up["ptq"]["settings"] == v2["calibration"]["ptq"]["settings"]
    assert up["ptq"]["recipe"] == "" and up["ptq"]["proofs"] == []
    assert _raw("record_signed") == v2  # upgrade copies
    v3 = _raw("record_detection")
    up = upgrade(v3)
    for name, c in v3["candidates"].items():  # 3 -> 4: each detection metric once, in metrics
        det, new = c["detection"], up["candidates"][name]
        assert det["map"] == c["metrics"]["map"] and "map" not in new["detection"]
        if "vs_fp32" in det:
            vs = det["vs_fp32"]
            assert (vs["map"], vs["recall50"]) == (c["metrics"]["map_vs_fp32"],
                                                   c["metrics"]["recall50_fp32"])
            assert not {"map", "map50", "map75", "recall50", "mean_iou"} & set(
                new["detection"]["vs_fp32"])
        assert new["metrics"] == c["metrics"]


def test_a_future_or_malformed_version_is_refused():
    rec = _raw("record_before_tensorrt")
    for bad in (SCHEMA_VERSION + 1, "3", True):
        with pytest.raises(RecordError, match="schema version"):
            parse_record({**rec, "schema_version": bad})
    with pytest.raises(RecordError, match="JSON object"):
        parse_record([rec])


@pytest.mark.parametrize("edit, where", [
    (lambda r: r["candidates"]["fp16"].update(surprise=1), "record.candidates.fp16.surprise"),
    (lambda r: r["candidates"]["fp16"]["verdict"].update(status=3),
     "record.candidates.fp16.verdict.status"),
    (lambda r: r["calibration"].pop("tensors"), "record.calibration.tensors"),
    (lambda r: r["search"]["evaluations"][0].update(fp16_count="1"),
     "record.search.evaluations[0].fp16_count"),
    (lambda r: r["signoff"]["ledger"].update(look="one"), "record.signoff.ledger.look"),
])
def test_decoding_is_strict_and_names_the_key_path(edit, where):
    rec = copy.deepcopy(_raw("record_before_tensorrt"))
    edit(rec)
    with pytest.raises(RecordError) as err:
        parse_record(rec)
    assert err.value.where == where and err.value.fix


@dataclass
class _Part:
    a: int
    b: str | None


@dataclass(kw_only=True)
class _Whole:
    x: float
    maybe: str | None = optional()
    part: _Part | None = inline()
    stage: _Part | None = section()
    open: JsonValue = None


def test_the_serializer_field_kinds():
    whole = _Whole(x=np.float32(0.5), part=_Part(1, None), open={"k": [1, "two", None]})
    data = encode(whole)
    assert data == {"x": 0.5, "a": 1, "b": None, "stage": {}, "open": {"k": [1, "two", None]}}
    assert type(data["x"]) is float  # numpy scalars become Python numbers
    back = decode(_Whole, data)
    assert back == _Whole(x=0.5, part=_Part(1, None), open={"k": [1, "two", None]})
    assert decode(_Whole, {"x": 1, "stage": {"a": 2, "b": "s"}, "open": None}).part is None
    with pytest.raises(RecordError, match="missing key"):
        decode(_Whole, {"x": 1, "a": 2, "open": None})  # an inline group is all or nothing
    with pytest.raises(RecordError, match="wrong type"):
        decode(_Whole, {"x": True, "open": None})  # a bool is not a number


def test_a_look_written_before_the_family_kept_its_order_rule_still_reads():
    """The ledger's stored family / decision of an older look lack keys added since: the
    migration fills them and the sign-off rebuilds the declaration through the schema."""
    rec = _raw("record_before_tensorrt")["signoff"]
    fam = {k: v for k, v in rec["family"].items() if k not in ("order_rule", "basis", "supersedes")}
    family = decode(FamilyRecord, upgrade_look_family(fam)).declared()
    assert family.candidates == tuple(rec["family"]["candidates"])
    assert family.order_rule == "dev_evidence" and family.basis == {}
    dec = {k: v for k, v in rec["decision"].items() if k not in ("stopped_at", "look")}
    decision = decode(DecisionRecord, upgrade_look_decision(dec)).decided()
    assert [r["status"] for r in decision.rows] == [r["status"] for r in rec["decision"]["rows"]]
    assert decision.to_dict()["rows"] == rec["decision"]["rows"]


def test_the_summary_says_why_a_search_that_kept_every_layer_declares_no_mixed(tmp_path):
    """A search whose confirmed set keeps every quantizable layer out of INT8 computes what
    fp16 does: the mixed row reads 'not signed off', and one line says why."""
    raw = _raw("record_search")
    raw["search"]["fp16_nodes"] = [f"n{i}" for i in range(raw["search"]["quantizable_layers"])]
    path = tmp_path / "record.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    lines = [ln for ln in summary_lines(load_record(path)) if ln.startswith("mixed-precision")]
    assert lines == [ln for ln in lines if "all 48 layers out of INT8 (the fp16 candidate "
                                          "again: not declared)" in ln] and len(lines) == 1
    assert not [ln for ln in summary_lines(load_record(FIXTURES["record_search"]))
                if ln.startswith("mixed-precision")]  # a PASS that quantizes says nothing more
