"""Non-classifier outputs in the run (issue 18): output selection, kind, masked pooling, and
cosine / recall@k verdicts from one CLI run on a tiny real embedding model."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import tinyworld
from tinyworld import embedding_model

from quantkit.errors import ConfigError, ModelError
from quantkit.models.fit import resolve_output
from quantkit.settings import OutputConfig
from quantkit.verdict.engine_gate import GATE_UNITS


def test_resolve_output_kinds_and_names():
    m = embedding_model(with_logits=True)
    first = resolve_output(m, OutputConfig(), has_labels=False)
    assert (first.name, first.kind, first.pooling, first.rank) == \
        ("token_states", "embedding", "mean", 3)
    pooled = resolve_output(m, OutputConfig(name="sentence", kind="embedding"), has_labels=False)
    assert (pooled.kind, pooled.pooling) == ("embedding", "none")
    logits = resolve_output(m, OutputConfig(name="logits"), has_labels=True)
    assert logits.kind == "logits"
    cls = resolve_output(m, OutputConfig(pooling="cls"), has_labels=False)
    assert cls.pooling == "cls"


def test_resolve_output_errors_name_what_to_set():
    m = embedding_model(with_logits=True)
    with pytest.raises(ModelError) as e:
        resolve_output(m, OutputConfig(name="probs"), has_labels=True)
    msg = str(e.value)
    assert "model.output.name" in msg and "'probs'" in msg
    assert all(n in msg for n in ("token_states", "sentence", "logits"))
    with pytest.raises(ModelError, match="model.output.kind=embedding"):
        resolve_output(m, OutputConfig(kind="logits"), has_labels=True)
    with pytest.raises(ConfigError, match="model.output.pooling"):
        resolve_output(m, OutputConfig(pooling="none"), has_labels=False)


def test_mask_aware_pooling_in_run_split_equals_the_graphs_own_mean(tmp_path):
    """Token states pooled by quantkit (mean over the attention mask, batches padded to
    different lengths) equal the model's in-graph masked mean, with a real ORT session."""
    from quantkit.backends.ort import OrtRunner
    from quantkit.backends.batched import run_split
    from quantkit.data.feeds import TextFeeds
    from quantkit.data.text import TextEncoder, load_tokenizer

    tok = tinyworld.write_tokenizer(tmp_path / "tok.json")
    path = tmp_path / "m.onnx"
    onnx.save(embedding_model(), str(path))
    texts = [r["text"] for r in tinyworld.rows(23)]
    enc = TextEncoder(load_tokenizer(str(tok)), max_length=32,
                      input_names=["input_ids", "attention_mask"])
    with OrtRunner(path, name="t") as r:
        pooled = run_split(r, TextFeeds(enc, pooling="mean"), texts, output="token_states",
                           batch_size=5, progress=False)
        inside = run_split(r, TextFeeds(enc), texts, output="sentence", batch_size=5,
                           progress=False)
        cls = run_split(r, TextFeeds(enc, pooling="cls"), texts, output="token_states",
                        batch_size=5, progress=False)
    assert pooled.shape == inside.shape == (23, tinyworld.DIM)
    assert np.abs(pooled - inside).max() < 1e-4
    assert np.abs(cls - pooled).max() > 1e-2  # the first token is not the mean


#: snippets of this module's label_free_world (tests/conftest.py)
WORLD_ROWS = 1000


@pytest.fixture(scope="module")
def embed_world(label_free_world):
    """The label-free tiny world whose model is the tiny embedding model."""
    return {**label_free_world, "model": label_free_world["embed"]}


def _run(world, name, *extra):
    return tinyworld.run_in(world, name, *tinyworld.LABEL_FREE, "verdict.max_flip_rate=null",
                            *extra, own_ledger=True)


@pytest.mark.parametrize("metric", ["cosine", "recall_at_k"])
def test_cli_embedding_run_gives_score_verdicts(embed_world, metric):
    # per query, at least 4 of FP32's 5 gallery neighbours kept (FP16 reorders near ties of
    # this tiny model's embeddings: 5 of 5 holds for 196 of 200 queries, too few for 95%):
    # the declared floor 0.6 leaves 1 - 0.4 x (1 - 0.5) = 0.8 after the engine check's half
    # (target=tensorrt signed on the CPU emulation: run/deployment.py signoff_budget)
    r, run_dir = _run(embed_world, metric, f"verdict.metric={metric}", "verdict.recall_k=5",
                      "verdict.min_recall=0.6")
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((run_dir / "record.json").read_text())
    so = rec["signoff"]
    rows = so["decision"]["rows"] if "decision" in so else so["rows"]
    assert rows and all(row["metric"] == metric for row in rows)
    fp16 = rec["candidates"]["fp16"]
    assert fp16["split"] == "test" and fp16["verdict"]["metric"] == metric
    emb = fp16["embedding_fp32"]
    assert emb["cosine"]["n"] == rec["data"]["sizes"]["test"]
    assert sum(emb["cosine"]["hist"]["counts"]) == emb["cosine"]["n"]
    assert "recall_at_5" in emb and 0.0 <= fp16["metrics"]["recall_at_k"] <= 1.0
    # recall@k searched the fixed gallery: seeded train examples, size and hash recorded
    gal = emb["gallery"]
    assert gal["size"] == min(1000, rec["data"]["sizes"]["train"]) and gal["source"] == "train"
    assert len(gal["sha256"]) == 64 and emb["recall_at_5"]["n"] == emb["cosine"]["n"]
    if metric == "recall_at_k":
        assert fp16["verdict"]["margin"]["gallery"]["sha256"] == gal["sha256"]
    assert {row["status"] for row in rows} <= {"PASS", "FAIL", "INCONCLUSIVE"}
    assert rows[0]["status"] == "PASS", fp16["verdict"]["reasons"]  # fp16, 200 examples
    assert fp16["verdict"]["signoff"]["methods"]["score"]["method"] == "clopper_pearson"
    assert f"{metric} share [95% CI]" in r.stdout
    # target=tensorrt on this CPU: the engine check (in cosine units) has not run, and the
    # sign-off decided at the cosine budget left after its tolerance
    checks = [c["backend_check"] for n, c in rec["candidates"].items() if n.startswith("int8.")]
    assert checks and all(b["status"] == "not_run" and b["metric"] == metric
                          and "backend=trt" in b["what_to_run"] for b in checks)
    units = GATE_UNITS[metric]  # the share of examples outside the engine tolerance
    assert units.startswith("share of ")
    assert all(b["budget"]["units"] == units for b in checks)


def test_engine_check_of_recall_at_k_runs_where_the_deployment_runtime_is_here(embed_world):
    """target=ort_cpu with the exact Q/DQ evaluation: the engine check runs here (ONNX
    Runtime's fused kernels vs the exact emulation) and gates recall@k in its own units,
    each query's neighbours searched in the sign-off's fixed gallery, which both executions
    embed (H5: the same gallery whatever the number of checked examples)."""
    r, run_dir = _run(embed_world, "ortcpu-recall", "verdict.metric=recall_at_k",
                      "verdict.recall_k=5", "verdict.min_recall=0.6", "target=ort_cpu",
                      "backend.qdq_mode=exact", "precision.remainder=fp32",
                      "precision.search.enabled=false")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    rec = json.loads((run_dir / "record.json").read_text())
    checks = [c["backend_check"] for n, c in rec["candidates"].items() if n.startswith("int8.")]
    assert checks and all(b["checked"] and b["metric"] == "recall_at_k" for b in checks)
    assert all(b["status"] in ("pass", "fail", "inconclusive") for b in checks)
    assert all(b["budget"]["units"] == GATE_UNITS["recall_at_k"] for b in checks)
    assert all("fixed gallery" in b["gate"]["reasons"][0] for b in checks)
    # the engine's part of verdict.score_quantile: half of the default 0.05
    assert all("against at most 0.025" in b["gate"]["reasons"][0] for b in checks)


def test_cli_embedding_run_fails_on_a_strict_floor(embed_world):
    """A floor the INT8 candidates cannot meet: they FAIL (the verdict can fail)."""
    r, run_dir = _run(embed_world, "strict", "verdict.metric=recall_at_k", "verdict.recall_k=5",
                      "verdict.min_recall=0.995", "precision.search.enabled=false")
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((run_dir / "record.json").read_text())
    int8 = [c for n, c in rec["candidates"].items() if n.startswith("int8.")]
    assert int8 and all(c["verdict"]["status"] == "FAIL" for c in int8)


def test_cli_cosine_on_logits_is_one_clear_error(embed_world):
    r, _ = _run(embed_world, "bad", "verdict.metric=cosine", "model.output.kind=logits",
                "model.output.name=sentence")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "verdict.metric" in r.stderr


def test_cosine_on_logits_is_refused_before_any_inference(embed_world, tmp_path):
    from runworld import settings_for

    from quantkit.app import prepared_context

    s = settings_for(embed_world, "verdict.metric=cosine", "model.output.name=sentence",
                     "model.output.kind=logits", "data.label_column=null",
                     "data.label_names=[]", "stage_cache=false")
    with pytest.raises(ConfigError, match="model.output.kind=embedding"):
        prepared_context(s, tmp_path)  # the prepare stage: no FP32 inference yet


def test_cli_selects_the_logits_output_of_a_multi_output_model(embed_world, tmp_path):
    """model.output.name picks the third output (a classifier head) of a 3-output model."""
    path = tmp_path / "multi.onnx"
    onnx.save(embedding_model(with_logits=True), str(path))
    r, run_dir = tinyworld.run_in(embed_world, "multi", f"model.path={path}",
                                  "model.output.name=logits", "precision.search.enabled=false")
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((run_dir / "record.json").read_text())
    assert rec["model"]["output_name"] == "logits" and rec["model"]["output_kind"] == "logits"
    assert rec["candidates"]["fp32"]["metrics"]["accuracy"] > 0.7
    assert rec["candidates"]["fp16"]["verdict"]["metric"] == "accuracy"
    assert "embedding_fp32" not in rec["candidates"]["fp16"]
