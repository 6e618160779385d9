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
    lines.append(f"  {'candidate':<20} {'accuracy':>8} {'macro-F1':>8} {'agree':>6} "
                 f"{'delta [95% CI]':>26}  verdict")
    for name, c in record.candidates.items():
        met = c.get("metrics", {})
        v = c.get("verdict")
        agree = f"{c['agreement_fp32']:.4f}" if "agreement_fp32" in c else "-"
        if v:
            dl = v["deltas"][v["metric"]]
            ci = f"{dl['point']:+.4f} [{dl['low']:+.4f}, {dl['high']:+.4f}]"
            status = v["status"]
        else:
            ci, status = "-", "reference"
        lines.append(f"  {name:<20} {met.get('accuracy', float('nan')):>8.4f} "
                     f"{met.get('macro_f1', float('nan')):>8.4f} {agree:>6} {ci:>26}  {status}")
        if c.get("first_diverging"):
            lines.append(f"  {'':<20} first diverging node: {c.get('first_diverging_node')} "
                         f"(tensor {c['first_diverging']})")
        bc = c.get("backend_check")
        if bc and bc.get("checked") and not bc.get("ok"):
            lines.append(f"  {'':<20} WARNING backend check agreement {bc['agreement']:.3f}")
    if record.candidates:
        any_v = next((c["verdict"] for c in record.candidates.values() if "verdict" in c), None)
        if any_v:
            mg = any_v["margin"]
            if isinstance(mg, dict) and {"kind", "value", "abs", "metric"} <= set(mg):
                lines.append(f"margin: {mg['metric']} within {mg['value']:g} {mg['kind']} of FP32 "
                             f"(absolute {mg['abs']:.4f})")
            else:
                lines.append(f"margin: {mg}")
    lines.append(f"recommended: {record.recommended or 'none (no candidate passed)'}")
    lines += [f"WARNING {n}" for n in record.notes if n.startswith("recommended candidate ")]
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
