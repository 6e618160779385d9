"""The recombined mAP equals pycocotools' on the full set and on resamples (the resample fed to
the evaluator as its duplicated images with new ids), and the paired mAP test's decisions."""

from __future__ import annotations

import numpy as np
import pytest

from quantkit.errors import DataError
from quantkit.tasks.detection.boxes import Detections
from quantkit.tasks.detection.coco import (coco_ground_truth, coco_results, cocoeval, evaluate,
                                           match_table)
from quantkit.tasks.detection.labels import labels_from_arrays
from quantkit.verdict import Margin, TestPolicy
from quantkit.verdict.map_bootstrap import MapRecombiner, map_signoff

N_CLASSES = 4


def _world(n_images: int, seed: int, *, miss: float = 0.15, jitter: float = 0.08):
    """Labels and detections with continuous scores: each object found with probability
    1 - miss (box jittered by ``jitter`` of its size), plus false positives; sizes from small
    to large so every COCO area range is populated; some images without objects."""
    rng = np.random.default_rng(seed)
    W, H = 640, 480
    boxes, classes, dets = [], [], []
    for i in range(n_images):
        n = rng.poisson(3) if i % 7 else 0
        wh = np.exp(rng.uniform(np.log(12), np.log(300), size=(n, 2)))
        xy = rng.uniform(0, 1, size=(n, 2)) * (np.array([W, H]) - wh)
        b = np.concatenate([xy, xy + wh], axis=1)
        c = rng.integers(0, N_CLASSES, n)
        boxes.append(b)
        classes.append(c)
        found = rng.random(n) > miss
        db = b[found] + rng.normal(0, jitter, (found.sum(), 4)) * np.repeat(wh[found], 2, 1)
        dc = np.where(rng.random(found.sum()) < 0.9, c[found], rng.integers(0, N_CLASSES,
                                                                             found.sum()))
        ds = rng.beta(5, 2, found.sum())
        nf = rng.poisson(2)
        fwh = np.exp(rng.uniform(np.log(12), np.log(200), size=(nf, 2)))
        fxy = rng.uniform(0, 1, size=(nf, 2)) * (np.array([W, H]) - fwh)
        fb = np.concatenate([fxy, fxy + fwh], axis=1)
        all_b = np.clip(np.concatenate([db, fb]), 0, [W, H, W, H])
        all_b[:, 2:] = np.maximum(all_b[:, 2:], all_b[:, :2] + 1)
        dets.append(Detections(all_b, np.concatenate([ds, rng.beta(2, 5, nf)]),
                               np.concatenate([dc, rng.integers(0, N_CLASSES, nf)])))
    labels = labels_from_arrays([f"im{i}.png" for i in range(n_images)], [H] * n_images,
                                [W] * n_images, boxes, classes,
                                [f"c{k}" for k in range(N_CLASSES)])
    return labels, dets


def _coco_map(labels, dets, order):
    ev = cocoeval(coco_ground_truth(labels, order), coco_results(dets, order))
    p = ev.eval["precision"][:, :, :, 0, -1]
    return ev, float(p[p > -1].mean()), float(p[0][p[0] > -1].mean())


def test_recombined_map_equals_the_evaluator_on_the_full_set():
    labels, dets = _world(60, seed=1)
    m = evaluate(labels, dets)
    comb = MapRecombiner(m.table)
    ones = np.ones((1, len(labels)))
    assert comb.map(ones, "map")[0] == pytest.approx(m.map, abs=1e-12)
    assert comb.map(ones, "map50")[0] == pytest.approx(m.map50, abs=1e-12)
    assert comb.map(ones, "map75")[0] == pytest.approx(m.map75, abs=1e-12)
    per_class = comb.per_class(ones)[0]  # [T, K]
    for k, name in enumerate(labels.class_names):
        assert np.nanmean(per_class[:, k]) == pytest.approx(m.per_class[name]["ap"], abs=1e-12)
    assert 0.2 < m.map < 0.9  # a world with something to lose


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recombined_map_equals_the_evaluator_on_a_resample(seed):
    labels, dets = _world(40, seed=10 + seed)
    table = evaluate(labels, dets).table
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.integers(0, len(labels), len(labels)))  # copies given new, sorted ids
    _, ref_map, ref_map50 = _coco_map(labels, dets, idx)
    w = np.bincount(idx, minlength=len(labels))[None, :].astype(float)
    comb = MapRecombiner(table)
    assert comb.map(w, "map")[0] == pytest.approx(ref_map, abs=1e-12)
    assert comb.map(w, "map50")[0] == pytest.approx(ref_map50, abs=1e-12)


def test_a_resample_without_a_class_leaves_it_out_as_the_evaluator_does():
    labels, dets = _world(30, seed=5)
    table = evaluate(labels, dets).table
    has0 = np.array([np.any(c == 0) for c in labels.classes])
    idx = np.sort(np.flatnonzero(~has0))[:12].repeat(2)
    ev, ref_map, _ = _coco_map(labels, dets, idx)
    assert (ev.eval["precision"][:, :, 0, 0, -1] == -1).all()  # class 0: no ground truth
    w = np.bincount(idx, minlength=len(labels))[None, :].astype(float)
    assert MapRecombiner(table).map(w)[0] == pytest.approx(ref_map, abs=1e-12)


def test_subset_of_a_table_is_the_table_of_the_subset():
    labels, dets = _world(30, seed=6)
    full = evaluate(labels, dets).table
    pick = np.array([2, 5, 6, 11, 20, 29])
    sub_eval = evaluate(labels.subset(pick), [dets[i] for i in pick])
    a = MapRecombiner(full.subset(pick)).map(np.ones((1, pick.size)))[0]
    assert a == pytest.approx(sub_eval.map, abs=1e-12)


def test_map_signoff_passes_fp32_against_itself_and_fails_a_broken_candidate():
    labels, dets = _world(300, seed=7)
    ref = evaluate(labels, dets).table
    policy = TestPolicy(n_boot=300, seed=0)
    same = map_signoff(ref, ref, margin=Margin("relative", 0.01), policy=policy,
                       candidate="fp32")
    assert same.status == "PASS" and same.point == 0.0 and same.metric == "map"
    rng = np.random.default_rng(0)
    worse = [Detections(d.boxes + rng.normal(0, 6, d.boxes.shape), d.scores, d.classes)
             for d in dets]
    cand = evaluate(labels, worse).table
    t = map_signoff(ref, cand, margin=Margin("relative", 0.01), policy=policy,
                    candidate="int8")
    assert t.status == "FAIL" and t.cand_value < t.ref_value
    assert t.threshold == pytest.approx(-0.01 * t.ref_value)
    assert t.low <= t.point <= t.high
    d = t.to_verdict_dict()
    assert d["deltas"]["map"]["ref"] == t.ref_value


def test_map_signoff_with_groups_and_too_few_images():
    labels, dets = _world(60, seed=8)
    ref = evaluate(labels, dets).table
    policy = TestPolicy(n_boot=200, seed=0)
    t = map_signoff(ref, ref, margin=Margin("relative", 0.01), policy=policy,
                    groups=np.arange(60) // 3)
    assert t.status == "INCONCLUSIVE" and t.groups["n_groups"] == 20
    assert any("below verdict.min_n" in r for r in t.reasons)


def test_map_signoff_refuses_tables_of_other_images():
    a, da = _world(20, seed=1)
    b, db = _world(21, seed=2)
    with pytest.raises(DataError, match="same images"):
        map_signoff(evaluate(a, da).table, evaluate(b, db).table,
                    margin=Margin("relative", 0.01))


def test_match_table_reads_the_evaluators_own_matches():
    labels, dets = _world(10, seed=3)
    ev = cocoeval(coco_ground_truth(labels), coco_results(dets))
    t = match_table(ev, N_CLASSES)
    assert t.det_tp.shape == (10, t.det_image.size)
    assert not (t.det_tp & t.det_fp).any()
    assert int(t.gt_count.sum()) == labels.n_boxes


def test_subset_with_repeats_is_the_evaluators_table_of_the_copies():
    labels, dets = _world(25, seed=9)
    full = evaluate(labels, dets).table
    idx = np.array([3, 3, 7, 1, 1, 1, 20])
    order = np.sort(idx)
    _, ref_map, ref_map50 = _coco_map(labels, dets, order)
    comb = MapRecombiner(full.subset(idx))
    assert comb.map(np.ones((1, idx.size)))[0] == pytest.approx(ref_map, abs=1e-12)
    assert comb.map(np.ones((1, idx.size)), "map50")[0] == pytest.approx(ref_map50, abs=1e-12)


@pytest.mark.parametrize("area, a", [("small", 1), ("medium", 2), ("large", 3)])
def test_per_size_tables_with_ignored_detections_match_the_evaluator(area, a):
    """Outside the area range, ground truth is ignored and so are the detections matched to
    it or unmatched outside the range: the recombination's ignored path."""
    labels, dets = _world(50, seed=12)
    ev = cocoeval(coco_ground_truth(labels), coco_results(dets))
    table = match_table(ev, N_CLASSES, area=area)
    assert (~table.det_tp & ~table.det_fp).any()  # some detections are ignored
    p = ev.eval["precision"][:, :, :, a, -1]
    got = MapRecombiner(table).map(np.ones((1, len(labels))))[0]
    assert got == pytest.approx(float(p[p > -1].mean()), abs=1e-12)


def _all_point_map(ev, area_index: int = 0):
    """mAP@[.5:.95] as the area under each interpolated precision-recall curve (PASCAL VOC's
    all-point AP), computed straight from the evaluator's per-image matches in
    ``accumulate``'s order: the reference for ``MapRecombiner(recall_thresholds=None)``."""
    p = ev.params
    n_img, n_area, max_det = len(p.imgIds), len(p.areaRng), p.maxDets[-1]
    aps = []
    for k in range(len(p.catIds)):
        evs = [ev.evalImgs[k * n_area * n_img + area_index * n_img + i] for i in range(n_img)]
        evs = [e for e in evs if e is not None]
        if not evs:
            continue
        npig = int(np.count_nonzero(np.concatenate([e["gtIgnore"] for e in evs]) == 0))
        if npig == 0:
            continue
        scores = np.concatenate([e["dtScores"][:max_det] for e in evs])
        order = np.argsort(-scores, kind="mergesort")
        dtm = np.concatenate([e["dtMatches"][:, :max_det] for e in evs], axis=1)[:, order]
        dtig = np.concatenate([e["dtIgnore"][:, :max_det] for e in evs], axis=1)[:, order]
        tps = np.cumsum((dtm > 0) & ~dtig, axis=1).astype(float)
        fps = np.cumsum((dtm == 0) & ~dtig, axis=1).astype(float)
        for t in range(len(p.iouThrs)):
            rec = np.concatenate([[0.0], tps[t] / npig])
            prec = np.concatenate([[0.0], tps[t] / (tps[t] + fps[t] + np.spacing(1))])
            for i in range(prec.size - 2, -1, -1):  # the envelope, from the right
                prec[i] = max(prec[i], prec[i + 1])
            step = np.flatnonzero(rec[1:] != rec[:-1])
            aps.append(float(np.sum((rec[step + 1] - rec[step]) * prec[step + 1])))
    return float(np.mean(aps))


@pytest.mark.parametrize("seed", [None, 0, 1])
def test_area_map_equals_the_all_point_ap_of_the_evaluators_matches(seed):
    labels, dets = _world(40, seed=20 + (seed or 0))
    table = evaluate(labels, dets).table
    comb = MapRecombiner(table, recall_thresholds=None)
    if seed is None:
        order = np.arange(len(labels))
    else:  # a resample: copies given new, sorted ids
        order = np.sort(np.random.default_rng(seed).integers(0, len(labels), len(labels)))
    ev = cocoeval(coco_ground_truth(labels, order), coco_results(dets, order))
    w = np.bincount(order, minlength=len(labels))[None, :].astype(float)
    assert comb.map(w)[0] == pytest.approx(_all_point_map(ev), abs=1e-12)


def test_area_map_with_ignored_detections_equals_the_all_point_ap():
    labels, dets = _world(50, seed=12)
    ev = cocoeval(coco_ground_truth(labels), coco_results(dets))
    table = match_table(ev, N_CLASSES, area="small")
    got = MapRecombiner(table, recall_thresholds=None).map(np.ones((1, len(labels))))[0]
    assert got == pytest.approx(_all_point_map(ev, area_index=1), abs=1e-12)


def test_area_map_moves_with_the_recall_reached_where_the_101_point_sum_steps():
    """One class, precision 1: image 0 holds an object found exactly, image 1 one missed.
    Weighting image 0 by w moves recall w / (w + 1): the area is that recall, the 101-point
    sum counts the 0.01-spaced thresholds it reaches (the step a test set smooths)."""
    box = np.array([[10.0, 10.0, 60.0, 60.0]])
    labels = labels_from_arrays(["a.png", "b.png"], [100, 100], [100, 100], [box, box],
                                [np.array([0]), np.array([0])], ["c0"])
    dets = [Detections(box, np.array([0.9]), np.array([0])),
            Detections(np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64))]
    table = evaluate(labels, dets).table
    w = np.stack([np.linspace(1.0, 1.5, 501), np.ones(501)], axis=1)
    recall = w[:, 0] / w.sum(axis=1)
    area = MapRecombiner(table, recall_thresholds=None).map(w)
    coco = MapRecombiner(table).map(w)
    assert area == pytest.approx(recall, abs=1e-12)
    assert coco == pytest.approx((np.floor(recall * 100 + 1e-9) + 1) / 101, abs=1e-12)
    assert np.abs(np.diff(area)).max() < 1e-3 < np.abs(np.diff(coco)).max()


def test_map_signoff_tests_the_area_and_reports_the_101_point_values():
    labels, dets = _world(300, seed=7)
    m = evaluate(labels, dets)
    rng = np.random.default_rng(1)
    worse = [Detections(d.boxes + rng.normal(0, 1.5, d.boxes.shape), d.scores, d.classes)
             for d in dets]
    c = evaluate(labels, worse)
    t = map_signoff(m.table, c.table, margin=Margin("relative", 0.01),
                    policy=TestPolicy(n_boot=300, seed=0))
    ones = np.ones((1, len(labels)))
    assert t.ref_value == pytest.approx(
        MapRecombiner(m.table, recall_thresholds=None).map(ones)[0], abs=1e-12)
    boot = t.methods["bootstrap"]
    assert boot["estimand"] == "area_under_interpolated_pr_curve"
    assert boot["coco101_ref"] == pytest.approx(m.map, abs=1e-12)
    assert boot["coco101_cand"] == pytest.approx(c.map, abs=1e-12)
    # the envelope: the lower low end and the higher high end of percentile and basic
    assert t.low == min(t.methods["percentile"]["low"], t.methods["basic"]["low"])
    assert t.high == max(t.methods["percentile"]["high"], t.methods["basic"]["high"])
    # the basic low end takes an upward bootstrap bias b off as b / (sqrt 2 - 1)
    b, m, d_obs = boot["bias_of_d"], -t.threshold, boot["d_observed"]
    plain = 2 * d_obs - (t.methods["percentile"]["high"] + m) - m
    up = max(b, 0.0) / (np.sqrt(2) - 1) - max(b, 0.0)
    assert t.methods["basic"]["low"] == pytest.approx(plain - up, abs=1e-12)
    assert boot["bias_taken_off"] == pytest.approx(b + up, abs=1e-12)
    assert any("area under the interpolated" in r for r in t.reasons)


def test_map_signoff_is_deterministic_given_the_seed():
    labels, dets = _world(200, seed=4)
    ref = evaluate(labels, dets).table
    rng = np.random.default_rng(2)
    cand = evaluate(labels, [Detections(d.boxes + rng.normal(0, 2, d.boxes.shape), d.scores,
                                        d.classes) for d in dets]).table
    margin = Margin("relative", 0.01)
    a, b, c = (map_signoff(ref, cand, margin=margin, policy=TestPolicy(n_boot=200, seed=s))
               for s in (3, 3, 4))
    assert (a.low, a.high, a.methods) == (b.low, b.high, b.methods)
    assert (a.low, a.high) != (c.low, c.high)
    # a recombiner passed in gives the same test as its table
    d = map_signoff(MapRecombiner(ref), MapRecombiner(cand, recall_thresholds=None),
                    margin=margin, policy=TestPolicy(n_boot=200, seed=3))
    assert (d.low, d.high) == (a.low, a.high)
