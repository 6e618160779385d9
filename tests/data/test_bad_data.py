"""Bad data refused or warned, never silently accepted (issue 18 item 5), on real files."""

from __future__ import annotations

import csv
import json

import datasets
import numpy as np
import onnx
import pytest

from quantkit.data.feeds import make_feeds
from quantkit.data.sources import load_local
from quantkit.data.splits import TextSplit, make_splits
from quantkit.data.table import to_examples
from quantkit.errors import ConfigError, DataError
from quantkit.models.model import Model
from quantkit.settings import DataConfig, Settings

from test_feeds import tiny_cnn


def write_rows(path, rows, header=("text", "label", "film")):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def rows(n=200, films=40, label=lambda i: i % 2):
    return [[f"review {i} of film {i % films}", label(i), f"f{i % films}"] for i in range(n)]


def cfg(**kw) -> DataConfig:
    c = DataConfig(name="t", source="local", label_names=["neg", "pos"], group_column="film")
    for k, v in kw.items():
        obj, _, attr = k.rpartition("__")
        setattr(getattr(c, obj) if obj else c, attr, v)
    if "calib__num_samples" not in kw:
        c.calib.num_samples = 16
    return c


def splits_of(path, c, seed=0):
    ex = to_examples(load_local(path), c)
    return make_splits(TextSplit("all", ex.texts, ex.labels, ex.groups), ex.label_names, c,
                       seed=seed, info=ex.info)


def one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert "\n" not in msg and "Fix:" in msg, msg
    return msg


def test_empty_and_nan_labels_are_one_error_naming_every_row(tmp_path):
    data = rows(40)
    for i in (3, 17, 31):
        data[i][1] = ""
    with pytest.raises(DataError) as err:
        splits_of(write_rows(tmp_path / "gaps.csv", data), cfg())
    msg = one_line(err.value)
    assert "3 labels missing" in msg and "rows 3, 17, 31" in msg and "column label" in msg
    # string labels with a gap: the cell reads as None, not NaN
    named = [[t, "pos" if y else "neg", g] for t, y, g in rows(20)]
    named[5][1] = ""
    with pytest.raises(DataError) as err:
        splits_of(write_rows(tmp_path / "named.csv", named), cfg())
    assert "row 5 " in one_line(err.value)
    # json(l): null labels
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps({"text": f"t{i}", "label": None if i in (2, 9) else i % 2})
                              for i in range(30)))
    with pytest.raises(DataError) as err:
        to_examples(load_local(path), DataConfig(name="j"))
    assert "rows 2, 9" in one_line(err.value)


def test_bad_labels_are_named_with_their_values_and_the_fix_works(tmp_path):
    """Issue 48 point 8: the error says what it found ('got null at row 3, inf at row 40'),
    bounded to the first few; removing the rows or dropping the labels then loads the file."""
    data = rows(60)
    gaps = {3: "", 17: "NA", 31: "", 40: "inf", 41: "-inf", 42: "nan", 50: ""}
    for i, v in gaps.items():
        data[i][1] = v
    path = write_rows(tmp_path / "bad.csv", data)
    with pytest.raises(DataError) as err:
        splits_of(path, cfg())
    msg = one_line(err.value)
    assert "7 labels missing or not finite" in msg and "rows 3, 17, 31, 40, 41, 42, 50" in msg
    # a csv reader reads an empty cell, NA and nan as null; inf and -inf stay floats
    assert ("; got null at row 3, null at row 17, null at row 31, inf at row 40, -inf at row 41 "
            "(+2 more). Fix: fill in or remove those rows") in msg
    assert str(err.value.value) == err.value.value  # a phrase, shown as is (no quotes)
    # the fixes it names work: the rows removed, or the labels dropped (a label-free run)
    kept = [r for i, r in enumerate(data) if i not in gaps]
    s = splits_of(write_rows(tmp_path / "fixed.csv", kept), cfg())
    assert sum(len(x) for x in s.named().values()) + s.info.unused == len(kept)
    ex = to_examples(load_local(path), cfg(label_column=None, label_names=[]))
    assert ex.labels is None and len(ex.texts) == 60
    # a float NaN (a dataset built from Python values) is shown as nan; a blank string as repr
    ds = datasets.Dataset.from_dict({"text": list("abcd"), "label": [0.0, 1.0, float("nan"), 1.0],
                                     "film": ["f0", "f1", "f2", "f3"]})
    with pytest.raises(DataError, match=r"; got nan at row 2\. Fix:"):
        to_examples(ds, cfg())
    ds = datasets.Dataset.from_dict({"text": list("abc"), "label": ["pos", " ", "neg"],
                                     "film": ["f0", "f1", "f2"]})
    with pytest.raises(DataError, match=r"; got ' ' at row 1\. Fix:"):
        to_examples(ds, cfg())


def test_hub_images_with_bad_labels_name_the_values():
    Image = pytest.importorskip("PIL.Image")
    from quantkit.data.images import hub_images

    pics = [Image.fromarray(np.full((6, 6), 40 * i, np.uint8)) for i in range(5)]
    ds = datasets.Dataset.from_dict({"img": pics, "y": [0.0, None, 1.0, float("inf"), 0.0]},
                                    features=datasets.Features({"img": datasets.Image(),
                                                                "y": datasets.Value("float64")}))
    c = DataConfig(name="h", kind="image", source="hub", path="x", image_column="img",
                   label_column="y")
    c.image.size = 4
    with pytest.raises(DataError) as err:
        hub_images(ds, c)
    msg = one_line(err.value)
    assert "2 labels missing or not finite" in msg and "rows 1, 3 column y" in msg
    assert "; got null at row 1, inf at row 3. Fix: fill in or remove those rows" in msg


def test_a_label_listed_in_drop_values_drops_its_rows_counted(tmp_path):
    data = rows(40)
    for i in (4, 8):
        data[i][1] = 7
    s = splits_of(write_rows(tmp_path / "d.csv", data), cfg(drop_values=["7"], test_fraction=0.3))
    assert s.info.dropped_by_value == 2 and s.info.rows_read == 40


def test_duplicates_and_empty_texts_are_counted_and_warned(tmp_path):
    data = rows(120)
    data[10][0] = data[11][0]  # same text, other label: a conflict
    data[20][0] = data[22][0]  # same text, same label
    data[30][0] = ""
    s = splits_of(write_rows(tmp_path / "d.csv", data), cfg())
    i = s.info
    assert (i.duplicates_dropped, i.duplicate_label_conflicts, i.empty_texts_dropped) == (2, 1, 1)
    assert {"duplicates_dropped", "duplicate_label_conflicts",
            "empty_texts_dropped"} <= set(i.warning_codes())
    assert sum(s.sizes().values()) + i.unused == 117
    assert i.to_dict()["duplicates_dropped"] == 2


def test_calibration_set_too_small(tmp_path):
    p = write_rows(tmp_path / "d.csv", rows())
    with pytest.raises(ConfigError) as err:
        splits_of(p, cfg(calib__num_samples=4))
    msg = one_line(err.value)
    assert "data.calib.num_samples" in msg and "got 4" in msg and "minimum 8" in msg
    small = splits_of(p, cfg(calib__num_samples=20))
    assert "calib_small" in small.info.warning_codes()
    ok = splits_of(p, cfg(calib__num_samples=64))
    assert "calib_small" not in ok.info.warning_codes()


def test_single_class_test_split_is_refused(tmp_path):
    p = write_rows(tmp_path / "one.csv", rows(label=lambda i: 1))
    with pytest.raises(DataError) as err:
        splits_of(p, cfg())
    msg = one_line(err.value)
    assert "single class" in msg and "got 'pos'" in msg and "data.label_column=null" in msg


def test_a_class_absent_from_test_is_a_named_warning(tmp_path):
    p = write_rows(tmp_path / "d.csv", rows())
    s = splits_of(p, cfg(label_names=["neg", "pos", "neutral"]))
    assert "classes_missing" in s.info.warning_codes()
    assert any("neutral" in w.message for w in s.info.warnings)


def test_limit_of_a_file_sorted_by_label_keeps_both_classes(tmp_path):
    sorted_rows = sorted(rows(400, films=400), key=lambda r: r[1])  # all neg, then all pos
    c = cfg(test__limit=10, dev__limit=10)
    s = splits_of(write_rows(tmp_path / "sorted.csv", sorted_rows), c)
    assert np.bincount(s.test.labels, minlength=2).min() >= 4
    assert np.bincount(s.dev.labels, minlength=2).min() >= 4
    assert s.info.limits["test"]["stratified"] and s.info.limits["dev"]["after"] == 10


def test_latin1_csv(tmp_path):
    p = tmp_path / "l1.csv"
    p.write_bytes("text,label\nnice film,1\n".encode() + "caf\u00e9 noir,0\n".encode("latin-1"))
    with pytest.raises(DataError) as err:
        load_local(p, cache_dir=str(tmp_path / "c"))
    msg = one_line(err.value)
    assert "not valid utf-8" in msg and "line 3 of l1.csv has byte 0xe9" in msg
    assert "data.encoding=" in msg and "data.path" in msg
    ds = load_local(p, cache_dir=str(tmp_path / "c"), encoding="latin-1")
    assert ds["text"][1] == "caf\u00e9 noir"


def _model(tmp_path, proto, names, tokenizer=None) -> Model:
    path = tmp_path / "m.onnx"
    onnx.save(proto, str(path))
    return Model(path=str(path), sha256="x", input_names=names, output_name="logits", opset=17,
                 tokenizer=tokenizer)


def test_an_image_model_given_text_names_data_kind(tmp_path):
    s = Settings()
    s.data = DataConfig(name="t", kind="text")
    with pytest.raises(DataError) as err:
        make_feeds(s, _model(tmp_path, tiny_cnn(), ["input"]))
    msg = one_line(err.value)
    assert "at data.kind" in msg and "float, rank 4" in msg and "data.kind=image" in msg
    assert "tokenizer" not in msg


def test_a_text_model_given_images_names_data_kind(tmp_path):
    from test_tokenizers import bert_like_model

    s = Settings()
    s.data = DataConfig(name="t", kind="image")
    with pytest.raises(DataError) as err:
        make_feeds(s, _model(tmp_path, bert_like_model(20, with_types=False),
                                 ["input_ids", "attention_mask"]))
    msg = one_line(err.value)
    assert "at data.kind" in msg and "data.kind=text" in msg
