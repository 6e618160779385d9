"""One candidate's paired test against FP32 on one split (dev: for choices; test: sign-off).

Built from the split's labels, groups and both models' outputs, outside the stage cache (the
outputs are cached; the test is cheap and seeded). The statistics are
:mod:`quantkit.verdict.signoff`: the wider of a score interval (Tango; Rao-Scott adjusted for
grouped data) and an iid / cluster bootstrap, a minimum size below which the verdict is
INCONCLUSIVE, and the churn gate (flip rate vs FP32, ``verdict.max_flip_rate``).

Label-free metrics are one path: a per-example score vs FP32 against a declared bound
(:func:`example_scores` then :func:`quantkit.verdict.score_signoff`): top-1 agreement, KL and
mean |logit delta| for logit outputs, cosine and recall@k of FP32's neighbours for
embeddings.
"""

from __future__ import annotations

import numpy as np

from quantkit.errors import ConfigError
from quantkit.run.context import RunContext

__all__ = ["candidate_test", "decision_metric", "decision_value", "example_scores",
           "signoff_threshold",
           "higher_is_better", "split_groups", "EMBEDDING_METRICS", "LOGIT_METRICS"]

#: label-free metrics by output kind
LOGIT_METRICS = ("agreement", "kl", "abs_logit")
EMBEDDING_METRICS = ("cosine", "recall_at_k")
#: metrics computed against labels
LABELLED_METRICS = ("accuracy", "macro_f1")


def _output_kind(ctx: RunContext) -> str:
    return getattr(ctx.model, "output_kind", "logits") if ctx.model is not None else "logits"


def decision_metric(ctx: RunContext) -> str:
    """The metric every choice ranks by and the sign-off tests.

    Embedding outputs: ``verdict.metric`` when it is cosine or recall_at_k, else cosine.
    Logit outputs: kl / abs_logit / agreement as set; label-free data otherwise agreement;
    else ``verdict.metric`` (accuracy, macro_f1). cosine / recall_at_k on logits is a
    ConfigError.
    """
    v = ctx.settings.verdict
    check_metric_fits(ctx.settings, _output_kind(ctx),
                      has_labels=not ctx.splits.label_free)
    if _output_kind(ctx) == "embedding":
        return v.metric if v.metric in EMBEDDING_METRICS else "cosine"
    if v.metric in LOGIT_METRICS:
        return v.metric
    return "agreement" if ctx.splits.label_free else v.metric


def check_metric_fits(settings, output_kind: str, *, has_labels: bool = False,
                      output_name: str | None = None) -> None:
    """ConfigError (before any inference) when the declared metric cannot be computed on
    the compared output: an embedding metric on logits, or a labelled metric (accuracy,
    macro_f1) on an embedding output. The declared metric is never replaced silently: a
    labelled run whose output is not logits stops here instead of signing off cosine."""
    v = settings.verdict
    if output_kind != "embedding" and v.metric in EMBEDDING_METRICS:
        raise ConfigError(f"verdict.metric={v.metric} needs an embedding output, and the "
                          "model's output is logits", where="verdict.metric", value=v.metric,
                          fix="set model.output.kind=embedding (with model.output.name=<the "
                              "embedding output>), or use verdict.metric=agreement | kl | "
                              "abs_logit for logits")
    if output_kind == "embedding" and has_labels and v.metric in LABELLED_METRICS:
        out = f" ({output_name})" if output_name else ""
        raise ConfigError(f"verdict.metric={v.metric} needs a logits output [batch, classes], "
                          f"and the compared output{out} is an embedding", where="verdict.metric",
                          value=v.metric,
                          fix="select the model's logits with model.output.name=<logits "
                              "output>, or sign off the embedding itself: "
                              "verdict.metric=cosine | recall_at_k (labels are then unused; "
                              "data.label_column=null drops them)")


def higher_is_better(metric: str) -> bool:
    return metric not in ("kl", "abs_logit")


def decision_value(ctx: RunContext, evaluation) -> float:
    """An evaluation's decision metric, signed so that larger is better (for ranking)."""
    metric = decision_metric(ctx)
    value = evaluation.metric(metric)
    return value if higher_is_better(metric) else -value


def split_groups(ctx: RunContext, split: str):
    """Group codes of a split for the cluster bootstrap, or None (ungrouped data)."""
    info = getattr(ctx.splits, "info", None)
    if info is None or not getattr(info, "grouped", False):
        return None
    return ctx.split(split).group_ids()


def example_scores(metric: str, reference: np.ndarray, candidate: np.ndarray, *,
                   recall_k: int = 10) -> np.ndarray:
    """Per-example score of ``candidate`` vs the FP32 ``reference`` outputs (shape (n,))."""
    from quantkit.compare.embedding import cosine_per_example, neighbour_recall_at_k
    from quantkit.compare.metrics import kl_per_example

    if metric == "agreement":
        return (reference.argmax(axis=1) == candidate.argmax(axis=1)).astype(np.float64)
    if metric == "kl":
        return kl_per_example(reference, candidate)
    if metric == "abs_logit":
        return np.abs(np.asarray(reference, np.float64)
                      - np.asarray(candidate, np.float64)).mean(axis=1)
    if metric == "cosine":
        return cosine_per_example(reference, candidate)
    if metric == "recall_at_k":
        return neighbour_recall_at_k(reference, candidate, k=recall_k)
    raise ConfigError("not a per-example score metric", where="verdict.metric", value=metric,
                      fix=f"use one of {list(LOGIT_METRICS + EMBEDDING_METRICS)}")


def declared_bound(v, metric: str) -> float:
    """The floor / ceiling ``verdict.*`` declares for ``metric``."""
    return {"agreement": v.min_agreement, "cosine": v.min_cosine, "recall_at_k": v.min_recall,
            "kl": v.max_kl, "abs_logit": v.max_abs_logit}[metric]


def signoff_threshold(settings, metric: str) -> float:
    """What the sign-off of ``metric`` decides at: the margin value (accuracy, macro_f1), the
    floor or the ceiling, after the engine check's share of the declared budget
    (:func:`quantkit.run.deployment.signoff_budget`; the whole budget when no engine check
    stands between the signed numbers and the deployment)."""
    from quantkit.run.deployment import signoff_budget

    left = signoff_budget(settings, metric).signoff
    if metric in ("accuracy", "macro_f1", "kl", "abs_logit"):
        return left
    return 1.0 - left


def candidate_test(ctx: RunContext, split: str, ref_logits: np.ndarray, logits: np.ndarray,
                   *, name: str, alpha: float | None = None):
    """The candidate's :class:`~quantkit.verdict.SignoffTest` on ``split`` (one-sided alpha =
    ``verdict.alpha / 2``, or ``alpha``: on test, the look's alpha from the ledger), joined with the churn gate when ``verdict.max_flip_rate`` is set
    and the output has top-1 predictions (logits).

    Label-free metrics (:func:`decision_metric`): non-inferiority of the per-example score
    against its declared bound (``verdict.min_agreement``, ``min_cosine``, ``min_recall``,
    ``max_kl``, ``max_abs_logit``; ``verdict.score_quantile`` for a quantile instead of the
    mean); agreement without ``score_quantile`` is exactly ``agreement_signoff``.

    Where an engine check is part of the deployed artifact's bound (run/deployment.py), the
    margin / floor / ceiling tested here is what is left after the engine's tolerance
    (:func:`signoff_threshold`), on dev and on test alike.
    """
    from quantkit.verdict import (Margin, agreement_signoff, churn_gate, paired_signoff,
                                  score_signoff, with_gate)

    v, seed = ctx.settings.verdict, ctx.settings.seed
    alpha = v.alpha / 2 if alpha is None else alpha
    groups = split_groups(ctx, split)
    common = dict(alpha=alpha, groups=groups, n_boot=v.n_boot, seed=seed, min_n=v.min_n,
                  min_groups=v.min_groups, candidate=name)
    metric = decision_metric(ctx)
    if _output_kind(ctx) == "embedding":  # no top-1 predictions: no churn gate
        return score_signoff(example_scores(metric, ref_logits, logits, recall_k=v.recall_k),
                             metric=metric, threshold=signoff_threshold(ctx.settings, metric),
                             quantile=v.score_quantile, power=v.power, **common)
    ref_pred, pred = ref_logits.argmax(axis=1), logits.argmax(axis=1)
    if metric == "agreement" and v.score_quantile is None:
        return agreement_signoff(ref_pred, pred,
                                 min_agreement=signoff_threshold(ctx.settings, metric),
                                 power=v.power, **common)
    if metric in LOGIT_METRICS:
        test = score_signoff(example_scores(metric, ref_logits, logits), metric=metric,
                             threshold=signoff_threshold(ctx.settings, metric),
                             quantile=v.score_quantile,
                             power=v.power, **common)
        if metric == "agreement" or v.max_flip_rate is None:
            return test
    else:
        y = ctx.split(split).labels
        test = paired_signoff(ref_pred == y, pred == y,
                              margin=Margin(v.margin_kind, signoff_threshold(ctx.settings, metric)),
                              power=v.power, **common)
        if v.max_flip_rate is None:
            return test
    return with_gate(test, churn_gate(ref_pred, pred, max_flip_rate=v.max_flip_rate, **common))
