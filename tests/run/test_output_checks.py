"""Any output, the declared metric, no traceback (issue 28, point 6).

Tiny real text models built in code whose outputs are what users' exports really carry:
``input_ids`` echoed back as the first output (int64 [batch, tokens]), per-token float scores
[batch, tokens], token states as the first output of a labelled run, an output computed
before every quantizable node, a dynamic class dimension. Each either runs correctly on the
right output or stops with one line (exit 2) before any real inference: never a traceback,
never a cosine verdict in place of the declared accuracy.
"""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

import tinyworld
from tinyworld import embedding_model

from quantkit.errors import ModelError


def _with_outputs(model: onnx.ModelProto, first: list, nodes: list = ()) -> onnx.ModelProto:
    """``model`` with ``nodes`` appended and the value infos ``first`` put before its outputs."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.node.extend(nodes)
    outs = list(first) + list(m.graph.output)
    del m.graph.output[:]
    m.graph.output.extend(outs)
    onnx.checker.check_model(m)
    return m


def _echo_ids_model() -> onnx.ModelProto:
    """The tiny classifier whose FIRST output is ``input_ids`` echoed back (int64)."""
    echo = helper.make_node("Identity", ["input_ids"], ["ids_echo"], name="echo")
    return _with_outputs(tinyworld.text_model(),
                         [helper.make_tensor_value_info("ids_echo", TensorProto.INT64,
                                                        ["batch", "seq"])], [echo])


def _token_scores_model() -> onnx.ModelProto:
    """The tiny classifier whose FIRST output is a per-token float score [batch, seq]."""
    nodes = [helper.make_node("Cast", ["input_ids"], ["idsf"], to=TensorProto.FLOAT,
                              name="ids_float")]
    return _with_outputs(tinyworld.text_model(),
                         [helper.make_tensor_value_info("idsf", TensorProto.FLOAT,
                                                        ["batch", "seq"])], nodes)


#: snippets of this module's label_free_world (tests/conftest.py)
WORLD_ROWS = 400


@pytest.fixture(scope="module")
def world(label_free_world):
    """The label-free tiny world (embed.onnx included) with this module's models beside it."""
    root = label_free_world["root"]
    for name, model in {"echo": _echo_ids_model(), "scores": _token_scores_model()}.items():
        onnx.save(model, str(root / f"{name}.onnx"))
    return label_free_world


def _run(world, run_name: str, model: str, *extra: str):
    return tinyworld.run_in(world, run_name, f"model.path={world['root'] / model}",
                            "precision.search.enabled=false", *extra)


def _one_line_error(r, *fragments: str) -> None:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("quantkit: "), r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])


def test_int64_first_output_is_skipped_for_the_first_float_output(world):
    """input_ids echoed first, batches of different lengths (label-free): the run compares
    the logits, the first float output, and says so in its log; no traceback."""
    r, run_dir = _run(world, "echo", "echo.onnx", "data.label_column=null",
                      "data.label_names=[]", "verdict.max_flip_rate=null")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert "model.output.name not set: comparing logits" in r.stderr + r.stdout
    rec = json.loads((run_dir / "record.json").read_text())
    assert rec["model"]["output_name"] == "logits" and rec["model"]["output_kind"] == "logits"
    assert rec["candidates"]["fp16"]["verdict"]["metric"] == "agreement"


def test_int64_output_named_is_one_line(world):
    r, _ = _run(world, "echo-named", "echo.onnx", "model.output.name=ids_echo")
    _one_line_error(r, "not a float tensor", "model.output.name", "ids_echo: int64[batch, seq]",
                    "logits")


def test_per_token_float_output_is_refused_before_inference(world):
    """A float [batch, seq] first output would be 'logits' with one column per token."""
    r, _ = _run(world, "scores", "scores.onnx")
    _one_line_error(r, "token dimension", "idsf: float[batch, seq]", "model.output.name")


def test_labelled_run_on_token_states_is_refused_not_signed_off_on_cosine(world):
    """A labelled run (accuracy declared by default) whose first output is token states:
    one line before inference, never a cosine verdict in place of accuracy."""
    r, run_dir = _run(world, "tokstates", "embed.onnx")
    _one_line_error(r, "verdict.metric=accuracy", "token_states", "model.output.name")
    assert not (run_dir / "record.json").exists()


def test_output_upstream_of_every_quantized_node_is_refused(world, tmp_path):
    """The embedding lookup's output (before both MatMuls) cannot change under INT8."""
    model = embedding_model()
    model.graph.output.insert(0, helper.make_tensor_value_info("tok", TensorProto.FLOAT,
                                                               ["batch", "seq", 16]))
    path = tmp_path / "upstream.onnx"
    onnx.save(model, str(path))
    r, _ = _run(world, "upstream", str(path), "data.label_column=null", "data.label_names=[]",
                "model.output.name=tok", "verdict.metric=cosine",
                "verdict.max_flip_rate=null")
    _one_line_error(r, "computed before every quantizable node", "model.output.name", "tok")


def test_dynamic_class_dimension_is_checked_before_the_fp32_reference(world, tmp_path):
    """Logits declared [batch, classes] (dynamic) with 2 columns, data with 3 label names:
    the class-count error, from the output probe, not a late numpy error."""
    model = tinyworld.text_model()
    model.graph.output[0].type.tensor_type.shape.dim[1].ClearField("dim_value")
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_param = "classes"
    path = tmp_path / "dyn.onnx"
    onnx.save(model, str(path))
    rows = tinyworld.rows(400)
    for i, row in enumerate(rows):
        row["label"] = i % 3
    csv = tinyworld.write_csv(tmp_path / "three.csv", rows)
    r, _ = _run(world, "dyn", str(path), f"data.path={csv}", "data.label_names=[a,b,c]")
    _one_line_error(r, "different number of classes", "model_classes")


def test_run_split_refuses_an_output_whose_width_follows_the_input(tmp_path):
    """The backstop inside every inference loop: one ModelError, not a numpy broadcast."""
    from quantkit.backends.batched import run_split
    from quantkit.backends.runners import ort_runner
    from quantkit.data.feeds import TextFeeds
    from quantkit.data.text import TextEncoder, load_tokenizer

    path = tmp_path / "scores.onnx"
    onnx.save(_token_scores_model(), str(path))
    tok = tinyworld.write_tokenizer(tmp_path / "tok.json")
    enc = TextEncoder(load_tokenizer(str(tok)), max_length=32,
                      input_names=["input_ids", "attention_mask"])
    texts = ["good", "the film was a very good story and fun"] * 3
    with ort_runner(None, str(path), name="t") as r, pytest.raises(ModelError, match="width"):
        run_split(r, TextFeeds(enc), texts, output="idsf", batch_size=2, progress=False)
