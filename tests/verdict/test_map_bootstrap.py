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
