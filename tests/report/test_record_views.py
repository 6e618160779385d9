"""The record's typed sections (quantkit/record/*_view.py): every section loads back as
itself (``from_dict(to_dict(x)) == x``), and a record from an older version, which lacks
sections, still loads and renders what it rendered before the views."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from quantkit.record.record_view import RecordView, as_view
from quantkit.report.render import build_context, render_markdown

DATA = Path(__file__).with_name("data")
RUN_DATA = Path(__file__).resolve().parents[1] / "run" / "data"
RECORDS = sorted(RUN_DATA.glob("record_before_*.json")) + sorted(DATA.glob("record_*.json"))
#: Sections an older record lacks: ptq (schema 3), signoff (schema 2), search, latency.
DROPPED = ("signoff", "search", "ptq", "latency")


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _sections(view: RecordView):
    """Every typed section (and sub-section) of ``view`` that has its own to_dict."""
    yield view
    for section in (view.config, view.model, view.data, view.job, view.ptq, view.calibration,
                    view.search, view.latency, view.signoff):
        if section is not None:
            yield section
    yield from view.stages.values()
    yield from view.stage_cache.values()
    if view.latency is not None and view.latency.cost is not None:
        yield view.latency.cost
        yield from view.latency.cost.per_candidate.values()
    if view.search is not None:
        yield from view.search.evaluations
    if view.signoff is not None:
        yield from view.signoff.decision
        yield from view.signoff.power_plan
        yield from view.signoff.test.values()
        if view.signoff.ledger is not None:
            yield view.signoff.ledger
    for c in view.candidates.values():
        yield c
        for part in (c.dev, c.verdict, c.backend_check, c.embedding_cosine):
            if part is not None:
                yield part
        if c.verdict is not None:
            yield c.verdict.margin
            yield c.verdict.mcnemar
            yield from c.verdict.deltas.values()
            yield from c.verdict.slices
        yield from (c.latency or {}).values()
        yield from c.layers.values()
        yield from c.flagged_layers
        yield from c.per_class.values()


def test_the_fixture_records_cover_every_section():
    kinds = {type(s).__name__ for p in RECORDS for s in _sections(RecordView.load(p))}
    assert {"CandidateView", "VerdictEntry", "BackendCheckView", "LatencyStats", "LatencySection",
            "CostView", "SearchView", "SearchEval", "SignoffView", "LookView", "CalibrationView",
            "PtqView", "IntervalView", "SliceVerdict", "StageTiming", "CacheCount"} <= kinds


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.stem)
def test_every_section_round_trips(path):
    view = RecordView.load(path)
    n = 0
    for section in _sections(view):
        again = type(section).from_dict(json.loads(json.dumps(section.to_dict())))
        assert again == section, type(section).__name__
        n += 1
    assert n > 20
    assert RecordView.from_dict(json.loads(json.dumps(view.to_dict()))) == view


@pytest.mark.parametrize("stem", ["record_before_ort_cpu", "record_before_auto"])
def test_an_old_record_without_sections_loads_and_renders(stem):
    new = _load(RUN_DATA / f"{stem}.json")
    old = copy.deepcopy(new)
    for key in DROPPED:
        old.pop(key)
    for c in old["candidates"].values():
        c.pop("latency", None)
        c.pop("dev", None)
        if isinstance(c.get("verdict"), dict):
            c["verdict"].pop("split", None)
    view = RecordView.from_dict(old)
    assert (view.signoff, view.search, view.ptq, view.latency) == (None, None, None, None)
    assert all(c.latency is None and c.dev is None for c in view.candidates.values())
    assert set(view.candidates) == set(new["candidates"])

    md = render_markdown(old, ctx=build_context(old, with_plots=False))
    assert "Post-training steps: not measured." in md
    assert "Precision search: not run." in md
    assert "Latency: not measured." in md
    assert "Family, in the order declared on dev" not in md
    assert "not signed off" not in md  # before the dev / test sign-off: shown as recorded
    # the same record with its sections says they ran
    md_new = render_markdown(new, ctx=build_context(new, with_plots=False))
    assert "Precision search: not run." not in md_new
    assert "Family, in the order declared on dev" in md_new


def test_an_empty_record_loads_with_empty_sections():
    view = RecordView.from_dict({})
    assert view.candidates == {} and view.notes == [] and view.calibration is None
    assert view.config.reviewer == "" and view.model.facts == {}
    assert as_view(view) is view
    ctx = build_context({}, with_plots=False)
    assert ctx["verdicts"] == [] and ctx["search"] is None and ctx["family"] is None


def test_missing_keys_inside_a_section_take_the_old_defaults():
    view = RecordView.from_dict({"candidates": {"int8": {"verdict": {"status": "FAIL"},
                                                         "backend_check": {"checked": False},
                                                         "flagged_layers": [{"name": "t"}]},
                                                "fp32": {}},
                                 "calibration": {"summary": {"t": {}}}})
    c = view.candidates["int8"]
    assert c.verdict.status == "FAIL" and c.verdict.deltas == {} and c.verdict.reasons == []
    assert c.verdict.margin.higher_is_better is True and c.verdict.decision_metric is None
    assert c.backend_check.gate.units == "" and not c.backend_check.is_engine_check
    assert c.flagged_layers[0].flagged is True
    assert view.candidates["fp32"].verdict is None and view.candidates["fp32"].plan_reasons is None
    assert view.calibration.summary["t"].count == "?"
