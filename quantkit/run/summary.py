"""The one-screen summary printed at the end of a run (``python -m quantkit``)."""

from __future__ import annotations

from pathlib import Path

from quantkit.report.record import RunRecord

__all__ = ["summary_lines"]


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
    if family:
        lines.append(f"sign-off family (declared on dev, {so.get('method')}, one-sided alpha "
                     f"{so.get('alpha_one_sided'):g}): {' -> '.join(family)}; each tested once "
                     f"on test")
        for row in (so.get("power_plan") or {}).get("rows", []):
            if not row.get("adequate", True):
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
        if bc and bc.get("checked") and not bc.get("ok"):
            lines.append(f"  {'':<20} backend check: {bc['compared']} agree "
                         f"{bc['agreement']:.3f} on {bc['n']} dev examples, gate "
                         f"{(bc.get('gate') or {}).get('status')}")
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
    rec = record.recommendation or {}
    lines.append(f"recommended: {record.recommended or 'none'} ({rec.get('reason', '')})")
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
