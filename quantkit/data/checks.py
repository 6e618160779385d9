"""Bad data refused or warned: calibration set size and the classes of dev / test.

Documented thresholds (settings, ``data.calib``):
- fewer than ``min_samples`` (default 8) calibration examples: refused, ConfigError;
- fewer than ``warn_below`` (default 64): the named warning ``calib_small``; per-tensor
  amax from so few examples moves a lot between seeds.
Classes (labeled data only):
- a dev or test split with a single class: refused, DataError. Accuracy on one class says
  nothing about the others and macro metrics are undefined;
- a class of ``label_names`` with no example in dev or test: the named warning
  ``classes_missing`` (its per-class and macro numbers are absent, not zero).
"""

from __future__ import annotations

import numpy as np

from quantkit.data.info import DataInfo
from quantkit.errors import ConfigError, DataError
from quantkit.settings import DataConfig, resolve_test_limit

__all__ = ["check_calibration_size", "check_classes", "chance_level_note"]


def check_calibration_size(n: int, cfg: DataConfig, info: DataInfo) -> None:
    """``n``: the calibration examples the split holds (``data.calib.num_samples``, or fewer
    when the data left after test and dev is smaller)."""
    c = cfg.calib
    if n < c.min_samples:
        short = n < c.num_samples
        raise ConfigError(f"too few calibration samples for usable ranges (minimum "
                          f"{c.min_samples}, {c.warn_below}+ recommended)"
                          + (f": the data left after test and dev holds {n}" if short else ""),
                          where="data.calib.num_samples", value=n,
                          fix=("add data, or lower data.test_fraction / data.dev_fraction"
                               if short else
                               f"set data.calib.num_samples={max(c.warn_below, 256)} (or at "
                               f"least {c.min_samples})"))
    if n < c.warn_below:
        info.warn("calib_small", f"data.calib.num_samples={n} is below "
                  f"data.calib.warn_below={c.warn_below}: calibration ranges may be unstable; "
                  "256 or more is recommended")


def _limit_key(name: str, cfg: DataConfig) -> str:
    if name == "dev":
        return "data.dev.limit"
    return resolve_test_limit(cfg)[0]


def check_classes(splits, cfg: DataConfig) -> None:
    """Refuse single-class dev / test splits, warn about classes they miss (examples with
    class labels; a detector's images carry boxes instead)."""
    if splits.label_free or splits.dev.labels is None:
        return
    names = list(splits.label_names)
    for name in ("test", "dev"):
        split = getattr(splits, name)
        present = np.unique(split.labels)
        if len(present) == 1 and len(names) != 1:
            only = names[int(present[0])] if int(present[0]) < len(names) else int(present[0])
            raise DataError(f"the {name} split holds a single class: accuracy on it says "
                            "nothing about the other classes", where=f"{name} split "
                            f"({len(split)} examples)", value=only,
                            fix=f"use data with several classes (splits and "
                                f"{_limit_key(name, cfg)} are seeded and stratified, not file "
                                "order), or set data.label_column=null for a label-free run")
        missing = [names[i] for i in range(len(names)) if i not in set(present.tolist())]
        if missing:
            splits.info.warn("classes_missing", f"the {name} split has no example of "
                             f"{len(missing)} class(es): {missing[:10]}")


def chance_level_note(accuracy: float | None, label_names, *, split: str) -> str | None:
    """A note when FP32's own accuracy is at chance level (at most 1 / classes + 0.05: 0.55
    for 2 classes, 0.15 for 10): the labels probably do not mean what the model's
    classes mean (another class order, other classes, a model fitted on other data), and a
    verdict on accuracy then says nothing. None when FP32 is clearly above chance."""
    n_classes = len(label_names)
    if accuracy is None or n_classes < 2 or accuracy > 1.0 / n_classes + 0.05:
        return None
    return (f"FP32 accuracy on {split} is {accuracy:.4f}, at chance level for {n_classes} "
            f"classes ({1 / n_classes:.4f}): check that the labels match the model's classes "
            f"in order (data.label_names / the class subfolders {list(label_names)[:5]}...), or "
            "leave the labels out to sign off on agreement with FP32 (data.label_column=null)")
