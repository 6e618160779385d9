"""Everything a stage records is rendered somewhere in the report, or listed with why in
quantkit/report/not_rendered.py: every field of the record schema (quantkit/record/) that
has a value in a fixture record (or in the variants below, for what no fixture run
produces) must be read by the report while it renders report.md and report.html, or have
its text in them."""

from __future__ import annotations

import dataclasses
import html
import sys
import typing
from pathlib import Path

import pytest

from quantkit.ptq.proof import StepProof
from quantkit.ptq.step_record import StepRecord
from quantkit.record.candidate import Distribution, EmbeddingRecord, EngineCheckBasis, Histogram
from quantkit.record.migrate import load_record
from quantkit.record.run_record import RunRecord
from quantkit.record.search import FormatFillSkipped, LayerEstimate, SearchSkipped
from quantkit.record.serde import _fields, _hints
from quantkit.record.signoff import (EarlierLook, ExecutionCheckFacts, FamilyNotTested,
                                     SignoffSkipped)
from quantkit.record.verdict import Gallery, Margin, ShareTolerance
from quantkit.report.not_rendered import NOT_RENDERED
from quantkit.report.render import build_context, render_html, render_markdown
from quantkit.verdict.cluster import GroupStats
from quantkit.verdict.engine_gate import EngineGate

TESTS = Path(__file__).resolve().parents[1]
FIXTURES = sorted([*(TESTS / "report" / "data").glob("record_*.json"),
                   *(TESTS / "record" / "data").glob("record_*.json"),
                   *(TESTS / "run" / "data").glob("record_*.json")])


def _classes(tp: object, seen: set[type]) -> set[type]:
    """Every record dataclass reachable from ``tp``'s type hints."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp not in seen:
            seen.add(tp)
            for f in _fields(tp):
                _classes(_hints(tp)[f.name], seen)
        return seen
    for a in typing.get_args(tp):
        _classes(a, seen)
    return seen


CLASSES = _classes(RunRecord, set())
FIELDS = {f"{c.__name__}.{f.name}" for c in CLASSES for f in _fields(c)}


def _listed(key: str) -> bool:
    return key in NOT_RENDERED or key.split(".")[0] in NOT_RENDERED


def _variants() -> list[RunRecord]:
    """What no fixture run produces but a run can: an embedding candidate with a recall@k
    gallery, a sign-off that tested no member, sweep-job skips, a proven rewrite, an
    earlier look, grouped data, a format fill that did not run, an engine check that ran."""
    base = load_record(TESTS / "record" / "data" / "record_fp8_fill.json")
    emb = dataclasses.replace(base)
    dist = Distribution(n=24, mean=0.9931, min=0.9611, p1=0.9622, p5=0.9702, median=0.9944,
                        p95=0.9991, max=0.9996, hist=Histogram([1, 3, 20], [0.9, 0.95, 0.98, 1.0]))
    cand = emb.candidates["fp16"]
    gallery = Gallery(size=1000, sha256="c0ffee" * 10 + "abcd", source="train", requested=1000,
                      seed=7)
    margin = dataclasses.replace(cand.verdict.margin, gallery=gallery, share=ShareTolerance(
        quantile=0.05, bound=0.9912, min_share=0.95, higher_is_better=True))
    emb.candidates = {**emb.candidates, "fp16": dataclasses.replace(
        cand, embedding_fp32=EmbeddingRecord(
            cosine=dist, recall_k=10, note="recall@10 from a gallery of 1000 train examples",
            recall=dataclasses.replace(dist, mean=0.8123), top1_neighbour_agreement=0.9417,
            gallery={"size": 1000}),
        metrics=dataclasses.replace(cand.metrics, cosine=0.99311, recall_at_k=0.81234),
        verdict=dataclasses.replace(cand.verdict, margin=margin))}
    so = base.signed
    look = dataclasses.replace(so.ledger, earlier_looks=[EarlierLook(
        id="e" * 64, look=1, started="2026-11-30T10:00:00+0000", state="decided",
        alpha_one_sided=0.0025, alpha_declared=0.025, n_examples=24, candidates=["fp16"],
        method="fixed_sequence", metric="accuracy", statuses={"fp16": "PASS"},
        supersedes="c" * 64, run_dir="/runs/earlier", shared_examples=24, overlap=1.0)])
    test = {n: dataclasses.replace(t, groups=GroupStats(n_groups=12, mean_group_size=2.0,
                                                       icc=0.1234, design_effect=1.1234))
            for n, t in so.test.items()}
    earlier = dataclasses.replace(base, signoff=dataclasses.replace(so, ledger=look, test=test))
    knows = dataclasses.replace(  # issue 49: what the ledger knew, a new study, a check
        so.ledger, location="verdict.ledger", model_looks=0, first_in_ledger=True,
        ledger_knows="first look in /srv/ledger.sqlite; looks kept elsewhere are not counted",
        joined_by="new_study", new_study="fresh reviews collected in 2026-11",
        execution_check=ExecutionCheckFacts(
            of_look="d" * 64, first_execution="backend=ort, Q/DQ exact on AMD EPYC",
            first_statuses={"fp16": "PASS"}, statuses={"fp16": "INCONCLUSIVE"},
            combined={"fp16": "INCONCLUSIVE"}, check_id="9" * 64, earlier_checks=2,
            rule="a member PASSes only where every execution of the look PASSes"))
    studied = dataclasses.replace(base, signoff=dataclasses.replace(so, ledger=knows))
    none_tested = dataclasses.replace(base, signoff=dataclasses.replace(
        so, family=FamilyNotTested(candidates=[], not_tested=["fp16"]), test={}, decision=None,
        test_ledger=None, not_tested={"fp16": "fp16: below verdict.min_power 0.5"}))
    skipped = dataclasses.replace(base, search=SearchSkipped(skipped="sweep job: searched once"),
                                  signoff=SignoffSkipped(skipped="sweep job: test untouched"))
    proof = StepProof(step="smoothquant", kept=True, max_error=1.25e-06, scale=3.5,
                      agreement=1.0, examples=32, tolerance=1e-4, reason="FP32 output unchanged")
    proven = dataclasses.replace(base, ptq=dataclasses.replace(base.ptq, proofs=[proof]))
    fill = FormatFillSkipped(ran=False, why="FP8 is not estimated faster than FP16 here",
                             estimates={"fc1": LayerEstimate(1.5e-07, 1.6e-07, "peak ratio",
                                                             "estimated on L4 (sm 89)")})
    unfilled = dataclasses.replace(base, search=dataclasses.replace(base.search_run,
                                                                    format_fill=fill))
    c = base.candidates["int8.minmax"]
    bc = c.backend_check
    gate = EngineGate(status="pass", metric="accuracy", units="top-1 flip rate", n=16,
                      observed=0.0123, lower=0.0, upper=0.0456, tolerance=0.0521, alpha=0.05,
                      n_needed=120, reasons=("engine within its tolerance",))
    ran = dataclasses.replace(bc, checked=True, gates_recommendation=True, n=16, status="pass",
                              ok=True, gate=gate, engine_tolerance=0.0521, what_to_run="",
                              planned_n=2275, faithful_power=0.8215,
                              basis=dataclasses.replace(bc.basis))
    checked = dataclasses.replace(base, candidates={**base.candidates, "int8.minmax":
                                                    dataclasses.replace(c, backend_check=ran)})
    assert isinstance(ran.basis, EngineCheckBasis)
    return [emb, earlier, studied, none_tested, skipped, proven, unfilled, checked,
            *_more_variants(base)]


def _more_variants(base: RunRecord) -> list[RunRecord]:
    """Records with what is empty in every fixture filled in: calibration exclusions and
    notes, grouped image data, a cost row that does not fit, latency skips, floor / ceiling
    margins, a rewrite step with skipped nodes, search details, an FP8-filled mixed plan."""
    cal = dataclasses.replace(base.calibration, excluded={"hr": "non-finite values (TRT rule 9)"},
                              notes={"pooled": "all-zero tensor: amax 1.0"},
                              spread={"minmax": {"pooled": {"std": 0.01234}}},
                              loaded_from=["ranges/minmax.json"])
    info = dataclasses.replace(base.data.info, group_column="movie_id",
                               limits={"test": {"key": "data.test.limit", "before": 300,
                                                "after": 24}})
    data = dataclasses.replace(base.data, kind="image", info=info,
                               feeds={"kind": "image", "layout": "NCHW"})
    step = StepRecord(name="smoothquant", params={"alpha": 0.8}, changes={"fc1": "x 1.25"},
                      skipped={"fc2": "no outlier channel above the ratio"})
    ptq = dataclasses.replace(base.ptq, steps=[step],
                              dropped_compare_tensors={"hr__smoothed": None})
    search = base.search_run
    proxy = {n: dataclasses.replace(p, inputs_missing=["hr_missing_input"])
             for n, p in search.proxy.items()}
    fill = dataclasses.replace(search.format_fill, n_required=812)
    search = dataclasses.replace(search, pruned=["fc0_pruned"], proxy=proxy, format_fill=fill,
                                 proxy_remeasured_tensors=["hr__smoothed_remeasured"])
    mixed = dataclasses.replace(base.candidates["mixed"], fp8_layers=["fc1"],
                                plan_reasons={"fc1": "kept out of INT8 by search; FP8 here"})
    stages = {**base.stages, "calibration": dataclasses.replace(base.stages["calibration"],
                                                                loaded=2)}
    so = base.signed
    fam = dataclasses.replace(so.family, supersedes="a" * 64)
    look = dataclasses.replace(so.ledger, this_look=dataclasses.replace(
        so.ledger.this_look, supersedes="b" * 64))
    filled = dataclasses.replace(base, calibration=cal, data=data, ptq=ptq, search=search,
                                 candidates={**base.candidates, "mixed": mixed}, stages=stages,
                                 signoff=dataclasses.replace(so, family=fam, ledger=look))
    lat = load_record(TESTS / "run" / "data" / "record_before_ort_cpu.json")
    cost = lat.latency.cost
    row = dataclasses.replace(cost.per_candidate["fp32"], fits_budget=False, batch_size=None,
                              fit=None, qps_per_instance=None, instances=None,
                              reason="no measured batch size has P99 <= 0.001 ms",
                              saving_note="FP32 does not fit the P99 budget at any batch size")
    timed = dataclasses.replace(lat, latency=dataclasses.replace(
        lat.latency, skipped={"int8.x": "not among this run's candidates"},
        skipped_batches={"64": "no full batch of 64 examples to time"},
        cost=dataclasses.replace(cost, per_candidate={**cost.per_candidate, "fp32": row})))
    margins = []
    for bound in ("floor", "ceiling"):
        c = base.candidates["fp16"]
        mg = Margin(**{bound: 0.987654}, decided=c.verdict.margin.decided)
        margins.append(dataclasses.replace(base, candidates={**base.candidates, "fp16": (
            dataclasses.replace(c, verdict=dataclasses.replace(c.verdict, margin=mg)))}))
    return [filled, timed, *margins]


def _present(value: object, text: str) -> bool:
    """A string value appears in the rendered text (escaped as the report escapes it)."""
    if not isinstance(value, str) or len(value.strip()) < 3:
        return False
    v = value.strip()
    forms = {v, html.escape(v), v.replace("|", "\\|"), v.replace("_", " ")}
    forms |= {f[:60] for f in forms} | {f[-40:] for f in forms}
    low = text.lower()
    return any(f in text or f.lower() in low for f in forms)


def _leaves(v: object) -> list[object]:
    if dataclasses.is_dataclass(v):
        return []
    if isinstance(v, dict):
        return [x for y in v.values() for x in _leaves(y)]
    if isinstance(v, (list, tuple)):
        return [x for y in v for x in _leaves(y)]
    return [v]


def _walk(obj: object, text: str, valued: set[str], shown: set[str]) -> None:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in _fields(type(obj)):
            v = object.__getattribute__(obj, f.name)
            key = f"{type(obj).__name__}.{f.name}"
            if v is not None and v != {} and v != [] and v != ():
                valued.add(key)
                if any(_present(x, text) for x in _leaves(v)):
                    shown.add(key)
            _walk(v, text, valued, shown)
    elif isinstance(obj, dict):
        for v in obj.values():
            _walk(v, text, valued, shown)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _walk(v, text, valued, shown)


def _tracking(read: set[str]):
    """Each record class's __getattribute__ replaced by one that notes the fields code of
    quantkit/report/ reads (directly, or through a helper it calls)."""
    saved = {}
    for cls in CLASSES:
        names = {f.name for f in _fields(cls)}
        original = cls.__getattribute__

        def getattribute(self, name, _names=names, _cls=cls, _original=original):
            if name in _names:
                frame, depth = sys._getframe(1), 0
                while frame is not None and depth < 8:
                    if frame.f_globals.get("__name__", "").startswith("quantkit.report"):
                        read.add(f"{_cls.__name__}.{name}")
                        break
                    frame, depth = frame.f_back, depth + 1
            return _original(self, name)

        saved[cls] = original
        cls.__getattribute__ = getattribute
    return saved


@pytest.fixture(scope="module")
def coverage():
    records = [load_record(p) for p in FIXTURES] + _variants()
    read: set[str] = set()
    texts = []
    saved = _tracking(read)
    try:
        for rec in records:
            ctx = build_context(rec, with_plots=True)
            texts.append(render_markdown(rec, ctx=ctx) + render_html(rec, ctx=ctx))
    finally:
        for cls, original in saved.items():
            cls.__getattribute__ = original
    valued: set[str] = set()
    shown: set[str] = set()
    for rec, text in zip(records, texts):
        _walk(rec, text, valued, shown)
    return valued, read | shown


def test_every_recorded_field_is_rendered_or_listed_with_why(coverage):
    valued, rendered = coverage
    missing = sorted(k for k in valued if k not in rendered and not _listed(k))
    assert missing == [], ("recorded but neither rendered nor in "
                           "quantkit/report/not_rendered.py: " + ", ".join(missing))


def test_every_field_of_the_schema_is_checked(coverage):
    """A field no fixture and no variant has a value for cannot be shown rendered: give it
    a value in a variant above, or list it with why."""
    valued, _ = coverage
    unchecked = sorted(k for k in FIELDS if k not in valued and not _listed(k))
    assert unchecked == []


def test_the_list_names_fields_of_the_schema_only():
    classes = {c.__name__ for c in CLASSES}
    stale = [k for k in NOT_RENDERED if k not in FIELDS and k not in classes]
    assert stale == []
    assert all(why.strip() for why in NOT_RENDERED.values())
