"""Rendered document pages: seeded (the same page twice is the same bytes), every box inside
its page and of one of the 10 CDLA classes, templates kept whole by the split, and the COCO
JSON written reads back through the labels loader with its templates as groups."""

from __future__ import annotations

import numpy as np

from quantkit.assets import cache_root
from quantkit.data.layout_pages import LAYOUT_CLASSES, make_template, render_pages, write_pages
from quantkit.data.partition import Part, group_codes, partition_groups
from quantkit.tasks.detection.labels import load_coco_labels


def test_pages_are_seeded_and_labelled_inside_the_page():
    cache = str(cache_root())
    a = list(render_pages(3, seed=4, n_templates=50, cache_dir=cache))
    b = next(render_pages(1, seed=4, n_templates=50, cache_dir=cache, start=2))
    assert np.array_equal(a[2].image, b.image) and np.array_equal(a[2].boxes, b.boxes)
    for p in a:
        h, w = p.image.shape[:2]
        assert len(p.boxes) >= 3
        assert (p.boxes[:, 0] >= 0).all() and (p.boxes[:, 2] <= w).all()
        assert (p.boxes[:, 1] >= 0).all() and (p.boxes[:, 3] <= h).all()
        assert (p.boxes[:, 2] > p.boxes[:, 0]).all() and (p.boxes[:, 3] > p.boxes[:, 1]).all()
        assert set(p.classes.tolist()) <= set(range(len(LAYOUT_CLASSES)))
        assert "text" in {LAYOUT_CLASSES[c] for c in p.classes}
    assert [p.template_id for p in a] == [0, 1, 2]
    assert make_template(1, 4) == make_template(1, 4) != make_template(1, 5)
    other = next(render_pages(1, seed=5, n_templates=50, cache_dir=cache))
    assert not np.array_equal(other.image[:200], a[0].image[:200])


def test_written_pages_read_back_and_split_by_template(tmp_path):
    labels = write_pages(tmp_path / "pages", 6, seed=1, n_templates=3,
                         cache_dir=str(cache_root()))
    lab = load_coco_labels(labels, class_names=LAYOUT_CLASSES,
                           image_dir=tmp_path / "pages" / "images", group_field="template")
    assert len(lab) == 6 and lab.groups == [0, 1, 2, 0, 1, 2] and lab.n_boxes > 18
    assert not (tmp_path / "pages.partial").exists()
    parts, _ = partition_groups(group_codes(lab.groups), [Part("dev", 2), Part("test", None)],
                                np.random.default_rng(0))
    dev_t = {lab.groups[i] for i in parts["dev"]}
    test_t = {lab.groups[i] for i in parts["test"]}
    assert dev_t and test_t and not dev_t & test_t
