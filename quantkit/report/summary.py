"""The one-screen summary printed at the end of a run (``python -m quantkit``), read from the
typed RunRecord."""

from __future__ import annotations

from pathlib import Path

from quantkit.record.candidate import BackendCheckRecord
from quantkit.record.run_record import RunRecord
from quantkit.record.signoff import LookFacts
from quantkit.record.verdict import Margin
from quantkit.report.status import trt_command
from quantkit.verdict.margin import DELTA_METRICS, MAP_METRIC_NAMES

__all__ = ["summary_lines", "engine_check_lines", "margin_split_line"]


def _ledger_lines(facts: LookFacts | None) -> list[str]:
    """What the persistent test ledger says about this sign-off (record.signoff.ledger)."""
    if facts is None:
        return []
    knows = [f"test ledger: {facts.ledger_knows}"] if facts.ledger_knows else []
    study = [] if not facts.new_study else [
        f"test ledger: new study declared (verdict.new_study): {facts.new_study}"
        if facts.joined_by in ("new_study", None) else
        f"test ledger: verdict.new_study ({facts.new_study}) is not a new study here: these "
        f"test examples overlap earlier looks of the model, so the look is charged with them"]
    if facts.look is None:
        return [f"test ledger: {facts.summary} ({facts.path})", *knows, *study]
    this = facts.this_look
    line = f"test ledger: {facts.summary}"
    if this is not None and this.supersedes:
        line += f"; supersedes look {str(this.supersedes)[:12]}"
    line += f" (look {str(facts.look_id)[:12]}, {facts.path})"
    out = [line, *knows, *study]
    check = facts.execution_check
    if check is not None:
        out.append("test ledger: execution check (first decided on "
                   f"{check.first_execution}): " + ", ".join(
                       f"{n} {check.first_statuses.get(n, '?')} there, {s} here -> "
                       f"{check.combined.get(n, '?')}" for n, s in check.statuses.items()))
    if facts.read_from_ledger:
        out.append(f"sign-off read from the test ledger: an identical run made look "
                   f"{facts.look} at {this.started if this is not None else None}; its "
                   f"decision stands, nothing re-decided or charged")
    if facts.other_data_looks:
        out.append(f"test ledger: {facts.other_data_looks} other look(s) of this model in other "
                   f"lineages (another study, not charged here; `quantkit ledger` lists them)")
    return out


def _margin_line(mg: Margin) -> str:
    """What the verdicts decided against, in one line."""
    share, value = mg.share, mg.labelled
    metric = mg.decided.metric if mg.decided is not None else None
    if mg.min_agreement is not None:
        return (f"margin: label-free, top-1 agreement with FP32 must be shown "
                f">= {mg.min_agreement:g}")
    if share is not None:
        return (f"margin: label-free, at least {share.min_share:g} of the examples "
                f"must be shown with {metric} vs FP32 "
                f"{'>=' if share.higher_is_better else '<='} "
                f"{share.bound:g} (exact binomial bound; the "
                f"{share.quantile:g} quantile: verdict.score_quantile less the engine "
                f"check's part, where one is in the bound)")
    if mg.floor is not None or mg.ceiling is not None:
        bound = "floor" if mg.floor is not None else "ceiling"
        at = mg.floor if mg.floor is not None else mg.ceiling
        return (f"margin: label-free, the mean per-example {metric} vs FP32 "
                f"must be shown {'above' if bound == 'floor' else 'below'} the "
                f"declared {bound} {at:g}")
    if value is not None and mg.kind is not None and metric is not None:
        return (f"margin: {metric} within {value.value:g} {mg.kind} of FP32 "
                f"(absolute {value.abs:.4f})")
    return f"margin: {mg}"


def summary_lines(record: RunRecord) -> list[str]:
    """The one-screen summary printed at the end of a run."""
    lines = [f"quantkit run: {record.experiment}  ->  {record.run_dir}"]
    m, d = record.model, record.data
    lines.append(f"model: {m.source if m else None}  sha256 {str(m.sha256 if m else None)[:12]}"
                 f"{'  (prepared model reused from cache)' if m and m.cached else ''}")
    lines.append(f"data: {d.name if d else None}  sizes {d.sizes if d else None}")
    cal = record.calibration
    if cal:
        lines.append(f"calibration: {cal.tensors} tensors, {cal.samples} samples, "
                     f"{len(cal.excluded)} excluded (non-finite), methods "
                     f"{','.join(cal.methods)}")
    for w in d.info.warnings if d is not None and d.info is not None else []:
        lines.append(f"data warning {w.code}: {w.message}")
    so = record.signed
    family = list(so.family.candidates) if so is not None else []
    lines += _ledger_lines(so.ledger if so is not None else None)
    if family:
        lines.append(f"sign-off family (declared on dev, {so.method}, one-sided alpha "
                     f"{so.alpha_one_sided:.4g}): {' -> '.join(family)}; each tested "
                     f"once on test")
    for row in so.power_plan.rows if so is not None else []:
        if row.tested is False:
            lines.append(f"not tested: {row.reason}")
        elif not row.adequate:
            lines.append(f"power plan: {row.reason}")
    embedding = any(c.embedding_fp32 is not None for c in record.candidates.values())
    third = "cosine" if embedding else "kl"  # beside accuracy and agreement, where cheap
    vmetric = next((c.verdict.metric for c in record.candidates.values() if c.verdict),
                   "accuracy")
    head = (f"{vmetric} delta [95% CI]" if vmetric in MAP_METRIC_NAMES else
            "delta [95% CI]" if vmetric in DELTA_METRICS else
            f"{vmetric} [95% CI]" if vmetric == "agreement" else f"{vmetric} share [95% CI]")
    detector = any(c.detection is not None for c in record.candidates.values())
    cols = ("mAP", "mAP@.5", "vs FP32") if detector else ("accuracy", "agree", third)
    lines.append(f"  {'candidate':<20} {'split':<5} {cols[0]:>8} {cols[1]:>6} "
                 f"{cols[2]:>8} {head:>26}  verdict")
    for name, c in record.candidates.items():
        met = c.metrics
        v = c.verdict
        agree = f"{c.agreement_fp32:.4f}" if c.agreement_fp32 is not None else "-"
        x = met.value(third)
        extra = (f"{x:.4f}" if embedding else f"{x:.3g}") if x is not None else "-"
        if detector:  # mAP@[.5:.95], mAP@.5 against the labels; mAP against FP32's boxes
            agree = f"{met.map50:.4f}" if met.map50 is not None else "-"
            x = 1.0 if name == "fp32" else met.map_vs_fp32
            extra = f"{x:.4f}" if x is not None else "-"
        split = c.split or ""
        if v:
            dl = v.deltas[v.metric]
            fmt = "+.4f" if v.metric in DELTA_METRICS else ".4f"
            ci = f"{dl.point:{fmt}} [{dl.low:{fmt}}, {dl.high:{fmt}}]"
            status = v.status if name in family else f"({v.status} on dev; not signed off)"
        else:
            ci, status = "-", "reference"
        first = met.map if detector else met.accuracy
        acc = f"{first:>8.4f}" if first is not None else f"{'-':>8}"  # label-free
        lines.append(f"  {name:<20} {split:<5} {acc} {agree:>6} {extra:>8} {ci:>26}  {status}")
        if c.first_diverging:
            lines.append(f"  {'':<20} first diverging node: {c.first_diverging_node} "
                         f"(tensor {c.first_diverging})")
        bc = c.backend_check
        if bc and bc.gates_recommendation and not bc.ok:
            lines.append(f"  {'':<20} {bc.what_to_run or 'engine check did not pass'}")
    if record.candidates:
        any_v = next((c.verdict for c in record.candidates.values() if c.verdict), None)
        if any_v:
            lines.append(_margin_line(any_v.margin))
    lines += margin_split_line(record)
    if family and so.alpha_one_sided:
        alpha = record.configured("verdict", "alpha")
        lines.append(f"intervals of the family members on test: "
                     f"{100 * (1 - 2 * so.alpha_one_sided):.4g}% (two-sided, the look's "
                     f"one-sided alpha {so.alpha_one_sided:.4g}); dev rows: "
                     f"{100 * (1 - (alpha if alpha is not None else 0.05)):g}%")
    sr = record.search_run
    if sr is not None and sr.status != "PASS":  # why no mixed candidate is in the family
        lines.append(f"mixed-precision search: {sr.status} on dev with {len(sr.fp16_nodes)} "
                     f"layer(s) out of INT8 after {sr.full_evals} full evaluations: {sr.reason}")
    elif sr is not None and len(sr.fp16_nodes) >= sr.quantizable_layers > 0:
        lines.append(f"mixed-precision search: PASS on dev only with all {sr.quantizable_layers} "
                     f"layers out of INT8 (the fp16 candidate again: not declared) after "
                     f"{sr.full_evals} full evaluations: {sr.reason}")
    reason = record.recommendation.reason if record.recommendation is not None else ""
    bc = _check_of(record, record.recommended)
    pending = (", engine check NOT run: signed numbers bound the emulation only, not the "
               "deployed artifact" if bc is not None and bc.status == "not_run" else "")
    lines.append(f"recommended: {record.recommended or 'none'}{pending} ({reason})")
    lines += engine_check_lines(record)
    lines += [f"WARNING {n}" for n in record.notes
              if n.startswith("recommended candidate ") or "does not transfer" in n]
    lat = {n: c.latency for n, c in record.candidates.items() if c.latency is not None}
    if lat:
        batch = max((b for per in lat.values() for b in per), key=lambda b: int(b))
        thr = ", ".join(f"{n} {per[batch].throughput:.0f}/s" for n, per in lat.items()
                        if batch in per)
        info = record.latency
        where = info.label.execution if info is not None else ""
        if info is not None and info.label.device == "CPU" and info.label.target == "tensorrt":
            where += ", not a TensorRT prediction"
        lines.append(f"latency (batch {batch}, {where}; P50/P90/P99 and cost in the report): "
                     f"{thr}")
    stages = ", ".join(f"{k} {v.seconds:.1f}s" for k, v in record.stages.items())
    lines.append(f"stages: {stages}")
    lines.append(f"record: {Path(record.run_dir) / 'record.json'}")
    html = Path(record.run_dir) / "report.html"
    if html.exists():
        lines.append(f"report: {html}")
    return lines


def _check_of(record: RunRecord, name: str | None) -> BackendCheckRecord | None:
    """The engine check of candidate ``name`` (None: no such candidate or no check)."""
    c = record.candidate(name)
    return c.backend_check if c is not None else None


def engine_check_lines(record: RunRecord) -> list[str]:
    """What the engine check says about the recommended candidate's deployed artifact: its
    one bound, or plainly that the check has NOT run and what to run where."""
    name = record.recommended
    bc = _check_of(record, name) if name else None
    if not bc or bc.status is None:
        return []
    b = bc.basis.budget if bc.basis is not None else None
    if bc.status == "not_run":
        deployment = bc.basis.deployment if bc.basis is not None else ""
        trt = str(deployment).startswith("a TensorRT")
        todo = (f"run `{trt_command(record.command)}` on the target GPU (tensorrt >= 10); "
                "its engine check gates the recommendation" if trt else bc.what_to_run)
        return [f"WARNING engine check NOT run for {name}: {bc.reason}; the sign-off "
                f"(at {b.signoff if b else 0:.4g} of the declared {b.declared if b else 0:.4g}) "
                f"bounds the emulation, not the deployed artifact",
                f"WARNING to do: {todo}"]
    note = next((n for n in record.notes if n.startswith(f"deployment of {name}:")), None)
    return [note] if note else []


def margin_split_line(record: RunRecord) -> list[str]:
    """How the declared margin is split between the sign-off and the engine check."""
    b = next((c.backend_check.basis.budget for c in record.candidates.values()
              if c.backend_check is not None and c.backend_check.basis is not None), None)
    if not b or not b.share:
        return []
    return [f"margin split: declared {b.declared:.4g} = sign-off at {b.signoff:.4g} + "
            f"engine check tolerance {b.tolerance:.4g} ({b.units} vs the emulation; "
            f"compare.numerics_margin_share={b.share:g})"]
