"""The bad-input catalog: one row per bad input, each a real run that must fail cleanly.

Every row asserts: the error class; fragments of what went wrong, where, the offending value
and the fix; a non-zero exit code (CLI rows: exactly one line on stderr); and no partial
artifact in the run dir (only Hydra's ``.hydra/`` and the log may stay) or the stage cache.

CLI rows run ``python -m quantkit`` for real on the tiny world (``tinyworld.py``: a real
tokenizer, ONNX model and CSV built in code), with every output under the test's tmp dir.
API rows call the module that owns the check, for failures deep in a run (disk full, NaN
feeds, engine metadata, TensorRT profiles).
"""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tinyworld
from tinyworld import debris, override, read_error, run_quantkit


@dataclass(frozen=True)
class Case:
    id: str
    error: str  # the QuantkitError subclass
    what: str  # fragments (case-insensitive) of each part of the one-line error
    where: str
    value: str
    fix: str
    cli: Callable[[dict], list[str]] | None = None  # world -> extra CLI overrides
    api: Callable[[dict], None] | None = None  # world -> raises

    def __str__(self) -> str:
        return self.id


# ---------------------------------------------------------------------------------------
# inputs built on the fly (each gets the test's private world)

def _junk_ledger(w: dict) -> list[str]:
    """Random bytes where the test ledger is (issue 49: refused in the preflight)."""
    path = w["root"] / "bad" / "junk.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 8192, dtype=np.uint8).tobytes())
    return [f"verdict.ledger={path}"]


def _bad_model(w: dict, name: str, data: bytes | onnx.ModelProto, **save) -> Path:
    path = w["root"] / "bad" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        onnx.save(data, str(path), **save)
    return path


def _truncated(w):
    data = Path(w["model"]).read_bytes()
    return [f"model.path={_bad_model(w, 'truncated.onnx', data[: len(data) // 2])}"]


def _corrupt(w):
    path = _bad_model(w, "corrupt.onnx", b"PK\x03\x04 not a protobuf" * 50)
    return [f"model.path={path}"]


def _empty_file(w):
    return [f"model.path={_bad_model(w, 'empty.onnx', b'')}"]


def _missing_external_data(w):
    path = _bad_model(w, "ext.onnx", tinyworld.text_model(), save_as_external_data=True,
                      all_tensors_to_one_file=True, location="ext.onnx.data", size_threshold=0)
    (path.parent / "ext.onnx.data").unlink()
    return [f"model.path={path}"]


def _escaping_external_data(w):
    model = tinyworld.text_model()
    path = _bad_model(w, "escape.onnx", model, save_as_external_data=True,
                      all_tensors_to_one_file=True, location="escape.onnx.data", size_threshold=0)
    proto = onnx.load(str(path), load_external_data=False)
    for t in proto.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../../../../etc/hostname"
    path.write_bytes(proto.SerializeToString())
    return [f"model.path={path}"]


def _opset(version):
    def make(w):
        return [f"model.path={_bad_model(w, f'opset{version}.onnx', tinyworld.text_model(opset=version))}"]
    return make


def _input_names(w):
    m = tinyworld.text_model(input_names=("pixel_values", "attention_mask"))
    return [f"model.path={_bad_model(w, 'names.onnx', m)}"]


def _other_input_names(*overrides: str):
    """A text model whose inputs are called ``ids`` and ``mask`` (+ the given overrides)."""
    def cli(w):
        m = tinyworld.text_model(input_names=("ids", "mask"))
        return [f"model.path={_bad_model(w, 'ids_mask.onnx', m)}", *overrides]
    return cli


def _input_rank(w):
    m = tinyworld.text_model(input_ids_shape=("batch", "seq", 1))
    return [f"model.path={_bad_model(w, 'rank.onnx', m)}"]


def _csv(w, name, rows=None, columns=("text", "label")):
    return tinyworld.write_csv(w["root"] / "bad" / name, rows, columns=columns)


def _labels_outside(w):
    rows = [dict(r, label=2 if i == 7 else r["label"]) for i, r in enumerate(tinyworld.rows())]
    return [f"data.path={_csv(w, 'labels3.csv', rows)}"]


def _label_inf(w):
    rows = [dict(r, label="inf" if i == 9 else r["label"]) for i, r in enumerate(tinyworld.rows())]
    return [f"data.path={_csv(w, 'label_inf.csv', rows)}"]


def _few_rows(w):
    return [f"data.path={_csv(w, 'few.csv', tinyworld.rows(4))}", "data.eval_fraction=0.1",
            "data.calib.num_samples=1"]


def _no_train(w):
    return [f"data.path={_csv(w, 'two.csv', tinyworld.rows(2))}", "data.eval_fraction=0.9",
            "data.calib.num_samples=1"]


def _label_gaps(w):
    rows = [dict(r, label="" if i in (5, 12) else r["label"]) for i, r in enumerate(tinyworld.rows())]
    return [f"data.path={_csv(w, 'gaps.csv', rows)}"]


def _single_class(w):
    rows = [dict(r, label=1) for r in tinyworld.rows()]
    return [f"data.path={_csv(w, 'one_class.csv', rows)}"]


def _latin1(w):
    path = w["root"] / "bad" / "latin1.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(Path(w["csv"]).read_bytes() + "caf\u00e9 good good,1\n".encode("latin-1"))
    return [f"data.path={path}"]


def _image_model_text_data(w):
    from onnx import TensorProto as T

    conv_w = numpy_helper.from_array(np.ones((2, 3, 3, 3), np.float32), "cw")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["pixels", "cw"], ["c"], name="conv"),
         helper.make_node("GlobalAveragePool", ["c"], ["p"], name="gap"),
         helper.make_node("Flatten", ["p"], ["logits"], name="flat")], "cnn",
        [helper.make_tensor_value_info("pixels", T.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("logits", T.FLOAT, ["N", 2])], [conv_w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return [f"model.path={_bad_model(w, 'cnn.onnx', model)}"]


def _image_folder_other_classes(w):
    """The 2-logit CNN above on a folder with 3 class subfolders (8 x 8 PNGs, mixed modes)."""
    from PIL import Image

    folder = w["root"] / "bad" / "three_classes"
    rng = np.random.default_rng(0)
    for k, cls in enumerate(("cat", "dog", "fox")):
        (folder / cls).mkdir(parents=True, exist_ok=True)
        for i in range(12):
            pixels = rng.integers(0, 256, (8, 8), dtype=np.uint8)
            im = Image.fromarray(pixels, "L") if i % 2 else Image.fromarray(pixels).convert("RGB")
            im.save(folder / cls / f"{k}_{i}.png")
    model_arg = _image_model_text_data(w)[0]
    return [model_arg, "data=image_folder", f"data.path={folder}", "data.image.size=8",
            "data.calib.num_samples=8", "data.label_names=[]"]


def _tokenizer_limit(w):
    folder = w["root"] / "bad" / "tok64"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_bytes(Path(w["tokenizer"]).read_bytes())
    (folder / "tokenizer_config.json").write_text('{"model_max_length": 64}')
    return [f"data.tokenizer={folder}", "data.max_length=128"]


def _vocab_no_specials(w):
    path = w["root"] / "bad" / "vocab" / "vocab.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(tinyworld.VOCAB) + "\n")
    return [f"data.tokenizer={path}"]


def _sixteen_bit_float_image(w):
    from PIL import Image

    from quantkit.data.image_io import read_image

    path = w["root"] / "bad" / "depth.tif"
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((4, 4), 0.5, np.float32), "F").save(path)
    read_image(path)


def _under_file(w, key, sub):
    blocker = w["root"] / "bad" / "a_file"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory\n")
    return [f"{key}={blocker / sub}"]


def _ranges_file(w, name, amax, calibrator="minmax"):
    from quantkit.calibrate.io import save_ranges
    from quantkit.calibrate.ranges import Ranges

    path = w["root"] / "bad" / name
    if calibrator == "minmax":
        save_ranges(Ranges(calibrator=calibrator, params={}, amax=amax), path)
    else:  # a name save_ranges' dataclass would accept, written as a user could
        doc = Ranges(calibrator="minmax", params={}, amax=amax).to_dict()
        doc["calibrator"] = calibrator
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
    return path


def _ranges_other_model(w):
    path = _ranges_file(w, "other_model.json", {"/encoder/layer.0/MatMul_output_0": 1.5,
                                                "/pooler/Gemm_input": 2.0})
    return [f"calibrator.ranges_files=[{path}]"]


def _ranges_escaping_name(w):
    path = _ranges_file(w, "escape.json", {"pooled": 1.0, "hr": 1.0},
                        calibrator="../../../outside")
    return [f"calibrator.ranges_files=[{path}]"]


def _ranges_not_json(w):
    path = w["root"] / "bad" / "broken.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"format": "quantkit.ranges", "amax": {')
    return [f"calibrator.ranges_files=[{path}]"]


# ---------------------------------------------------------------------------------------
# API rows: failures deep in a run, on small real inputs

class _FullDisk:
    """A file object that accepts ``budget`` bytes, then fails like a full disk (ENOSPC)."""

    def __init__(self, f, budget: int) -> None:
        self.f, self.budget = f, budget

    def write(self, data) -> int:
        if len(data) > self.budget:
            self.f.write(data[: self.budget])
            self.budget = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self.budget -= len(data)
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def _full_disk_open(budget: int):
    import builtins

    def _open(path, mode="r", *args, **kwargs):
        f = builtins.open(path, mode, *args, **kwargs)
        return _FullDisk(f, budget) if "w" in mode else f
    return _open


def _disk_full_artifact(w):
    """A ranges artifact rewritten while the disk fills: the old file stays whole."""
    import quantkit.fsutil as fsutil
    from quantkit.calibrate.io import save_ranges
    from quantkit.calibrate.ranges import Ranges

    dest = w["root"] / "previous_run" / "ranges" / "minmax.json"
    save_ranges(Ranges(calibrator="minmax", params={}, amax={"pooled": 1.0}), dest)
    before = dest.read_bytes()
    big = Ranges(calibrator="minmax", params={}, amax={f"t{i}": 1.0 + i for i in range(500)})
    mp = pytest.MonkeyPatch()
    mp.setattr(fsutil, "open", _full_disk_open(64), raising=False)
    try:
        save_ranges(big, dest)
    finally:
        mp.undo()
        assert dest.read_bytes() == before, "the destination was changed by a failed write"
        assert sorted(p.name for p in dest.parent.iterdir()) == ["minmax.json"], "temp file left"


def _disk_full_stage_cache(w):
    """A stage cache entry stored while the disk fills: no entry, no staging dir."""
    import quantkit.fsutil as fsutil
    from quantkit.cache import StageCache, stage_key

    cache = StageCache(w["stages"])
    key = stage_key("evaluation", artifact="ab" * 32)

    def compute(out: Path) -> None:
        fsutil.atomic_write_json(out / "data.json", {"logits": list(range(2000))},
                                 durable=False)

    mp = pytest.MonkeyPatch()
    mp.setattr(fsutil, "open", _full_disk_open(100), raising=False)
    try:
        cache.get_or_compute("evaluation", key, compute)
    finally:
        mp.undo()
        assert cache.get("evaluation", key) is None


def _float_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.eye(16, dtype=np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["h"], name="fc"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")], "float_model",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _nan_in_calibration_data(w):
    from quantkit.calibrate import collect_stats
    from quantkit.backends.runners import calibration_runner

    x = np.random.default_rng(0).normal(size=(8, 16)).astype(np.float32)
    bad = x.copy()
    bad[3, 5], bad[6, 0] = np.nan, np.inf
    collect_stats(_float_model(), [{"X": x}, {"X": bad}], ["X", "h"], progress=False, runner_factory=calibration_runner)


def _engine_other_gpu(w):
    from quantkit.backends.engine_meta import EngineMeta, check_compatible, load_meta, utc_now

    meta = EngineMeta(tensorrt_version="10.3.0", gpu_name="NVIDIA A100-SXM4-80GB",
                      compute_capability="8.0", onnx_sha256="ab" * 32,
                      settings_sha256="cd" * 32, created=utc_now())
    path = meta.save(w["root"] / "engines" / "model.meta.json")
    check_compatible(load_meta(path), tensorrt_version="10.8.0", gpu_name="NVIDIA L4",
                     compute_capability=(8, 9), engine_path=path.with_name("model.engine"))


def _engine_meta_corrupt(w):
    from quantkit.backends.engine_meta import load_meta

    path = w["root"] / "engines" / "model.meta.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"tensorrt_version": "10.3.0", "gpu_name": ')
    load_meta(path)


def _dynamic_dims_without_profile(w):
    from quantkit.backends.trt import EngineSettings, profiles_from_model

    profiles_from_model(tinyworld.text_model(), EngineSettings(opt_sequence=None,
                                                               max_sequence=None))


# ---------------------------------------------------------------------------------------
# the catalog

CASES = [
    # model files
    Case("onnx_truncated", "ModelError", "could not parse the ONNX file", "model.path",
         "truncated.onnx", "re-export", cli=_truncated),
    Case("onnx_corrupt", "ModelError", "could not parse the ONNX file", "model.path",
         "corrupt.onnx", "re-export", cli=_corrupt),
    Case("onnx_empty_file", "ModelError", "holds no ONNX graph", "model.path", "empty.onnx",
         "exported .onnx", cli=_empty_file),
    Case("onnx_missing_external_data", "ModelError", "external data file", "tensor emb",
         "ext.onnx.data", "copy ext.onnx.data beside ext.onnx", cli=_missing_external_data),
    Case("onnx_external_data_escapes", "ModelError", "leaves the model's directory",
         "tensor emb", "etc/hostname", "re-export", cli=_escaping_external_data),
    Case("onnx_missing_file", "ModelError", "not found", "model.path", "nowhere.onnx",
         "existing .onnx", cli=lambda w: [f"model.path={w['root'] / 'nowhere.onnx'}"]),
    Case("onnx_opset_too_old", "ModelError", "opset is too old", "model.path", "11",
         "opset >= 13", cli=_opset(11)),
    Case("onnx_opset_unsupported_new", "ModelError", "opset is newer", "model.path", "99",
         "re-export with opset 17", cli=_opset(99)),
    Case("model_wrong_input_names", "DataError", "cannot be fed from the tokenizer",
         "model.inputs", "pixel_values", "model.inputs.input_ids", cli=_input_names),
    Case("model_inputs_unmapped_names", "DataError", "cannot be fed from the tokenizer",
         "model.inputs", "ids", "model.inputs.input_ids=<name>", cli=_other_input_names()),
    Case("model_inputs_wrong_name", "DataError", "names an input the model does not have",
         "model.inputs.attention_mask", "msk", "['ids', 'mask']",
         cli=_other_input_names("model.inputs.input_ids=ids",
                                "model.inputs.attention_mask=msk")),
    Case("model_wrong_input_rank", "BackendError", "rank", "input input_ids", "int64[",
         "re-export the model", cli=_input_rank),
    Case("model_output_unknown", "ModelError", "not an output of the model",
         "model.output.name", "probs", "['logits']", cli=lambda w: ["model.output.name=probs"]),
    Case("dynamic_dims_without_profile", "ProfileError", "is dynamic and has no profile",
         "input input_ids", "seq", "backend.trt.dim_overrides.seq", api=_dynamic_dims_without_profile),
    # data
    Case("dataset_missing", "DataError", "dataset file not found", "data.path", "missing.csv",
         "existing csv", cli=lambda w: [f"data.path={w['root'] / 'missing.csv'}"]),
    Case("dataset_format_unknown", "DataError", "format", "data.path", "data.xyz",
         "data.format", cli=lambda w: [f"data.path={_csv(w, 'data.xyz')}"]),
    Case("text_column_missing", "DataError", "column not found", "data.text_column", "review",
         "one of ['text', 'label']", cli=lambda w: ["data.text_column=review"]),
    Case("label_column_misnamed", "DataError", "column not found", "data.label_column",
         "sentiment", "one of ['text', 'label']", cli=lambda w: ["data.label_column=sentiment"]),
    Case("labels_outside_head_classes", "DataError", "outside the declared classes",
         "data.label_names", "[0, 1, 2]", "declare 3 label names", cli=_labels_outside),
    Case("label_not_finite", "DataError", "not finite", "row 9", "inf at row 9", "remove that row",
         cli=_label_inf),
    Case("empty_after_filtering", "DataError", "no labeled examples left after filtering",
         "data", "data.csv", "data.drop_values", cli=lambda w: ["data.drop_values=[0,1]"]),
    Case("eval_split_empty", "DataError", "test split is empty", "data.eval_fraction", "0.1",
         "raise data.eval_fraction", cli=_few_rows),
    Case("calibration_split_empty", "DataError", "train split is empty", "data.eval_fraction",
         "0.9", "lower data.eval_fraction", cli=_no_train),
    # a request beyond the data calibrates on what is left (a named warning); refused only
    # when that is below data.calib.min_samples
    Case("calibration_left_below_minimum", "ConfigError", "the data left after test and dev "
         "holds 72", "data.calib.num_samples", "72", "add data",
         cli=lambda w: ["data.calib.num_samples=5000", "data.calib.min_samples=100",
                        "data.calib.warn_below=100"]),
    Case("labels_missing_in_rows", "DataError", "2 labels missing or not finite",
         "rows 5, 12", "null at row 5, null at row 12", "fill in or remove those rows",
         cli=_label_gaps),
    Case("calibration_set_too_small", "ConfigError", "too few calibration samples",
         "data.calib.num_samples", "2", "data.calib.num_samples=",
         cli=lambda w: ["data.calib.num_samples=2"]),
    Case("test_split_single_class", "DataError", "holds a single class", "test split", "pos",
         "data.label_column=null", cli=_single_class),
    Case("dev_split_empty", "DataError", "dev split is empty", "data.dev_fraction", "",
         "data.dev.size", cli=lambda w: ["data.dev_fraction=null"]),
    Case("test_fraction_alias_conflict", "ConfigError", "deprecated alias",
         "data.eval_fraction", "0.3", "set only data.test_fraction=0.2",
         cli=lambda w: ["data.test_fraction=0.2", "data.eval_fraction=0.3"]),
    Case("csv_not_utf8", "DataError", "not valid utf-8 text (line 122 of latin1.csv has byte "
         "0xe9)", "data.path", "latin1.csv", "data.encoding=", cli=_latin1),
    Case("image_model_given_text", "DataError", "the model takes images", "data.kind",
         "pixels: float, rank 4", "data.kind=image", cli=_image_model_text_data),
    Case("image_folder_class_count_mismatch", "DataError", "different number of classes",
         "model.output (logits)", "'data_classes': 3", "one subfolder per class under data.path",
         cli=_image_folder_other_classes),
    Case("max_length_above_model_limit", "ConfigError", "above the model's limit",
         "data.max_length", "128", "data.max_length=64", cli=_tokenizer_limit),
    Case("vocab_without_special_tokens", "DataError", "lacks BERT special tokens",
         "data.tokenizer", "[CLS]", "tokenizer.json", cli=_vocab_no_specials),
    Case("image_float_pixels", "DataError", "no known value range", "depth.tif", "F",
         "16-bit PNG", api=_sixteen_bit_float_image),
    Case("nan_in_calibration_data", "DataError", "NaN or Inf", "calibration batch 1 input X",
         "2 of 128", "clean or drop", api=_nan_in_calibration_data),
    Case("tokenizer_path_wrong", "DataError", "tokenizer not found", "data.tokenizer",
         "no_tokenizer", "tokenizer.json",
         cli=lambda w: [f"data.tokenizer={w['root'] / 'no_tokenizer'}"]),
    # settings
    Case("unknown_calibrator", "ConfigError", "must be one of", "calibrator.methods[0]", "kl",
         "calibrator.methods[0]=minmax", cli=lambda w: ["calibrator.methods=[kl]"]),
    Case("percentile_zero", "ConfigError", "percentile must be in (0, 100]",
         "calibrator.percentile", "0.0", "calibrator.percentile=99.99",
         cli=lambda w: ["calibrator.percentile=0"]),
    Case("percentile_above_100", "ConfigError", "percentile must be in (0, 100]",
         "calibrator.percentile", "100.5", "calibrator.percentile=99.99",
         cli=lambda w: ["calibrator.percentile=100.5"]),
    Case("relative_margin_negative", "ConfigError", "must be in (0, 1)", "verdict.margin",
         "-0.01", "verdict.margin=0.01", cli=lambda w: ["verdict.margin=-0.01"]),
    Case("relative_margin_one", "ConfigError", "must be in (0, 1)", "verdict.margin", "1.0",
         "verdict.margin=0.01", cli=lambda w: ["verdict.margin=1.0"]),
    Case("alpha_zero", "ConfigError", "alpha must be in (0, 1)", "verdict.alpha", "0.0",
         "verdict.alpha=0.05", cli=lambda w: ["verdict.alpha=0"]),
    Case("alpha_one", "ConfigError", "alpha must be in (0, 1)", "verdict.alpha", "1.0",
         "verdict.alpha=0.05", cli=lambda w: ["verdict.alpha=1"]),
    Case("hydra_group_typo", "ConfigError", "could not find 'calibrator/kl'", "calibrator",
         "kl", "entropy", cli=lambda w: ["calibrator=kl"]),
    Case("hydra_key_typo", "ConfigError", "unknown config key verdict.margn", "verdict.margn",
         "margn", "did you mean verdict.margin", cli=lambda w: ["verdict.margn=0.02"]),
    Case("hydra_wrong_type", "ConfigError", "could not be converted", "data.eval.limit",
         "abc", "--cfg job", cli=lambda w: ["data.eval.limit=abc"]),
    Case("target_outside_quantkit_cli", "ConfigError", "only quantkit.* targets",
         "hydra.callbacks.evil._target_", "builtins.print", "quantkit class",
         cli=lambda w: ["+hydra.callbacks.evil._target_=builtins.print"]),
    Case("experiment_name_escapes", "ConfigError", "plain name", "experiment_name",
         "../../outside", "experiment_name=my_experiment",
         cli=lambda w: ["experiment_name=../../outside"]),
    Case("backend_trt_without_tensorrt", "BackendUnavailable", "tensorrt is not installed",
         "backend=trt", "", "backend=ort", cli=lambda w: ["backend=trt"]),
    # output and cache directories
    Case("unwritable_run_dir", "ConfigError", "file system error", "a_file/run",
         "Not a directory", "hydra.run.dir=", cli=lambda w: _under_file(w, "hydra.run.dir", "run")),
    Case("unwritable_cache_dir", "ConfigError", "cannot be created or written", "cache_dir",
         "a_file/cache", "set cache_dir to a writable directory",
         cli=lambda w: _under_file(w, "cache_dir", "cache")),
    Case("unwritable_stage_cache_dir", "ConfigError", "cannot be created or written",
         "stage_cache_dir", "a_file/stages", "set stage_cache_dir to a writable directory",
         cli=lambda w: _under_file(w, "stage_cache_dir", "stages")),
    Case("ledger_random_bytes", "LedgerError", "not a readable quantkit ledger",
         "verdict.ledger", "junk.sqlite", "move", cli=_junk_ledger),
    Case("disk_full_writing_artifact", "ConfigError", "disk full", "minmax.json",
         "No space left", "free space", api=_disk_full_artifact),
    Case("disk_full_writing_stage_cache", "ConfigError", "disk full", "evaluation",
         "No space left", "free space", api=_disk_full_stage_cache),
    # ranges files and engines from elsewhere
    Case("ranges_json_other_model", "CalibrationError", "2 of 2 tensors have no calibrated range",
         "ranges[minmax]", "pooled", "re-run calibration for this model",
         cli=_ranges_other_model),
    Case("ranges_json_escaping_name", "CalibrationError", "plain name", "calibrator",
         "../../../outside", "re-run calibration", cli=_ranges_escaping_name),
    Case("ranges_json_corrupt", "CalibrationError", "not valid JSON", "broken.json", "",
         "re-run calibration", cli=_ranges_not_json),
    Case("trt_engine_other_gpu", "BackendError", "engine was built for NVIDIA A100",
         "sm_80", "TensorRT 10.3.0", "rebuild the engine", api=_engine_other_gpu),
    Case("trt_engine_metadata_corrupt", "BackendError", "not valid JSON", "model.meta.json",
         "line 1", "rebuild the engine", api=_engine_meta_corrupt),
]

_IDS = [c.id for c in CASES]
assert len(set(_IDS)) == len(_IDS), "case ids must be unique"


def _check_fields(case: Case, doc: dict) -> None:
    """Each fragment in its own part of the error (the key may be in `what` for settings)."""
    message = doc["message"].lower()
    for part in ("what", "where", "value", "fix"):
        fragment = getattr(case, part).lower()
        field = str(doc.get(part) or "").lower()
        # `where` / `value` may be spelled inside `what` ("config key X must be ...",
        # "engine was built for <GPU> with TensorRT <version>"): then the message has them
        in_message = part in ("where", "value") and not doc.get(part) and fragment in message
        assert fragment in field or in_message or (part == "where" and fragment in message), \
            f"{case.id}: {part} {fragment!r} not in {field!r} ({doc['message']})"
    assert doc["fix"], f"{case.id}: the error gives no fix"
    assert doc["what"] and doc["message"].lower().startswith(doc["what"].lower()[:20])


@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_bad_input_fails_cleanly(case: Case, world: dict, tmp_path: Path, caplog) -> None:
    if case.cli is not None:
        args = override(tinyworld.cli_args(world), *case.cli(world))
        error_file = tmp_path / "error.json"
        r = run_quantkit(args, cwd=world["root"], error_file=error_file)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
        assert len(lines) == 1 and lines[0].startswith("quantkit: "), r.stderr[-3000:]
        doc = read_error(error_file)
        assert doc["message"] in lines[0]
        assert "Traceback" not in r.stderr and "record:" not in r.stdout
    else:
        from quantkit.errors import QuantkitError

        with pytest.raises(QuantkitError) as ei:
            case.api(world)
        exc = ei.value
        doc = {"class": type(exc).__name__, "what": exc.what, "where": exc.where,
               "value": None if exc.value is None else str(exc.value), "fix": exc.fix,
               "message": str(exc)}
        assert "\n" not in doc["message"]
    assert doc["class"] == case.error, doc
    _check_fields(case, doc)
    left = debris(world["run"], world["stages"])
    assert not left, f"{case.id} left partial outputs: {left}"


def test_catalog_covers_the_issue() -> None:
    assert len(CASES) >= 30


# ---------------------------------------------------------------------------------------
# a cached artifact whose hash no longer matches: detected, removed, rebuilt

def test_corrupt_stage_cache_entry_is_detected_and_rebuilt(world: dict) -> None:
    from quantkit.cache import StageCache

    args = tinyworld.cli_args(world)
    first = run_quantkit(args, cwd=world["root"])
    assert first.returncode == 0, first.stderr[-3000:]
    rec1 = json.loads((world["run"] / "record.json").read_text())
    entries = sorted(world["stages"].glob("evaluation/*/*/data.json"))
    assert entries
    victim = entries[0]
    victim.write_text(victim.read_text().replace("0", "1", 1))  # same size, other bytes
    run2 = world["root"] / "run2"
    second = run_quantkit(override(args, f"hydra.run.dir={run2}"), cwd=world["root"])
    assert second.returncode == 0, second.stderr[-3000:]
    log = second.stdout + second.stderr  # Hydra logs to stdout
    assert "is corrupt" in log and str(victim.parent) in log
    rec2 = json.loads((run2 / "record.json").read_text())
    assert tinyworld.comparable(rec1) == tinyworld.comparable(rec2)
    assert rec2["stage_cache"]["evaluation"]["misses"] == 1
    cache = StageCache(world["stages"])
    stage, shard, key = victim.parent.relative_to(world["stages"]).parts
    assert cache.get(stage, key) is not None  # rebuilt and verified
    assert not debris(world["root"] / "none", world["stages"])
