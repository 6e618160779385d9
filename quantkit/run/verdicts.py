"""One candidate's paired test against FP32 on one split (dev: for choices; test: sign-off).

Built from the split's labels, groups and both models' outputs, outside the stage cache (the
outputs are cached; the test is cheap and seeded). The statistics are
:mod:`quantkit.verdict.paired_accuracy`: the wider of a score interval (Tango; Rao-Scott adjusted for
grouped data) and an iid / cluster bootstrap, a minimum size below which the verdict is
INCONCLUSIVE, and the churn gate (flip rate vs FP32, ``verdict.max_flip_rate``).

The metric signed off is the metric declared: ``verdict.metric=accuracy`` is tested by
:func:`quantkit.verdict.paired_signoff`, ``macro_f1`` by
:func:`quantkit.verdict.macro_f1.macro_f1_signoff` (the macro-F1 difference), each ranking
the dev choices by the same metric.

Label-free metrics are one path: a per-example score vs FP32 against a declared per-example
tolerance (:func:`example_scores` then :func:`quantkit.verdict.score_signoff`, the share of
examples within it against ``1 - verdict.score_quantile``): KL and mean |logit delta| for
logit outputs, cosine and recall@k of FP32's neighbours in the fixed gallery
(``quantkit.data.gallery``) for embeddings; top-1 agreement is its own test
(``agreement_signoff``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from quantkit.compare.embedding import cosine_per_example, gallery_recall_at_k
from quantkit.compare.metrics import kl_per_example
from quantkit.errors import ConfigError, DataError
from quantkit.run.context import RunContext
from quantkit.run.deployment import quantile_split, signoff_budget
from quantkit.run.detection import detection_test, metric_key
from quantkit.settings import MAP_METRICS
from quantkit.verdict import (
    Margin,
    agreement_signoff,
    churn_gate,
    paired_signoff,
    score_signoff,
    with_gate,
)
from quantkit.verdict.macro_f1 import macro_f1_signoff
from quantkit.verdict.margin import LABELLED_METRICS

__all__ = ["candidate_test", "decision_metric", "decision_value", "example_scores",
           "signoff_threshold",
           "higher_is_better", "split_groups", "EMBEDDING_METRICS", "LOGIT_METRICS"]

#: label-free metrics by output kind
LOGIT_METRICS = ("agreement", "kl", "abs_logit")
EMBEDDING_METRICS = ("cosine", "recall_at_k")


def _output_kind(ctx: RunContext) -> str:
    return getattr(ctx.model, "output_kind", "logits") if ctx.model is not None else "logits"


def decision_metric(ctx: RunContext) -> str:
    """The metric every choice ranks by and the sign-off tests.

    Embedding outputs: ``verdict.metric`` when it is cosine or recall_at_k, else cosine.
    Logit outputs: kl / abs_logit / agreement as set; label-free data otherwise agreement;
    else ``verdict.metric`` (accuracy, macro_f1: each ranks dev and is signed off as
    itself). cosine / recall_at_k on logits is a ConfigError.
    """
    v = ctx.settings.verdict
    check_metric_fits(ctx.settings, _output_kind(ctx),
                      has_labels=not ctx.splits.label_free)
    if _output_kind(ctx) == "detection":  # mAP (labelled, or label-free vs FP32's boxes)
        return v.metric if v.metric in MAP_METRICS else "map"
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
    if output_kind == "detection" and v.metric not in MAP_METRICS + ("accuracy",):
        raise ConfigError(f"verdict.metric={v.metric} does not apply to a detector's outputs",
                          where="verdict.metric", value=v.metric,
                          fix="use verdict.metric=map (mAP@[.5:.95], the default for a "
                              "detector), map50 or map75")
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
    """An evaluation's decision metric, signed so that larger is better (for ranking): what
    its sign-off tests. Accuracy, macro-F1, agreement: the metric itself. cosine /
    recall_at_k / kl / abs_logit: the share of dev examples within the tolerance (the tested
    quantity), ties broken by the mean score (weight 1e-9, below any share's resolution)."""
    metric = decision_metric(ctx)
    value = evaluation.metric(metric_key(ctx, metric) if metric in MAP_METRICS else metric)
    signed = value if higher_is_better(metric) else -value
    test = getattr(evaluation, "test", None)
    if metric in ("cosine", "recall_at_k", "kl", "abs_logit") and test is not None \
            and test.metric == metric:
        return float(test.point) + 1e-9 * signed
    return signed


def split_groups(ctx: RunContext, split: str):
    """Group codes of a split for the cluster bootstrap, or None (ungrouped data)."""
    info = getattr(ctx.splits, "info", None)
    if info is None or not getattr(info, "grouped", False):
        return None
    return ctx.split(split).group_ids()


def example_scores(metric: str, reference: np.ndarray, candidate: np.ndarray, *,
                   recall_k: int = 10, ref_gallery: np.ndarray | None = None,
                   gallery: np.ndarray | None = None) -> np.ndarray:
    """Per-example score of ``candidate`` vs the FP32 ``reference`` outputs (shape (n,)).

    recall_at_k searches the gallery (``ref_gallery`` / ``gallery``: the gallery embedded by
    FP32 and by the candidate)."""
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
        if ref_gallery is None or gallery is None:
            raise DataError("recall@k needs a gallery and the train split it is drawn from "
                            "is empty", where="verdict.gallery_size", value=0,
                            fix="leave train examples (data.train.size) or use "
                                "verdict.metric=cosine")
        return gallery_recall_at_k(reference, candidate, ref_gallery, gallery, k=recall_k)
    raise ConfigError("not a per-example score metric", where="verdict.metric", value=metric,
                      fix=f"use one of {list(LOGIT_METRICS + EMBEDDING_METRICS)}")


def declared_bound(v, metric: str) -> float:
    """The per-example tolerance (or, for agreement, the minimum) ``verdict.*`` declares."""
    return {"agreement": v.min_agreement, "cosine": v.min_cosine, "recall_at_k": v.min_recall,
            "kl": v.max_kl, "abs_logit": v.max_abs_logit}[metric]


def signoff_threshold(settings, metric: str) -> float:
    """What the sign-off of ``metric`` decides at: the margin value (accuracy, macro_f1), the
    floor or the ceiling, after the engine check's share of the declared budget
    (:func:`quantkit.run.deployment.signoff_budget`; the whole budget when no engine check
    stands between the signed numbers and the deployment)."""
    left = signoff_budget(settings, metric).signoff
    if metric in ("accuracy", "macro_f1", "kl", "abs_logit") + MAP_METRICS:
        return left
    return 1.0 - left


def candidate_test(ctx: RunContext, split: str, ref_logits: np.ndarray, logits: np.ndarray,
                   *, name: str, alpha: float | None = None,
                   ref_gallery: np.ndarray | None = None,
                   gallery: np.ndarray | None = None, gallery_info: dict | None = None,
                   rows: np.ndarray | None = None):
    """The candidate's :class:`~quantkit.verdict.SignoffTest` on ``split`` (one-sided alpha =
    ``verdict.alpha / 2``, or ``alpha``: on test, the look's alpha from the ledger), joined with the churn gate when ``verdict.max_flip_rate`` is set
    and the output has top-1 predictions (logits). ``rows``: the test on these examples of
    the split only (the search's selection and confirmation halves of dev; a recall@k
    gallery stays whole).

    Labelled: accuracy (``paired_signoff``) or macro-F1 (``macro_f1_signoff``), whichever
    ``verdict.metric`` declares. Label-free (:func:`decision_metric`): agreement
    (``agreement_signoff``, minimum ``verdict.min_agreement``), or the share of examples
    within a per-example tolerance (``verdict.min_cosine``, ``min_recall``, ``max_kl``,
    ``max_abs_logit``) against ``1 - verdict.score_quantile`` (``score_signoff``; the
    sign-off's part of it where an engine check shares the budget, run/deployment.py);
    recall@k in the gallery (``ref_gallery`` / ``gallery``, identified by
    ``gallery_info``).

    Where an engine check is part of the deployed artifact's bound (run/deployment.py), the
    margin / floor / ceiling tested here is what is left after the engine's tolerance
    (:func:`signoff_threshold`), on dev and on test alike.
    """
    v = ctx.settings.verdict
    policy = ctx.policy
    groups, y = split_groups(ctx, split), ctx.split(split).labels
    metric = decision_metric(ctx)
    if _output_kind(ctx) == "detection":  # mAP recomputed per image resample; no top-1
        return detection_test(ctx, split, ref_logits, logits, name=name, metric=metric,
                              margin=Margin(v.margin_kind,
                                            signoff_threshold(ctx.settings, metric)),
                              policy=policy if alpha is None else policy.at(alpha),
                              groups=groups, rows=rows)
    if rows is not None:
        ref_logits, logits = ref_logits[rows], logits[rows]
        groups = None if groups is None else groups[rows]
        y = None if y is None else y[rows]
    common = dict(groups=groups, candidate=name,
                  policy=policy if alpha is None else policy.at(alpha))
    if _output_kind(ctx) == "embedding":  # no top-1 predictions: no churn gate
        test = score_signoff(example_scores(metric, ref_logits, logits, recall_k=v.recall_k,
                                            ref_gallery=ref_gallery, gallery=gallery),
                             metric=metric, threshold=signoff_threshold(ctx.settings, metric),
                             quantile=quantile_split(ctx.settings, metric)[0],
                             **common)
        if metric == "recall_at_k" and gallery_info:
            test = replace(test, margin={**test.margin, "gallery": dict(gallery_info)},
                           reasons=[*test.reasons, _gallery_reason(gallery_info, v.recall_k)])
        return test
    ref_pred, pred = ref_logits.argmax(axis=1), logits.argmax(axis=1)
    if metric == "agreement":
        return agreement_signoff(ref_pred, pred,
                                 min_agreement=signoff_threshold(ctx.settings, metric),
                                 **common)
    if metric in LOGIT_METRICS:
        test = score_signoff(example_scores(metric, ref_logits, logits), metric=metric,
                             threshold=signoff_threshold(ctx.settings, metric),
                             quantile=quantile_split(ctx.settings, metric)[0],
                             **common)
    else:
        margin = Margin(v.margin_kind, signoff_threshold(ctx.settings, metric))
        if metric == "macro_f1":
            test = macro_f1_signoff(y, ref_pred, pred, n_classes=len(ctx.splits.label_names),
                                    margin=margin, **common)
        else:
            test = paired_signoff(ref_pred == y, pred == y, margin=margin, **common)
    if v.max_flip_rate is None:
        return test
    return with_gate(test, churn_gate(ref_pred, pred, max_flip_rate=v.max_flip_rate, **common))


def _gallery_reason(info: dict, k: int) -> str:
    return (f"recall@{k} searched in a fixed gallery of {info.get('size')} {info.get('source')} "
            f"examples (sha256 {str(info.get('sha256'))[:12]}), the same for every query: "
            "queries are independent given the gallery")
