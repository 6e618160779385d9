"""Task-level evidence: accuracy, F1, agreement and slices, via scikit-learn.

Predictions may be given as labels (1-D) or logits (2-D, classes on the last axis). For
logits the predicted label is ``labels[argmax]`` when ``labels`` is given, else the
column index. Dict keys for slice values are ``str(value)`` so results are JSON-safe.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from sklearn.metrics import accuracy_score, precision_recall_fscore_support

from quantkit.compare.metrics import kl_divergence
from quantkit.errors import ConfigError, DataError

__all__ = [
    "agreement",
    "mean_kl",
    "predictions",
    "slice_metrics",
    "task_metrics",
]


def predictions(logits_or_pred: Any, *, labels: Sequence[Any] | None = None) -> np.ndarray:
    """1-D predicted labels from labels (returned as is) or 2-D logits (argmax)."""
    a = np.asarray(logits_or_pred)
    if a.ndim == 1:
        return a
    if a.ndim == 2:
        idx = np.argmax(a, axis=1)
        if labels is None:
            return idx
        if a.shape[1] != len(labels):
            raise DataError("logits have a different number of columns than labels",
                            where="predictions", value=(a.shape[1], len(labels)),
                            fix="pass one label per logit column, in column order")
        return np.asarray(labels)[idx]
    raise DataError("predictions must be 1-D labels or 2-D logits", where="predictions",
                    value=a.shape, fix="pass shape (n,) or (n, classes)")


def _y_and_pred(y_true: Any, logits_or_pred: Any, labels: Sequence[Any] | None,
                where: str) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y_true)
    if y.ndim != 1 or y.size == 0:
        raise DataError("y_true must be a non-empty 1-D array of labels", where=where,
                        value=y.shape, fix="pass one label per example")
    pred = predictions(logits_or_pred, labels=labels)
    if pred.shape != y.shape:
        raise DataError("y_true and predictions have different lengths", where=where,
                        value=(y.shape, pred.shape), fix="evaluate the same examples")
    return y, pred


def task_metrics(y_true: Any, logits_or_pred: Any, *, labels: Sequence[Any],
                 label_names: Sequence[str] | None = None) -> dict[str, Any]:
    """accuracy, macro_f1 (over ``labels``), n and per-class precision/recall/f1/support.

    ``per_class`` is keyed by ``label_names`` (default ``str(label)``). Classes never
    predicted or never present score 0 (scikit-learn ``zero_division=0``).
    """
    labels = list(labels)
    if not labels:
        raise ConfigError("labels must not be empty", where="task_metrics(labels)",
                          value=labels, fix="list every class label")
    if label_names is None:
        names = [str(label) for label in labels]
    else:
        names = list(label_names)
        if len(names) != len(labels) or len(set(names)) != len(names):
            raise ConfigError("label_names must be unique and match labels one to one",
                              where="task_metrics(label_names)", value=names,
                              fix=f"pass {len(labels)} distinct names")
    y, pred = _y_and_pred(y_true, logits_or_pred, labels, "task_metrics")
    precision, recall, f1, support = precision_recall_fscore_support(
        y, pred, labels=labels, zero_division=0)
    return {
        "n": int(y.size),
        "accuracy": float(accuracy_score(y, pred)),
        "macro_f1": float(np.mean(f1)),
        "per_class": {
            name: {"precision": float(p), "recall": float(r), "f1": float(f),
                   "support": int(s)}
            for name, p, r, f, s in zip(names, precision, recall, f1, support)
        },
    }


def agreement(pred_ref: Any, pred_cand: Any) -> float:
    """Top-1 agreement: fraction of examples where both predict the same label."""
    a = predictions(pred_ref)
    b = predictions(pred_cand)
    if a.shape != b.shape or a.size == 0:
        raise DataError("predictions must be non-empty and of equal length",
                        where="agreement", value=(a.shape, b.shape),
                        fix="compare predictions on the same examples")
    return float(np.mean(a == b))


def mean_kl(ref_logits: Any, cand_logits: Any) -> float:
    """Mean KL(softmax(ref) || softmax(cand)) over examples, in nats."""
    return kl_divergence(ref_logits, cand_logits)


def slice_metrics(y_true: Any, pred: Any,
                  slices: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Accuracy and n per slice value: ``{slice: {str(value): {"accuracy", "n"}}}``.

    ``slices`` maps a slice name (e.g. "length") to one key per example.
    """
    y, p = _y_and_pred(y_true, pred, None, "slice_metrics")
    correct = y == p
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, keys in slices.items():
        k = np.asarray(keys)
        if k.shape != y.shape:
            raise DataError("slice keys must give one key per example",
                            where=f"slice_metrics(slices[{name!r}])",
                            value=(k.shape, y.shape), fix="pass a 1-D array of length n")
        values, inverse = np.unique(k, return_inverse=True)
        n_per = np.bincount(inverse, minlength=values.size)
        right = np.bincount(inverse, weights=correct, minlength=values.size)
        out[name] = {str(v): {"accuracy": float(r / n), "n": int(n)}
                     for v, r, n in zip(values, right, n_per)}
    return out


