"""COCO mAP on resampled images, and the paired mAP non-inferiority test.

mAP is not a mean over images: precision at each recall level pools every image's
detections of a class, ranked by score. A bootstrap must therefore recompute mAP on each
resample, FP32's and the candidate's on the *same* resampled images. Doing that with the
evaluator (2,000 resamples x 2 models x a COCOeval run) would take hours; here the matching is
done ONCE by the evaluator (pycocotools' ``evaluateImg``: per image, class and IoU threshold,
each detection a true positive, a false positive or ignored; :class:`MatchTable`) and each
resample only recombines it, exactly as ``COCOeval.accumulate`` would on the resampled images:

* a resample is a count ``w_i`` per image (``Multinomial(n, 1/n)``; with groups, per group,
  each image taking its group's count);
* per class, the detections stay in the evaluator's order (each image's top ``maxDet`` by
  score, then a stable sort by score over the images in id order); an image drawn ``w_i``
  times contributes each detection ``w_i`` times in a row, so the cumulative true / false
  positives at each detection are sums of weights, and the number of ground-truth boxes is
  ``sum_i w_i n_i``;
* precision ``tp / (fp + tp + eps)``, its running maximum from the right, and the
  interpolated precision at the 101 recall thresholds (``searchsorted(rc, recThrs, 'left')``)
  are evaluated only where a true positive raises recall: a threshold ``r`` lands on the
  detection whose recall first reaches it, and between two true positives precision only
  falls, so the maximum from the right is the same on these points as on all of them (and
  a run of ``w`` copies of a true positive reaches its highest precision on its last copy).

So the recombined mAP equals the evaluator's mAP on the resampled image list (the copies of
an image given new ids): tests/verdict/test_map_bootstrap.py checks it against pycocotools on
the full set and on resamples, to 1e-12. (Exact where no two detections of one image and class
tie in score; a tie across images keeps the evaluator's image order.) Cost: one sparse
product and a few passes over the true positives per resample chunk.

With ``recall_thresholds=None`` the recombiner gives the *area* under the same interpolated
precision-recall curve instead (each true positive's recall step times the envelope there:
PASCAL VOC's all-point AP since 2010, at COCO's IoU thresholds, areas and maxDets), the
quantity COCO's 101-point sum approximates; on weights it equals that computed from the
evaluator's matches of the resampled images (tested the same way).

The test (:func:`map_signoff`): ``D = mAP(cand) - (1 - m) mAP(FP32)`` for a relative margin
``m`` (``D = mAP(cand) - mAP(FP32) + m`` for an absolute one), recomputed on each resample,
so the margin's own uncertainty (it is a fraction of FP32's estimated mAP) is inside the
interval. The rule, and why:

* ``D`` is tested on the area mAP. COCO's 101-point sum adds two terms that are not smooth
  functions of the population: the precision at recall 0 (the maximum over the whole curve,
  a draw on the few top-ranked detections) and how many of the 0.01-spaced recall thresholds
  the maximum recall reaches (a step). A test set smooths both, by an amount and with a sign
  set by where the population's own values fall, which no resampling of the test set can
  see; on 1,000-image samples they shifted ``D`` by a fifth to a half of its standard
  deviation, up in some simulated populations and down in others. The area has neither
  term; it differs from the 101-point value by the size of those terms, and the report keeps
  pycocotools' numbers.
* What is left is the running maximum of a noisy curve, biased upward on a sample (more for
  a noisier candidate, whose flatter curve gives the noise more to maximize), which the
  bootstrap sees (its bias estimate), but only in part: the maximum is not a smooth function
  (Fang & Santos 2019, Ann. Statist.: the bootstrap is consistent only for smooth maps), and
  its spread is under-estimated where the curve starts on a few true positives. A
  resample adds the sample's noise again, so the bootstrap's bias ``b`` is that of twice the
  noise, ``bias(n/2) - bias(n)``: ``(sqrt 2 - 1) bias(n)`` at the maximum's first-order rate
  ``n^-1/2``, ``bias(n)`` at the smooth rate ``n^-1``. The low end is therefore the lower of
  the paired percentile interval's (which adds ``b``) and the basic one's with an upward
  ``b`` taken off as ``b / (sqrt 2 - 1)`` (the slower rate, the larger correction); the high
  end is the higher of the two plain ones (an upward bias only makes FAIL rarer).

Followed: Fang & Santos 2019 (Ann. Statist.); Efron & Tibshirani 1993, ch. 10; VOC2010 devkit.

PASS when the envelope's low end is above 0, FAIL when its high end is below,
INCONCLUSIVE otherwise or below ``min_n`` images / ``min_groups`` groups. Reported on the
delta scale (``mAP(cand) - mAP(FP32)`` against ``-m mAP(FP32)``, the interval shifted by the
observed margin). Measured at the margin (within the bound there, with little to spare), and
why the 101-point sum could not be used: benchmarks/results/detection_validity.md.

Numerics only (numpy / scipy), no I/O; randomness only from the policy's seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from scipy import sparse
from scipy.stats import norm

from quantkit.errors import ConfigError, DataError
from quantkit.verdict.cluster import group_codes
from quantkit.verdict.intervals import too_small
from quantkit.verdict.margin import Margin, margin_abs as to_margin_abs
from quantkit.verdict.outcome import DEFAULT_POLICY, INCONCLUSIVE, SignoffTest, status_of
from quantkit.verdict.paired import as_rng
from quantkit.verdict.policy import TestPolicy

__all__ = ["COCO_IOU_THRESHOLDS", "COCO_RECALL_THRESHOLDS", "MAP_METRICS", "MatchTable",
           "MapRecombiner", "area_recombiner", "map_signoff", "resample_weights"]

#: pycocotools' Params.setDetParams, to the bit
COCO_IOU_THRESHOLDS = np.linspace(.5, 0.95, int(np.round((0.95 - .5) / .05)) + 1, endpoint=True)
COCO_RECALL_THRESHOLDS = np.linspace(.0, 1.00, int(np.round((1.00 - .0) / .01)) + 1,
                                     endpoint=True)
_EPS = np.spacing(1)
_SQRT2 = math.sqrt(2.0)

#: verdict.metric -> the IoU thresholds it averages over (indices into COCO_IOU_THRESHOLDS)
MAP_METRICS = {"map": slice(None), "map50": slice(0, 1), "map75": slice(5, 6)}
_CHUNK_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class MatchTable:
    """The evaluator's per-image matches for one area range and maxDet.

    ``det_image`` / ``det_class`` / ``det_score`` [D]: every detection the evaluator ranked,
    grouped by class and, within a class, in the evaluator's order (score, highest first;
    ties by image order); ``det_tp`` / ``det_fp`` bool [T, D]: a true / false positive at
    IoU threshold t (neither: ignored); ``gt_count`` [I, K]: each image's ground-truth boxes
    that count (not ignored) per class; ``iou_thresholds`` [T].
    """

    n_images: int
    n_classes: int
    iou_thresholds: np.ndarray
    det_image: np.ndarray
    det_class: np.ndarray
    det_score: np.ndarray
    det_tp: np.ndarray
    det_fp: np.ndarray
    gt_count: np.ndarray

    def __post_init__(self) -> None:
        d = self.det_image.shape[0]
        t = self.iou_thresholds.shape[0]
        if (self.det_class.shape != (d,) or self.det_score.shape != (d,)
                or self.det_tp.shape != (t, d) or self.det_fp.shape != (t, d)
                or self.gt_count.shape != (self.n_images, self.n_classes)):
            raise DataError("inconsistent match table", where="MatchTable",
                            value=(d, t, self.det_tp.shape, self.gt_count.shape),
                            fix="build it with quantkit.tasks.detection.coco.match_table")

    def subset(self, images: Sequence[int]) -> "MatchTable":
        """The table of the images ``images``, renumbered 0..len-1 in increasing order of
        their index: a repeated index is a copy of that image (a sample drawn with
        replacement). The evaluator's order is kept: the table the evaluator would give for
        those images (copies with new, consecutive ids)."""
        idx = np.sort(np.asarray(images, dtype=np.int64))
        counts = np.bincount(idx, minlength=self.n_images)
        first = np.searchsorted(idx, np.arange(self.n_images), side="left")
        reps = counts[self.det_image]
        rows = np.repeat(np.arange(self.det_image.size), reps)
        # the k-th copy of a detection goes to the k-th copy of its image
        start = np.cumsum(reps) - reps
        copy = np.arange(rows.size) - np.repeat(start, reps)
        new_image = first[self.det_image[rows]] + copy
        return MatchTable(int(idx.size), self.n_classes, self.iou_thresholds, new_image,
                          self.det_class[rows], self.det_score[rows], self.det_tp[:, rows],
                          self.det_fp[:, rows], self.gt_count[idx])


def _uniform_from_zero(thresholds: np.ndarray) -> bool:
    r = thresholds.size
    return bool(r >= 2 and thresholds[0] == 0.0 and
                np.allclose(np.diff(thresholds), 1.0 / (r - 1), rtol=0, atol=1e-12))


def _count_le(values: np.ndarray, thresholds: np.ndarray, uniform: bool | None = None
              ) -> np.ndarray:
    """How many ``thresholds`` (sorted) are <= each value in [0, 1]: ``searchsorted(..,
    'right')``. For COCO's evenly spaced thresholds a guess ``floor(v (R - 1))`` corrected by
    comparing with the thresholds around it (the exact float thresholds, so the count is
    searchsorted's to the bit), in a few elementwise passes instead of a binary search."""
    if not (_uniform_from_zero(thresholds) if uniform is None else uniform):
        return np.searchsorted(thresholds, values.ravel(), side="right").reshape(values.shape)
    r = thresholds.size
    k = np.floor(values * (r - 1)).astype(np.int64)
    np.clip(k, 0, r - 1, out=k)
    count = k + (thresholds[k] <= values)
    count += (k + 1 < r) & (thresholds[np.minimum(k + 1, r - 1)] <= values)
    count -= (k > 0) & (thresholds[np.maximum(k - 1, 0)] > values)  # floor overshot
    return count


class MapRecombiner:
    """mAP of a :class:`MatchTable` on any image weights (module docstring).

    Built once per table, per class: the *points* (ranks at which some IoU threshold has a
    true positive) and, per (class, threshold) block, its true-positive columns. Three sparse
    maps from images: every detection to the first point at or after its rank (so the
    cumulative weight of all detections up to each point is one product and one cumulative
    sum), each true positive to its column, each ignored detection to the next column. The
    false positives before a true positive are then all detections up to it minus the true
    positives and the ignored ones: the cost per resample is linear in the detections, not in
    detections x thresholds. :meth:`per_class` takes weights [B, I]. ``recall_thresholds``:
    COCO's 101 (the evaluator's AP), others, or None for the area under the interpolated
    curve (the estimand :func:`map_signoff` tests).
    """

    def __init__(self, table: MatchTable, *,
                 recall_thresholds: np.ndarray | None = COCO_RECALL_THRESHOLDS) -> None:
        self.table = table
        self.recall_thresholds = (None if recall_thresholds is None
                                  else np.asarray(recall_thresholds, np.float64))
        t_count = table.iou_thresholds.shape[0]
        n = table.n_images
        all_rows, all_cols, tp_rows, tp_cols, ig_rows, ig_cols = [], [], [], [], [], []
        point_of_col, blocks, class_points = [], [], []
        col = point = 0
        for k in range(table.n_classes):
            ds = np.flatnonzero(table.det_class == k)
            tp_k = table.det_tp[:, ds]
            points = np.flatnonzero(tp_k.any(axis=0))  # ranks with a TP at some threshold
            class_points.append((point, point + points.size))
            if points.size:
                seg = np.searchsorted(points, np.arange(ds.size), side="left")
                live = seg < points.size  # detections after the last point change nothing
                all_rows.append(table.det_image[ds[live]])
                all_cols.append(point + seg[live])
            for t in range(t_count):
                tp_pos = np.flatnonzero(tp_k[t])
                m = tp_pos.size
                blocks.append((k, t, col, col + m))
                if m:
                    tp_rows.append(table.det_image[ds[tp_pos]])
                    tp_cols.append(col + np.arange(m))
                    point_of_col.append(point + np.searchsorted(points, tp_pos))
                    ig_pos = np.flatnonzero(~tp_k[t] & ~table.det_fp[t, ds])
                    seg = np.searchsorted(tp_pos, ig_pos, side="left")
                    live = seg < m
                    ig_rows.append(table.det_image[ds[ig_pos[live]]])
                    ig_cols.append(col + seg[live])
                col += m
            point += points.size
        self.blocks = blocks
        self.class_points = class_points
        self.n_columns = col
        self.n_points = point

        def build(rows, cols, size):
            r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
            c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
            return sparse.csr_matrix((np.ones(r.size), (c, r)), shape=(size, n))

        self._all = build(all_rows, all_cols, point)  # [points, images]
        self._tp_image = (np.concatenate(tp_rows) if tp_rows
                          else np.zeros(0, np.int64))  # the image of each TP column
        self._ig = build(ig_rows, ig_cols, col)
        self._point_of_col = (np.concatenate(point_of_col) if point_of_col
                              else np.zeros(0, np.int64))
        self._class_of_point = np.repeat(np.arange(table.n_classes),
                                         [e - a for a, e in class_points])
        self._gt = np.asarray(table.gt_count, np.float64)  # [I, K]

    def per_class(self, weights: np.ndarray) -> np.ndarray:
        """AP per resample, IoU threshold and class: float64 [B, T, K], NaN where the
        class has no ground truth on that resample (the evaluator's -1)."""
        w = np.atleast_2d(np.asarray(weights, np.float64))
        if w.shape[1] != self.table.n_images:
            raise DataError("one weight per image is needed", where="MapRecombiner",
                            value=(w.shape, self.table.n_images), fix="pass weights [B, I]")
        b_total = w.shape[0]
        t_count = self.table.iou_thresholds.shape[0]
        out = np.full((b_total, t_count, self.table.n_classes), np.nan)
        npig_all = w @ self._gt  # [B, K]
        chunk = max(1, _CHUNK_ELEMENTS // max(self.n_columns + self.n_points, 1))
        area = self.recall_thresholds is None
        r_count = 0 if area else self.recall_thresholds.size
        uniform = False if area else _uniform_from_zero(self.recall_thresholds)
        has_ig = self._ig.nnz > 0
        for lo in range(0, b_total, chunk):
            hi = min(b_total, lo + chunk)
            wc = np.ascontiguousarray(w[lo:hi])  # [b, I]; resamples are rows from here on
            allc = np.cumsum(np.ascontiguousarray((self._all @ wc.T).T), axis=1)  # [b, points]
            for a, e in reversed(self.class_points):  # cumulative within each class
                if a > 0 and e > a:
                    allc[:, a:e] -= allc[:, a - 1:a]  # (reversed: still the global value)
            tpc = np.cumsum(wc[:, self._tp_image], axis=1)  # [b, columns]: one image each
            igc = (np.cumsum(np.ascontiguousarray((self._ig @ wc.T).T), axis=1)
                   if has_ig else None)
            upto = allc[:, self._point_of_col]  # all detections ranked up to each TP
            npig = npig_all[lo:hi]
            for k, t, a, e in self.blocks:
                valid = npig[:, k] > 0
                ap = np.zeros(hi - lo)
                if e > a:
                    tp = tpc[:, a:e] - (tpc[:, a - 1:a] if a > 0 else 0.0)
                    fp = upto[:, a:e] - tp
                    if igc is not None:
                        fp -= igc[:, a:e] - (igc[:, a - 1:a] if a > 0 else 0.0)
                    pr = tp / (fp + tp + _EPS)
                    env = np.maximum.accumulate(pr[:, ::-1], axis=1)[:, ::-1]
                    if area:  # each true positive's recall step times the envelope there
                        with np.errstate(divide="ignore", invalid="ignore"):
                            ap = (np.einsum("ij,ij->i", env, np.diff(tp, axis=1, prepend=0.0))
                                  / npig[:, k])
                    else:
                        with np.errstate(divide="ignore", invalid="ignore"):
                            rc = tp / npig[:, k:k + 1]
                        cnt = _count_le(np.where(np.isfinite(rc), rc, 0.0),
                                        self.recall_thresholds, uniform)
                        ds = np.diff(cnt, axis=1, prepend=0)
                        ap = np.einsum("ij,ij->i", env, ds) / r_count
                out[lo:hi, t, k] = np.where(valid, ap, np.nan)
        return out

    def map(self, weights: np.ndarray, metric: str = "map") -> np.ndarray:
        """mAP per resample [B] over the classes with ground truth and the IoU thresholds of
        ``metric`` (:data:`MAP_METRICS`): the evaluator's mean over entries > -1."""
        sel = MAP_METRICS[metric]
        ap = self.per_class(weights)[:, sel, :]
        with np.errstate(invalid="ignore"):
            return np.nanmean(ap.reshape(ap.shape[0], -1), axis=1) \
                if np.isfinite(ap).any() else np.full(ap.shape[0], np.nan)


def resample_weights(n_images: int, n_boot: int, rng: np.random.Generator,
                     codes: np.ndarray | None = None, n_groups: int = 0) -> np.ndarray:
    """Bootstrap counts per image [n_boot, n_images]: images drawn with replacement, or with
    ``codes`` whole groups drawn (``Multinomial(G, 1/G)``), each image taking its group's."""
    if codes is None:
        return rng.multinomial(n_images, np.full(n_images, 1.0 / n_images),
                               size=n_boot).astype(np.float64)
    g = rng.multinomial(n_groups, np.full(n_groups, 1.0 / n_groups), size=n_boot)
    return g[:, codes].astype(np.float64)


def area_recombiner(x: MatchTable | MapRecombiner) -> MapRecombiner:
    """A recombiner of ``x``'s table that computes AP as the area under the interpolated
    precision-recall curve (``recall_thresholds=None``): ``x`` itself when it already does."""
    if isinstance(x, MapRecombiner):
        return x if x.recall_thresholds is None else MapRecombiner(x.table, recall_thresholds=None)
    return MapRecombiner(x, recall_thresholds=None)


def _check_pair(ref: MatchTable, cand: MatchTable) -> None:
    if ref.n_images != cand.n_images or ref.n_classes != cand.n_classes \
            or not np.array_equal(ref.iou_thresholds, cand.iou_thresholds) \
            or not np.array_equal(ref.gt_count, cand.gt_count):
        raise DataError("FP32's and the candidate's match tables are not of the same images "
                        "and labels", where="map_signoff",
                        value=(ref.n_images, cand.n_images, ref.n_classes, cand.n_classes),
                        fix="match both models' detections against the same labels")


def map_signoff(ref: MatchTable | MapRecombiner, cand: MatchTable | MapRecombiner, *,
                margin: Margin, metric: str = "map", groups: Any = None,
                policy: TestPolicy = DEFAULT_POLICY, candidate: str = "") -> SignoffTest:
    """Non-inferiority of the candidate's mAP to FP32's (module docstring).

    ``ref`` / ``cand``: the match tables of FP32's and the candidate's detections against the
    same labels (labelled), or against FP32's own detections (label-free: FP32 then scores 1);
    ``metric``: map (mAP@[.5:.95]), map50 or map75; ``groups``: one key per image or None.
    """
    if metric not in MAP_METRICS:
        raise ConfigError("not an mAP metric", where="verdict.metric", value=metric,
                          fix=f"use one of {sorted(MAP_METRICS)}")
    if not isinstance(margin, Margin):
        raise ConfigError("margin must be a quantkit.verdict.Margin", where="verdict.margin",
                          value=margin, fix="pass Margin('relative', 0.01)")
    r_comb, c_comb = area_recombiner(ref), area_recombiner(cand)
    _check_pair(r_comb.table, c_comb.table)
    n = r_comb.table.n_images
    alpha = policy.alpha
    ones = np.ones((1, n))
    ref_map = float(r_comb.map(ones, metric)[0])
    cand_map = float(c_comb.map(ones, metric)[0])
    coco_ref, coco_cand = (float(MapRecombiner(t.table).map(ones, metric)[0])
                           for t in (r_comb, c_comb))
    if not math.isfinite(ref_map):
        raise DataError("no ground-truth boxes: mAP is undefined", where="map_signoff",
                        value=n, fix="evaluate on images with labelled objects")
    m = to_margin_abs(margin, ref_map)
    relative = margin.kind == "relative"
    point = cand_map - ref_map
    d_obs = cand_map - (1.0 - margin.value) * ref_map if relative else point + m

    codes, g = (None, 0) if groups is None else group_codes(groups, n, "map_signoff(groups)")
    rng = as_rng(policy.seed)
    boots = []
    chunk = max(1, min(policy.n_boot, 250))
    done = 0
    while done < policy.n_boot:
        b = min(chunk, policy.n_boot - done)
        w = resample_weights(n, b, rng, codes, g)
        r_b, c_b = r_comb.map(w, metric), c_comb.map(w, metric)
        boots.append(c_b - (1.0 - margin.value) * r_b if relative else c_b - r_b + m)
        done += b
    d = np.concatenate(boots)
    d = d[np.isfinite(d)]
    dropped = policy.n_boot - d.size
    if d.size == 0:
        d = np.array([d_obs])
    q_low, q_high = (float(v) for v in np.quantile(d, [alpha, 1.0 - alpha]))
    # percentile [q_a, q_1-a] and basic [2 D - q_1-a, 2 D - q_a]; an upward bootstrap bias
    # b is (sqrt 2 - 1) of the sample's (module docstring): the basic low end takes sqrt(2) b
    # more off. The lower low end and the higher high end decide.
    bias = float(d.mean()) - d_obs
    extra = _SQRT2 * max(bias, 0.0)
    b_low, b_high = 2.0 * d_obs - q_high, 2.0 * d_obs - q_low
    low, high = min(q_low, b_low - extra) - m, max(q_high, b_high) - m
    status = status_of(low, high, -m)
    nb = d.size + 1
    pc_p_ni = (1 + int(np.count_nonzero(d <= 0.0))) / nb
    pc_p_reg = (1 + int(np.count_nonzero(d >= 0.0))) / nb
    bs_p_ni = (1 + int(np.count_nonzero(d >= 2.0 * d_obs - extra))) / nb  # P(low end <= 0)
    bs_p_reg = (1 + int(np.count_nonzero(d <= 2.0 * d_obs))) / nb
    p_ni, p_reg = max(pc_p_ni, bs_p_ni), max(pc_p_reg, bs_p_reg)
    sd = float(np.std(d, ddof=1)) if d.size > 1 else 0.0

    level = 100 * (1 - 2 * alpha)
    name = {"map": "mAP@[.5:.95]", "map50": "mAP@.5", "map75": "mAP@.75"}[metric]
    unit = "groups" if codes is not None else "images"
    reasons = [f"{name} delta {point:+.4f} [{level:g}% CI {low:+.4f}, {high:+.4f}] vs -margin "
               f"{-m:+.4f} ({margin.describe(ref_map, name)}); {name} tested as the area under "
               f"the interpolated precision-recall curve (COCO's 101-point sum without its "
               f"two end terms); the wider of the paired "
               f"percentile [{q_low - m:+.4f}, {q_high - m:+.4f}] and basic "
               f"[{b_low - extra - m:+.4f}, {b_high - m:+.4f}] bootstrap over {unit} "
               f"({d.size} resamples, FP32's and the candidate's {name} recomputed on each, "
               f"the margin with them; bootstrap bias of D {bias:+.5f}, the basic low end "
               f"taking it off as {bias + extra:+.5f}, a running maximum's sample bias); "
               f"one-sided alpha {alpha:g}",
               f"reference {name} {ref_map:.4f}, candidate {cand_map:.4f} on n={n} images "
               f"(COCO's 101-point {name}: {coco_ref:.4f} and {coco_cand:.4f})"]
    if dropped:
        reasons.append(f"{dropped} resamples drew no ground-truth box and were left out")
    gstats = None
    if codes is not None:
        sizes = np.bincount(codes, minlength=g)
        gstats = {"n_groups": g, "mean_group_size": float(sizes.mean()), "icc": None,
                  "design_effect": None}
        reasons.append(f"{g} groups resampled whole ({unit})")
    small = too_small(n, g, codes is not None, policy)
    if small:
        reasons.append(small)
        status = INCONCLUSIVE
    plan_n = None
    if status == INCONCLUSIVE:
        plan_n = plan_map_size(sd=sd, n=n if codes is None else g, effect=min(point, 0.0),
                               margin_abs=m, alpha=alpha, power=policy.power,
                               min_n=policy.min_n)
        if codes is not None and plan_n is not None:
            plan_n = int(math.ceil(plan_n * n / g))  # groups -> images at this group size
        reasons.append(
            f"a new declared plan would need about {plan_n} test images for "
            f"{100 * policy.power:g}% power at delta {min(point, 0.0):+.4f}"
            if plan_n is not None else
            f"the observed delta {point:+.4f} is at or below -margin: no test size would "
            "give a PASS power at this effect")
    changed = int(np.count_nonzero(_image_signature(r_comb.table) !=
                                   _image_signature(c_comb.table)))
    kind = "_cluster" if codes is not None else ""
    methods = {"bootstrap": {"method": "paired_percentile_basic_rate_envelope" + kind,
                             "estimand": "area_under_interpolated_pr_curve",
                             "coco101_ref": coco_ref, "coco101_cand": coco_cand,
                             "low": low, "high": high, "n_boot": policy.n_boot,
                             "p_noninferiority": p_ni, "p_regression": p_reg,
                             "sd_of_d": sd, "d_observed": d_obs, "bias_of_d": bias,
                             "bias_taken_off": bias + extra, "dropped": dropped},
               "percentile": {"method": "paired_percentile" + kind, "low": q_low - m,
                              "high": q_high - m, "p_noninferiority": pc_p_ni,
                              "p_regression": pc_p_reg},
               "basic": {"method": "paired_basic_rate" + kind, "low": b_low - extra - m,
                         "high": b_high - m, "p_noninferiority": bs_p_ni,
                         "p_regression": bs_p_reg}}
    return SignoffTest(candidate=candidate, metric=metric, status=status, point=point, low=low,
                       high=high, alpha=alpha, threshold=-m, p_noninferiority=p_ni,
                       p_regression=p_reg, n=n, ref_value=ref_map, cand_value=cand_map,
                       flip_rate=changed / n, discordant={"images_changed": changed},
                       methods=methods, groups=gstats, reasons=reasons,
                       margin={**margin.to_dict(), "abs": m, "relative_to": "fp32_" + metric},
                       plan_n=plan_n)


def _image_signature(table: MatchTable) -> np.ndarray:
    """Per image: a number that changes when its detections' count or true positives at
    IoU 0.5 per class change (for the 'images changed' count)."""
    k = table.n_classes
    key = table.det_image * k + table.det_class
    dets = np.bincount(key, minlength=table.n_images * k).reshape(table.n_images, k)
    tps = np.bincount(key, weights=table.det_tp[0].astype(np.float64),
                      minlength=table.n_images * k).reshape(table.n_images, k)
    mix = np.arange(1, k + 1, dtype=np.float64)
    return dets @ mix * 1000.0 + tps @ np.sqrt(mix + 1.0)


def plan_map_size(*, sd: float, n: int, effect: float, margin_abs: float, alpha: float,
                  power: float, min_n: int) -> int | None:
    """Units (images, or groups) a new plan needs for ``power`` at ``effect`` (the delta the
    candidate is assumed to have), with the bootstrap spread ``sd`` of ``D`` at ``n`` units
    scaled as ``1 / sqrt(n)``: ``n' = n ((z_a + z_power) sd / (effect + margin))^2``."""
    gap = effect + margin_abs
    if gap <= 0 or sd <= 0 or not math.isfinite(sd):
        return None if gap <= 0 else min_n
    z = norm.ppf(1 - alpha) + norm.ppf(power)
    return max(min_n, int(math.ceil(n * (z * sd / gap) ** 2)))
