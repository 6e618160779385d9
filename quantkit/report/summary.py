"""The one-screen summary printed at the end of a run (``python -m quantkit``)."""

from __future__ import annotations

from pathlib import Path

from quantkit.record.run_record import RunRecord

__all__ = ["summary_lines", "engine_check_lines", "margin_split_line"]


def _ledger_lines(so: dict) -> list[str]:
    """What the persistent test ledger says about this sign-off (record.signoff.ledger)."""
    facts = so.get("ledger") or {}
    if not facts:
        return []
    if facts.get("look") is None:
        return [f"test ledger: {facts.get('summary')} ({facts.get('path')})"]
    line = f"test ledger: {facts.get('summary')}"
    if facts.get("supersedes"):
        line += f"; supersedes look {str(facts['supersedes'])[:12]}"
    line += f" (look {str(facts.get('look_id'))[:12]}, {facts.get('path')})"
    out = [line]
    if facts.get("read_from_ledger"):
        out.append(f"sign-off read from the test ledger: an identical run made look "
                   f"{facts.get('look')} at {facts.get('started')}; its decision stands, nothing "
                   f"re-decided or charged")
    if facts.get("other_data_looks"):
        out.append(f"test ledger: {facts['other_data_looks']} other look(s) of this model on "
                   f"test data sharing no example with these (`quantkit ledger` lists them)")
    return out


def summary_lines(record: RunRecord) -> list[str]:
    """The one-screen summary printed at the end of a run."""
    lines = [f"quantkit run: {record.experiment}  ->  {record.run_dir}"]
    m = record.model
    lines.append(f"model: {m.get('source')}  sha256 {str(m.get('sha256'))[:12]}"
                 f"{'  (prepared model reused from cache)' if m.get('cached') else ''}")
    d = record.data
    lines.append(f"data: {d.get('name')}  sizes {d.get('sizes')}")
    cal = record.calibration
    if cal:
        lines.append(f"calibration: {cal.get('tensors')} tensors, {cal.get('samples')} samples, "
                     f"{len(cal.get('excluded', {}))} excluded (non-finite), methods "
                     f"{','.join(cal.get('methods', []))}")
    for w in (d.get("info") or {}).get("warnings", []) or []:
        lines.append(f"data warning {w.get('code')}: {w.get('message')}"
                     if isinstance(w, dict) else f"data warning: {w}")
    so = record.signoff or {}
    family = (so.get("family") or {}).get("candidates") or []
    lines += _ledger_lines(so)
    if family:
        lines.append(f"sign-off family (declared on dev, {so.get('method')}, one-sided alpha "
                     f"{so.get('alpha_one_sided'):.4g}): {' -> '.join(family)}; each tested "
                     f"once on test")
    for row in (so.get("power_plan") or {}).get("rows", []):
        if row.get("tested") is False:
            lines.append(f"not tested: {row.get('reason')}")
        elif not row.get("adequate", True):
            lines.append(f"power plan: {row.get('reason')}")
    embedding = any("embedding_fp32" in c for c in record.candidates.values())
    third = "cosine" if embedding else "kl"  # beside accuracy and agreement, where cheap
    vmetric = next((c["verdict"]["metric"] for c in record.candidates.values()
                    if c.get("verdict")), "accuracy")
    head = ("delta [95% CI]" if vmetric in ("accuracy", "macro_f1") else
            f"{vmetric} [95% CI]" if vmetric == "agreement" else f"{vmetric} share [95% CI]")
    lines.append(f"  {'candidate':<20} {'split':<5} {'accuracy':>8} {'agree':>6} "
                 f"{third:>8} {head:>26}  verdict")
    for name, c in record.candidates.items():
        met = c.get("metrics", {})
        v = c.get("verdict")
        agree = f"{c['agreement_fp32']:.4f}" if "agreement_fp32" in c else "-"
        extra = (f"{met[third]:.4f}" if embedding else f"{met[third]:.3g}") \
            if third in met else "-"
        split = c.get("split", "")
        if v:
            dl = v["deltas"][v["metric"]]
            fmt = "+.4f" if v["metric"] in ("accuracy", "macro_f1") else ".4f"
            ci = f"{dl['point']:{fmt}} [{dl['low']:{fmt}}, {dl['high']:{fmt}}]"
            status = v["status"] if name in family else f"({v['status']} on dev; not signed off)"
        else:
            ci, status = "-", "reference"
        acc = f"{met['accuracy']:>8.4f}" if "accuracy" in met else f"{'-':>8}"  # label-free: -
        lines.append(f"  {name:<20} {split:<5} {acc} {agree:>6} {extra:>8} {ci:>26}  {status}")
        if c.get("first_diverging"):
            lines.append(f"  {'':<20} first diverging node: {c.get('first_diverging_node')} "
                         f"(tensor {c['first_diverging']})")
        bc = c.get("backend_check")
        if bc and bc.get("gates_recommendation") and not bc.get("ok"):
            lines.append(f"  {'':<20} {bc.get('what_to_run') or 'engine check did not pass'}")
    if record.candidates:
        any_v = next((c["verdict"] for c in record.candidates.values() if "verdict" in c), None)
        if any_v:
            mg = any_v["margin"]
            if isinstance(mg, dict) and "min_agreement" in mg:
                lines.append(f"margin: label-free, top-1 agreement with FP32 must be shown "
                             f">= {mg['min_agreement']:g}")
            elif isinstance(mg, dict) and "quantile" in mg:
                lines.append(f"margin: label-free, at least {mg['min_share']:g} of the examples "
                             f"must be shown with {mg['metric']} vs FP32 "
                             f"{'>=' if mg.get('higher_is_better', True) else '<='} "
                             f"{mg['bound']:g} (exact binomial bound; the "
                             f"{mg['quantile']:g} quantile, verdict.score_quantile)")
            elif isinstance(mg, dict) and ("floor" in mg or "ceiling" in mg):
                bound = "floor" if "floor" in mg else "ceiling"
                lines.append(f"margin: label-free, the mean per-example {mg['metric']} vs FP32 "
                             f"must be shown {'above' if bound == 'floor' else 'below'} the "
                             f"declared {bound} {mg[bound]:g}")
            elif isinstance(mg, dict) and {"kind", "value", "abs", "metric"} <= set(mg):
                lines.append(f"margin: {mg['metric']} within {mg['value']:g} {mg['kind']} of FP32 "
                             f"(absolute {mg['abs']:.4f})")
            else:
                lines.append(f"margin: {mg}")
    lines += margin_split_line(record)
    if family and so.get("alpha_one_sided"):
        lines.append(f"intervals of the family members on test: "
                     f"{100 * (1 - 2 * so['alpha_one_sided']):.4g}% (two-sided, the look's "
                     f"one-sided alpha {so['alpha_one_sided']:.4g}); dev rows: "
                     f"{100 * (1 - (record.config.get('verdict') or {}).get('alpha', 0.05)):g}%")
    rec = record.recommendation or {}
    bc = (record.candidates.get(record.recommended) or {}).get("backend_check") or {}
    pending = ", engine check NOT run" if bc.get("status") == "not_run" else ""
    lines.append(f"recommended: {record.recommended or 'none'}{pending} "
                 f"({rec.get('reason', '')})")
    lines += engine_check_lines(record)
    lines += [f"WARNING {n}" for n in record.notes
              if n.startswith("recommended candidate ") or "does not transfer" in n]
    lat = {n: c["latency"] for n, c in record.candidates.items() if isinstance(c.get("latency"), dict)}
    if lat:
        batch = max((b for per in lat.values() for b in per), key=lambda b: int(b))
        thr = ", ".join(f"{n} {per[batch]['throughput']:.0f}/s" for n, per in lat.items()
                        if isinstance(per.get(batch), dict) and "throughput" in per[batch])
        info = record.latency or {}
        where = info.get("execution", "")
        if info.get("device") == "CPU" and info.get("target") == "tensorrt":
            where += ", not a TensorRT prediction"
        lines.append(f"latency (batch {batch}, {where}; P50/P90/P99 and cost in the report): "
                     f"{thr}")
    stages = ", ".join(f"{k} {v.get('seconds', 0):.1f}s" for k, v in record.stages.items())
    lines.append(f"stages: {stages}")
    lines.append(f"record: {Path(record.run_dir) / 'record.json'}")
    html = Path(record.run_dir) / "report.html"
    if html.exists():
        lines.append(f"report: {html}")
    return lines


def engine_check_lines(record: RunRecord) -> list[str]:
    """What the engine check says about the recommended candidate's deployed artifact: its
    one bound, or plainly that the check has NOT run and what to run where."""
    from quantkit.report.status import trt_command

    name = record.recommended
    bc = (record.candidates.get(name) or {}).get("backend_check") if name else None
    if not bc or "status" not in bc:
        return []
    b = bc.get("budget") or {}
    if bc.get("status") == "not_run":
        trt = str(bc.get("deployment", "")).startswith("a TensorRT")
        todo = (f"run `{trt_command(record.command)}` on the target GPU (tensorrt >= 10); "
                "its engine check gates the recommendation" if trt else bc.get("what_to_run"))
        return [f"WARNING engine check NOT run for {name}: {bc.get('reason')}; the sign-off "
                f"(at {b.get('signoff', 0):.4g} of the declared {b.get('declared', 0):.4g}) "
                f"bounds the emulation, not the deployed artifact",
                f"WARNING to do: {todo}"]
    note = next((n for n in record.notes if n.startswith(f"deployment of {name}:")), None)
    return [note] if note else []


def margin_split_line(record: RunRecord) -> list[str]:
    """How the declared margin is split between the sign-off and the engine check."""
    b = next(((c.get("backend_check") or {}).get("budget") for c in record.candidates.values()
              if (c.get("backend_check") or {}).get("budget")), None)
    if not b or not b.get("share"):
        return []
    return [f"margin split: declared {b['declared']:.4g} = sign-off at {b['signoff']:.4g} + "
            f"engine check tolerance {b['tolerance']:.4g} ({b['units']} vs the emulation; "
            f"compare.numerics_margin_share={b['share']:g})"]
