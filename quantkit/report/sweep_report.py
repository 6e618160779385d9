"""Compare the RunRecords of a sweep (Hydra multirun): rank every job's candidates on dev.

A sweep chooses, so it ranks on the dev split's evidence only (each candidate's ``dev``
entry, or its own entry when that is the dev evidence): sweep jobs leave the test split
alone (``verdict.signoff_in_sweeps``), and the chosen job's own command signs it off once.

Ranking, best first (values as recorded; nothing is re-measured):

1. verdict: PASS > INCONCLUSIVE > FAIL > anything else;
2. the decision metric's value (higher first; lower first for kl / abs_logit);
3. the lower bound of the metric's interval (higher first: the safer claim; label-free
   scores are tested as the share of examples within their tolerance, whose lower bound
   is ranked the same way; for kl / abs_logit in older records, the upper bound of the
   mean, lower first);
4. latency p50 at the smallest recorded batch, when present (lower first; missing last).

Ties keep job order, then candidate order. Candidates without a verdict (the FP32
reference) are listed per job but not ranked.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from quantkit.errors import ConfigError
from quantkit.record.candidate import CandidateRecord
from quantkit.record.migrate import as_record
from quantkit.record.run_record import RunRecord
from quantkit.record.search import SearchSkipped
from quantkit.record.signoff import SignoffSkipped
from quantkit.report.fmt import (
    DASH,
    finite,
    interval,
    num,
    sig,
    status_class,
    status_rank,
    write_atomic,
)

log = logging.getLogger(__name__)

__all__ = ["RANKING", "render_sweep", "sweep_summary"]

RANKING = ("on the dev split: verdict (PASS > INCONCLUSIVE > FAIL), then metric value (higher first), then the "
           "interval's lower bound (higher first), then latency p50 at the smallest batch "
           "(lower first, missing last)")


#: verdict metrics where a smaller value is better (label-free distances to FP32)
LOWER_IS_BETTER = ("kl", "abs_logit")


def _batch_key(b: str) -> tuple:
    try:
        return (0, float(b))
    except (TypeError, ValueError):
        return (1, str(b))


def _latency(c: CandidateRecord) -> tuple[str | None, float | None]:
    """(batch, p50_ms) at the smallest recorded batch, or (None, None)."""
    if c.latency is None:
        return None, None
    for batch in sorted(c.latency, key=_batch_key):
        s = c.latency[batch]
        if finite(s.p50_ms):
            return str(batch), float(s.p50_ms)
    return None, None


def _dev_evidence(c: CandidateRecord) -> CandidateRecord:
    """A candidate's dev evidence: its ``dev`` entry (signed-off family members carry their
    test evidence at the top), else the entry itself (compared on dev, never signed off).
    Latency is kept: it is the same artifact."""
    if c.dev is not None and c.dev.verdict is not None:
        return dataclasses.replace(c, metrics=c.dev.metrics, verdict=c.dev.verdict)
    return c


def _job_run(rec: RunRecord) -> dict[str, object]:
    """Where and how a job ran (``record.job``, ``record.stage_cache``): launcher, worker host,
    stage-cache hits, the stages it computed, and whether it ran again after a lost attempt."""
    job, counts = rec.job, rec.stage_cache
    attempt = job.attempt if job is not None else None
    later = isinstance(attempt, int) and attempt > 1
    return {"launcher": job.launcher if job is not None else None,
            "worker_host": (job.worker_host if job is not None else None) or rec.hostname,
            "cache_hits": sum(c.hits for c in counts.values()),
            "cache_misses": sum(c.misses for c in counts.values()),
            "computed": [s for s, c in counts.items() if c.misses],
            "attempt": attempt,
            "ran_again": later and not job.earlier_finished,
            "rerun_of_finished": later and bool(job.earlier_finished)}


def _label(record: RunRecord, i: int) -> str:
    return Path(str(record.run_dir)).name if record.run_dir else f"job {i}"


def sweep_summary(records: Sequence[RunRecord | Mapping[str, object]], *,
                  labels: Sequence[str] | None = None) -> dict[str, object]:
    """Rank every candidate with a verdict across ``records`` (see the module docstring).

    Returns ``{"ranking": str, "jobs": [...], "rows": [...], "best": row | None}``; each row
    has ``rank, job, label, experiment, candidate, status, metric, value, delta, low,
    latency_batch, latency_p50_ms, recommended, required_n``; each job also says where and
    how it ran (``record.job``, ``record.stage_cache``): ``launcher, worker_host,
    cache_hits, cache_misses, computed`` (stages it computed), ``attempt, ran_again`` (a
    later attempt whose earlier one did not finish), ``rerun_of_finished``.
    """
    if labels is not None and len(labels) != len(records):
        raise ConfigError("one label per record is needed", where="sweep_summary(labels)",
                          value=f"{len(labels)} labels for {len(records)} records",
                          fix="pass labels=None or one label per record")
    jobs, rows = [], []
    for i, raw in enumerate(records):
        if not isinstance(raw, (Mapping, RunRecord)):
            raise ConfigError("a sweep summary takes RunRecord dicts", where=f"records[{i}]",
                              value=type(raw).__name__, fix="load each record.json with json.load")
        rec = as_record(raw)
        label = labels[i] if labels is not None else _label(rec, i)
        recommended = rec.recommended
        rec_cand = rec.candidate(recommended) if recommended else None
        rec_status = rec_cand.verdict.status if rec_cand is not None and rec_cand.verdict else None
        jobs.append({"job": i, "label": label, "experiment": rec.experiment,
                     "run_dir": rec.run_dir, "command": rec.command,
                     "search_skipped": isinstance(rec.search, SearchSkipped),
                     "signoff_skipped": isinstance(rec.signoff, SignoffSkipped),
                     "recommended": recommended, "recommended_status": rec_status,
                     "candidates": len(rec.candidates), **_job_run(rec)})
        for name, c in rec.candidates.items():
            c = _dev_evidence(c)
            v = c.verdict
            if v is None:
                continue
            metric = v.decision_metric
            delta = v.delta(metric) if metric else None
            value = c.metrics.value(metric)
            if not finite(value) and delta is not None:
                value = delta.cand
            batch, p50 = _latency(c)
            rows.append({"job": i, "label": label, "experiment": rec.experiment,
                         "candidate": name, "status": v.status, "metric": metric,
                         "value": value if finite(value) else None, "delta": delta,
                         "low": delta.low if delta is not None and finite(delta.low) else None,
                         "margin_abs": v.margin.labelled.abs if v.margin.labelled else None,
                         "latency_batch": batch, "latency_p50_ms": p50,
                         "recommended": name == recommended,
                         "required_n": v.required_n,
                         "share": v.margin.share is not None})

    def key(r):
        # kl / abs_logit: lower is better, and the safer claim is the lower upper bound
        sign = -1.0 if r["metric"] in LOWER_IS_BETTER else 1.0
        b_sign = 1.0 if r["share"] else sign  # a share within the tolerance: higher first
        bound = (r["delta"].high if r["delta"] is not None else None) if b_sign < 0 else r["low"]
        return (status_rank(r["status"]),
                -sign * r["value"] if r["value"] is not None else math.inf,
                -b_sign * bound if finite(bound) else math.inf,
                r["latency_p50_ms"] if r["latency_p50_ms"] is not None else math.inf)

    rows.sort(key=key)  # stable: ties keep job order, then candidate order
    for rank, r in enumerate(rows, 1):
        r["rank"] = rank
    best = rows[0] if rows else None
    next_step = None
    job = jobs[best["job"]] if best is not None else {}
    if best is not None and (job["search_skipped"] or job["signoff_skipped"]) and job["command"]:
        # sweep jobs skip the search and the test sign-off; the best job's command runs both
        next_step = jobs[best["job"]]["command"]
    return {"ranking": RANKING, "jobs": jobs, "rows": rows, "best": best, "next_step": next_step}


def _context(summary: Mapping[str, object], links: Sequence[str | None] | None) -> dict[str, object]:
    rows = []
    for r in summary["rows"]:
        rows.append({
            "rank": r["rank"], "label": r["label"], "experiment": r["experiment"] or DASH,
            "candidate": r["candidate"], "status": r["status"] or DASH,
            "cls": status_class(r["status"]), "metric": r["metric"] or DASH,
            "value": num(r["value"]), "delta": interval(r["delta"], level=False),
            "low": num(r["low"]), "margin": sig(r["margin_abs"], 4) if finite(r["margin_abs"]) else DASH,
            "latency": (f"{num(r['latency_p50_ms'], 3)} (batch {r['latency_batch']})"
                        if r["latency_p50_ms"] is not None else "not measured"),
            "recommended": r["recommended"],
            "required_n": num(r["required_n"]) if r["status"] == "INCONCLUSIVE" else DASH,
            "link": links[r["job"]] if links else None,
        })
    jobs = [{**j, "experiment": j["experiment"] or DASH, "command": j["command"] or DASH,
             "launcher": j["launcher"] or DASH, "worker_host": j["worker_host"] or DASH,
             "cache": _cache_text(j), "attempt_text": _attempt_text(j),
             "recommended": j["recommended"] or "none",
             "recommended_status": j["recommended_status"] or DASH,
             "cls": status_class(j["recommended_status"]),
             "link": links[j["job"]] if links else None} for j in summary["jobs"]]
    best = rows[0] if rows else None
    return {"ranking": summary["ranking"], "rows": rows, "jobs": jobs, "best": best,
            "next_step": summary["next_step"],
            "ran_again": [j["label"] for j in summary["jobs"] if j["ran_again"]],
            "reread": [j["label"] for j in summary["jobs"] if j["rerun_of_finished"]]}


def _cache_text(job: Mapping[str, object]) -> str:
    if not job["cache_hits"] and not job["cache_misses"]:
        return "not recorded"
    text = f"{job['cache_hits']} hit(s), {job['cache_misses']} computed"
    return text + (f" ({', '.join(job['computed'])})" if job["computed"] else "")


def _attempt_text(job: Mapping[str, object]) -> str:
    if job["ran_again"]:
        return f"attempt {job['attempt']}: ran again (the earlier attempt did not finish)"
    if job["rerun_of_finished"]:
        return f"attempt {job['attempt']}: had finished before; rerun"
    return "first" if job["attempt"] == 1 else DASH


def render_sweep(records: Sequence[RunRecord | Mapping[str, object]], out_dir: str | Path, *,
                 labels: Sequence[str] | None = None,
                 links: Sequence[str | None] | None = None) -> dict[str, Path]:
    """Write sweep.md and sweep.html (atomically) to ``out_dir``; return ``{format: path}``.

    ``links`` optionally gives, per record, a relative href to that job's report.html.
    """
    from quantkit.report.render import _env

    if links is not None and len(links) != len(records):
        raise ConfigError("one link per record is needed", where="render_sweep(links)",
                          value=f"{len(links)} links for {len(records)} records",
                          fix="pass links=None or one (possibly None) link per record")
    ctx = _context(sweep_summary(records, labels=labels), links)
    texts = {"md": _env(False).get_template("sweep.md.j2").render(**ctx),
             "html": _env(True).get_template("sweep.html.j2").render(**ctx)}
    out_dir = Path(out_dir)
    paths = {fmt: write_atomic(out_dir / f"sweep.{fmt}", text.encode("utf-8"))
             for fmt, text in texts.items()}
    for p in paths.values():
        log.info("wrote %s", p)
    return paths
