"""``ab_verdict``: is the candidate (INT8 / mixed) non-inferior to the reference (FP32)?

Rules, in order (all deltas are ``candidate - reference`` on the same examples):

1. Aggregate. The paired percentile-bootstrap two-sided (1 - alpha) interval of the
   primary metric's delta is compared with ``-m``, ``m = margin_abs(margin, ref metric)``:
   PASS if ``low > -m``, FAIL if ``high < -m``, else INCONCLUSIVE (see
   ``quantkit.verdict.decision``; PASS is a one-sided test at alpha/2, conservative).
2. Slices (optional). For every value of every slice with ``n >= min_slice_n`` examples,
   the same paired bootstrap (``B = max(n_boot, ceil(10 k / alpha))`` resamples for k
   tested slice values, so the smallest attainable Holm-adjusted p, k / (B + 1), stays
   below alpha / 10) gives one-sided p-values against the slice's own margin ``m_s``
   (relative margins use the slice's reference metric):

   * regression, H0': delta_s >= -m_s:   ``p_reg = (1 + #{delta* >= -m_s}) / (B + 1)``
   * non-inferiority, H0: delta_s <= -m_s: ``p_ni = (1 + #{delta* <= -m_s}) / (B + 1)``

   Each family is Holm-adjusted across all tested slice values of all slices together.
   A slice value is FAIL if its adjusted ``p_reg < alpha`` (evidence, family-wise at
   alpha, that it loses more than the margin), PASS if its adjusted ``p_ni < alpha``,
   else INCONCLUSIVE; smaller ones are SKIPPED and not tested.
3. Final status. Any FAIL slice makes the verdict FAIL (an aggregate PASS or
   INCONCLUSIVE is overridden, and a reason names the slice). Otherwise the aggregate
   status stands. Slice PASS / INCONCLUSIVE never change it.
4. Evidence that does not decide: the exact McNemar test on discordant pairs (a test of
   *any* difference, H0: delta = 0) and ``extra_metrics`` intervals are reported only.
5. INCONCLUSIVE carries ``required_n``: the eval size that would decide at the observed
   effect, ``ceil((z_{1-alpha/2} * sd / |delta + m|)^2)`` (see ``decision.required_n``).

Randomness: the primary interval uses ``as_rng(seed)`` directly, so
``ab_verdict(..., seed=s)`` and ``paired_bootstrap_delta(..., seed=s)`` /
``decide_from_correct(..., seed=s)`` give the same interval; extra metrics and slices use
independent child streams spawned from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from quantkit.errors import ConfigError, DataError
from quantkit.verdict.decision import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    Decision,
    decide_from_predictions,
)
from quantkit.verdict.margin import Margin, check_alpha, check_n_boot, margin_abs
from quantkit.verdict.stats import (
    Metric,
    Seed,
    as_rng,
    bootstrap_deltas,
    check_metric,
    check_paired,
    holm_adjust,
    mcnemar_exact,
    mcnemar_table,
    metric_name,
    metric_value,
    percentile_interval,
    z_two_sided,
)

__all__ = ["SKIPPED", "Verdict", "ab_verdict"]

SKIPPED = "SKIPPED"


def _json_safe(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    return value


@dataclass
class Verdict:
    """PASS | FAIL | INCONCLUSIVE with the reasons, intervals and tests behind it.

    ``deltas``: metric -> interval dict (point, low, high, level, se) plus ``ref`` and
    ``cand`` values. ``mcnemar``: a, b, c, d, p. ``margin``: kind, value, abs (metric
    units), metric. ``slices``: one dict per slice value (see the module docstring).
    ``bool(verdict)`` is True only for PASS.
    """

    status: str
    reasons: list[str]
    deltas: dict[str, dict[str, Any]]
    mcnemar: dict[str, Any] = field(default_factory=dict)
    margin: dict[str, Any] = field(default_factory=dict)
    n: int = 0
    required_n: int | None = None
    slices: list[dict[str, Any]] = field(default_factory=list)
    metric: str = "accuracy"
    alpha: float = 0.05

    def __bool__(self) -> bool:
        return self.status == PASS

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (plain types; non-finite floats become None)."""
        return _json_safe({
            "status": self.status, "reasons": list(self.reasons), "deltas": self.deltas,
            "mcnemar": self.mcnemar, "margin": self.margin, "n": self.n,
            "required_n": self.required_n, "slices": self.slices, "metric": self.metric,
            "alpha": self.alpha,
        })


def _delta_entry(decision_or_interval: Any, ref: float, cand: float) -> dict[str, Any]:
    out = decision_or_interval.to_dict()
    out.update(ref=float(ref), cand=float(cand))
    return out


def _aggregate_reason(dec: Decision, margin: Margin) -> str:
    iv = dec.interval
    head = (f"{dec.metric} delta {iv.describe()} "
            f"({margin.describe(dec.ref_value, dec.metric)})")
    if dec.status == PASS:
        return f"{head} is above -margin {-dec.margin_abs:+.4f}: non-inferior"
    if dec.status == FAIL:
        return (f"{head} is entirely below -margin {-dec.margin_abs:+.4f}: "
                f"the candidate loses more than the margin")
    return (f"{head} contains -margin {-dec.margin_abs:+.4f}: "
            f"{dec.n} examples are too few to decide")


def _required_reason(dec: Decision, alpha: float) -> str:
    if dec.required_n is None:
        return (f"the observed {dec.metric} delta {dec.interval.point:+.4f} sits on "
                f"-margin {-dec.margin_abs:+.4f}: no eval size decides at this effect")
    side = PASS if dec.interval.point > -dec.margin_abs else FAIL
    return (f"about {dec.required_n} paired examples would decide ({side}) if the true "
            f"delta is the observed {dec.interval.point:+.4f}: "
            f"n = ceil((z_{{1-alpha/2}} * sd / |delta + margin|)^2) with "
            f"z = {z_two_sided(alpha):.3f}, sd = {dec.sd:.4f} (about even odds at that size)")


def _slice_checks(y: np.ndarray, pr: np.ndarray, pc: np.ndarray,
                  slices: Mapping[str, Any], *, metric: Metric, margin: Margin,
                  alpha: float, n_boot: int, min_slice_n: int,
                  rng: np.random.Generator,
                  labels: Sequence[Any] | None) -> list[dict[str, Any]]:
    groups: list[tuple[str, Any, np.ndarray]] = []
    for name, keys in slices.items():
        k = np.asarray(keys)
        if k.shape != y.shape:
            raise DataError("slice keys must give one key per example",
                            where=f"ab_verdict(slices[{name!r}])", value=(k.shape, y.shape),
                            fix="pass a 1-D array of slice keys of length n")
        values, inverse = np.unique(k, return_inverse=True)
        inverse = inverse.ravel()
        for i, value in enumerate(values):
            groups.append((str(name), value, inverse == i))

    tested = [g for g in groups if int(g[2].sum()) >= min_slice_n]
    n_tested = len(tested)
    boot = max(n_boot, math.ceil(10 * n_tested / alpha)) if n_tested else n_boot
    child_rngs = rng.spawn(n_tested) if n_tested else []

    rows: list[dict[str, Any]] = []
    p_reg: list[float] = []
    p_ni: list[float] = []
    tested_rows: list[dict[str, Any]] = []
    child = iter(child_rngs)
    for name, value, mask in groups:
        n_s = int(mask.sum())
        row: dict[str, Any] = {"slice": name, "value": str(value), "n": n_s}
        if n_s < min_slice_n:
            row.update(status=SKIPPED, reason=f"n={n_s} < min_slice_n={min_slice_n}")
            rows.append(row)
            continue
        ys, rs, cs = y[mask], pr[mask], pc[mask]
        slice_labels = labels
        if slice_labels is None and metric == "macro_f1":
            slice_labels = np.unique(np.concatenate([ys, rs, cs])).tolist()
        point, deltas = bootstrap_deltas(ys, rs, cs, metric=metric, n_boot=boot,
                                         rng=next(child), labels=slice_labels)
        ref_s = metric_value(ys, rs, metric, labels=slice_labels)
        m_s = margin_abs(margin, ref_s)
        p_reg.append((1 + int(np.count_nonzero(deltas >= -m_s))) / (boot + 1))
        p_ni.append((1 + int(np.count_nonzero(deltas <= -m_s))) / (boot + 1))
        row.update(delta=percentile_interval(point, deltas, alpha=alpha).to_dict(),
                   ref=ref_s, cand=metric_value(ys, cs, metric, labels=slice_labels),
                   margin_abs=m_s, n_boot=boot)
        rows.append(row)
        tested_rows.append(row)

    reg_adj = holm_adjust(p_reg)
    ni_adj = holm_adjust(p_ni)
    for row, pr_raw, pr_adj, pn_raw, pn_adj in zip(tested_rows, p_reg, reg_adj, p_ni, ni_adj):
        if pr_adj < alpha:
            status = FAIL
        elif pn_adj < alpha:
            status = PASS
        else:
            status = INCONCLUSIVE
        row.update(status=status, p_regression=pr_raw, p_regression_holm=float(pr_adj),
                   p_noninferiority=pn_raw, p_noninferiority_holm=float(pn_adj))
    return rows


def ab_verdict(y_true: Any, pred_ref: Any, pred_cand: Any, *, margin: Margin,
               alpha: float = 0.05, metric: Metric = "accuracy",
               extra_metrics: Sequence[Metric] = ("macro_f1",), n_boot: int = 2000,
               seed: Seed = 0, slices: Mapping[str, Any] | None = None,
               min_slice_n: int = 30, labels: Sequence[Any] | None = None) -> Verdict:
    """Paired non-inferiority verdict of ``pred_cand`` against ``pred_ref`` on ``y_true``.

    Inputs are 1-D predicted labels for the same examples. ``metric`` decides;
    ``extra_metrics`` are reported only; ``slices`` maps a slice name to one key per
    example. ``labels`` fixes the class set for macro-F1 (default: every label seen).
    The decision rules are in the module docstring.
    """
    alpha = check_alpha(alpha)
    n_boot = check_n_boot(n_boot)
    metric = check_metric(metric)
    if not isinstance(margin, Margin):
        raise ConfigError("margin must be a quantkit.verdict.Margin", where="verdict.margin",
                          value=margin, fix="pass Margin('relative', 0.01)")
    if isinstance(min_slice_n, bool) or not isinstance(min_slice_n, (int, np.integer)) \
            or min_slice_n < 1:
        raise ConfigError("min_slice_n must be a positive integer", where="verdict.min_slice_n",
                          value=min_slice_n, fix="set e.g. verdict.min_slice_n=30")
    y, pr, pc = check_paired(y_true, pred_ref, pred_cand, "ab_verdict")
    n = int(y.size)
    name = metric_name(metric)
    if labels is None:
        all_labels = np.unique(np.concatenate([y, pr, pc])).tolist()
    else:
        all_labels = list(labels)

    rng = as_rng(seed)
    extra_rng, slice_rng = rng.spawn(2)

    primary_labels = all_labels if metric == "macro_f1" else None
    dec = decide_from_predictions(y, pr, pc, margin=margin, metric=metric, alpha=alpha,
                                  n_boot=n_boot, seed=rng, labels=primary_labels)

    a, b, c, d = mcnemar_table(pr == y, pc == y)
    p_mcnemar = mcnemar_exact(b, c)

    deltas = {name: _delta_entry(dec.interval, dec.ref_value, dec.cand_value)}
    reasons = [_aggregate_reason(dec, margin),
               f"reference {name} {dec.ref_value:.4f}, candidate {dec.cand_value:.4f} "
               f"on n={n} paired examples"]

    extras = [check_metric(e) for e in extra_metrics if metric_name(check_metric(e)) != name]
    for extra, extra_child in zip(extras, extra_rng.spawn(len(extras)) if extras else []):
        extra_labels = all_labels if extra == "macro_f1" else None
        point, boots = bootstrap_deltas(y, pr, pc, metric=extra, n_boot=n_boot,
                                        rng=extra_child, labels=extra_labels)
        iv = percentile_interval(point, boots, alpha=alpha)
        ename = metric_name(extra)
        deltas[ename] = _delta_entry(iv, metric_value(y, pr, extra, labels=extra_labels),
                                     metric_value(y, pc, extra, labels=extra_labels))
        reasons.append(f"{ename} delta {iv.describe()} (reported, does not decide)")

    reasons.append(f"McNemar exact test on discordant pairs: reference-only correct b={b}, "
                   f"candidate-only correct c={c}, p = {p_mcnemar:.3g} (tests any "
                   f"difference; reported, the margin decides)")

    slice_rows: list[dict[str, Any]] = []
    status = dec.status
    if slices:
        slice_rows = _slice_checks(y, pr, pc, slices, metric=metric, margin=margin,
                                   alpha=alpha, n_boot=n_boot, min_slice_n=int(min_slice_n),
                                   rng=slice_rng, labels=labels)
        failed = [r for r in slice_rows if r["status"] == FAIL]
        for r in failed:
            reasons.append(
                f"slice {r['slice']}={r['value']} (n={r['n']}) regresses beyond its margin: "
                f"{name} delta {r['delta']['point']:+.4f} [{100 * (1 - alpha):g}% CI "
                f"{r['delta']['low']:+.4f}, {r['delta']['high']:+.4f}] vs -margin "
                f"{-r['margin_abs']:+.4f}, Holm-adjusted p = {r['p_regression_holm']:.4g} "
                f"< alpha {alpha:g}")
        if failed:
            if status != FAIL:
                reasons.append(f"aggregate {status} overridden to FAIL by "
                               f"{len(failed)} regressed slice value(s): "
                               + ", ".join(f"{r['slice']}={r['value']}" for r in failed))
            status = FAIL
        skipped = [r for r in slice_rows if r["status"] == SKIPPED]
        tested = len(slice_rows) - len(skipped)
        reasons.append(f"{tested} slice value(s) tested with Holm correction at alpha "
                       f"{alpha:g}; {len(skipped)} skipped (n < {min_slice_n})")

    need = dec.required_n if status == INCONCLUSIVE else None
    if status == INCONCLUSIVE:
        reasons.append(_required_reason(dec, alpha))

    return Verdict(
        status=status, reasons=reasons, deltas=deltas,
        mcnemar={"a": a, "b": b, "c": c, "d": d, "p": p_mcnemar},
        margin={**margin.to_dict(), "abs": dec.margin_abs, "metric": name},
        n=n, required_n=need, slices=slice_rows, metric=name, alpha=alpha,
    )
