"""One candidate's paired test against FP32 on one split (dev: for choices; test: sign-off).

Built from the split's labels, groups and both models' logits, outside the stage cache (the
logits are cached; the test is cheap and seeded). The statistics are
:mod:`quantkit.verdict.signoff`: the wider of a score interval (Tango; Rao-Scott adjusted for
grouped data) and an iid / cluster bootstrap, a minimum size below which the verdict is
INCONCLUSIVE, and the churn gate (flip rate vs FP32, ``verdict.max_flip_rate``).
"""

from __future__ import annotations

import numpy as np

from quantkit.run.context import RunContext

__all__ = ["candidate_test", "decision_metric", "split_groups"]


def decision_metric(ctx: RunContext) -> str:
    """The metric every choice ranks by: ``agreement`` (with FP32) on label-free data or when
    ``verdict.metric=agreement``, else ``verdict.metric``."""
    v = ctx.settings.verdict
    return "agreement" if (ctx.splits.label_free or v.metric == "agreement") else v.metric


def split_groups(ctx: RunContext, split: str):
    """Group codes of a split for the cluster bootstrap, or None (ungrouped data)."""
    info = getattr(ctx.splits, "info", None)
    if info is None or not getattr(info, "grouped", False):
        return None
    return ctx.split(split).group_ids()


def candidate_test(ctx: RunContext, split: str, ref_logits: np.ndarray, logits: np.ndarray,
                   *, name: str):
    """The candidate's :class:`~quantkit.verdict.SignoffTest` on ``split`` (one-sided alpha =
    ``verdict.alpha / 2``), joined with the churn gate when ``verdict.max_flip_rate`` is set.

    Label-free data or ``verdict.metric=agreement``: non-inferiority of top-1 agreement with
    FP32 against ``verdict.min_agreement``.
    """
    from quantkit.verdict import Margin, agreement_signoff, churn_gate, paired_signoff, with_gate

    v, seed = ctx.settings.verdict, ctx.settings.seed
    alpha = v.alpha / 2
    groups = split_groups(ctx, split)
    ref_pred, pred = ref_logits.argmax(axis=1), logits.argmax(axis=1)
    common = dict(alpha=alpha, groups=groups, n_boot=v.n_boot, seed=seed, min_n=v.min_n,
                  min_groups=v.min_groups, candidate=name)
    if decision_metric(ctx) == "agreement":
        return agreement_signoff(ref_pred, pred, min_agreement=v.min_agreement, power=v.power,
                                 **common)
    y = ctx.split(split).labels
    test = paired_signoff(ref_pred == y, pred == y, margin=Margin(v.margin_kind, v.margin),
                          power=v.power, **common)
    if v.max_flip_rate is None:
        return test
    return with_gate(test, churn_gate(ref_pred, pred, max_flip_rate=v.max_flip_rate, **common))
