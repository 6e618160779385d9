"""A tiny, real text-classification world built in code: tokenizer, ONNX models, CSV.

Small enough that a whole quantkit run on it takes seconds, real enough that every stage
(ORT sessions, calibration, Q/DQ, verdicts, reports) runs for real. Used by the bad-input
catalog, the fuzz tests, the kill-and-resume / concurrency tests, the run's stage tests
and, through :func:`label_free_world` (the ``label_free_world`` fixture of
tests/conftest.py) and :func:`run_in`, the label-free and embedding tests.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

POS_WORDS = ["good", "great", "fine", "superb", "lovely", "fun", "bright", "warm"]
NEG_WORDS = ["bad", "awful", "dull", "poor", "grim", "sad", "weak", "cold"]
FILLER = ["the", "film", "was", "a", "story", "plot", "cast", "and", "very", "quite"]
VOCAB = ["[PAD]", "[UNK]"] + FILLER + POS_WORDS + NEG_WORDS
DIM = 16


def write_tokenizer(path: Path) -> Path:
    """A WordLevel tokenizer.json over :data:`VOCAB` (whitespace pre-tokenizer)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def word_embeddings(rng: np.random.Generator, sd: float) -> np.ndarray:
    """A [len(VOCAB), DIM] table drawn N(0, sd) whose dims 0 / 1 carry the positive /
    negative words (+2): what makes the tiny models separate the two labels."""
    emb = rng.normal(0, sd, (len(VOCAB), DIM)).astype(np.float32)
    for w in POS_WORDS:
        emb[VOCAB.index(w), 0] += 2.0
    for w in NEG_WORDS:
        emb[VOCAB.index(w), 1] += 2.0
    return emb


def text_model(*, opset: int = 17, input_ids_shape=("batch", "seq"), seed: int = 0,
               input_names=("input_ids", "attention_mask")) -> onnx.ModelProto:
    """input_ids, attention_mask [batch, seq] -> masked-mean embedding -> 2 MatMuls -> logits."""
    rng = np.random.default_rng(seed)
    emb = word_embeddings(rng, 0.3)
    w1 = (np.eye(DIM) + rng.normal(0, 0.05, (DIM, DIM))).astype(np.float32)
    w2 = np.zeros((DIM, 2), np.float32)
    w2[0, 1], w2[1, 0] = 3.0, 3.0
    w2 += rng.normal(0, 0.05, (DIM, 2)).astype(np.float32)
    ids, mask = input_names
    inits = [numpy_helper.from_array(emb, "emb"), numpy_helper.from_array(w1, "w1"),
             numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.zeros(2, np.float32), "b2"),
             numpy_helper.from_array(np.array([-1], np.int64), "axes_last"),
             numpy_helper.from_array(np.array([1], np.int64), "axes_seq"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "eps")]
    if opset >= 13:  # axes are inputs from opset 13 on, attributes before
        unsq = helper.make_node("Unsqueeze", ["maskf", "axes_last"], ["mask3"], name="mask_unsq")
        sums = [helper.make_node("ReduceSum", ["masked", "axes_seq"], ["summed"], keepdims=0,
                                 name="sum"),
                helper.make_node("ReduceSum", ["mask3", "axes_seq"], ["count"], keepdims=0,
                                 name="count")]
    else:
        unsq = helper.make_node("Unsqueeze", ["maskf"], ["mask3"], axes=[-1], name="mask_unsq")
        sums = [helper.make_node("ReduceSum", ["masked"], ["summed"], axes=[1], keepdims=0,
                                 name="sum"),
                helper.make_node("ReduceSum", ["mask3"], ["count"], axes=[1], keepdims=0,
                                 name="count")]
        inits = [i for i in inits if not i.name.startswith("axes_")]
    nodes = [
        helper.make_node("Gather", ["emb", ids], ["tok"], name="embed"),
        helper.make_node("Cast", [mask], ["maskf"], to=TensorProto.FLOAT, name="mask_cast"),
        unsq,
        helper.make_node("Mul", ["tok", "mask3"], ["masked"], name="mask_mul"),
        *sums,
        helper.make_node("Add", ["count", "eps"], ["count_eps"], name="count_eps"),
        helper.make_node("Div", ["summed", "count_eps"], ["pooled"], name="mean"),
        helper.make_node("MatMul", ["pooled", "w1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["hr"], name="relu"),
        helper.make_node("MatMul", ["hr", "w2"], ["z"], name="fc2"),
        helper.make_node("Add", ["z", "b2"], ["logits"], name="bias"),
    ]
    graph = helper.make_graph(
        nodes, "tiny_text",
        [helper.make_tensor_value_info(ids, TensorProto.INT64, list(input_ids_shape)),
         helper.make_tensor_value_info(mask, TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="quantkit-tests")
    model.ir_version = 8
    return model


def embedding_model(*, input_names=("input_ids", "attention_mask"), seed: int = 0,
                    with_logits: bool = False, token_type_ids: str | None = None
                    ) -> onnx.ModelProto:
    """A tiny, real embedding model (no head): token states and a pooled output.

    ``input_ids, attention_mask -> Gather -> MatMul -> Relu -> MatMul = token_states
    [B, T, 16]`` and ``sentence [B, 16]`` = the attention-masked mean of ``token_states``.
    Input names can be changed (``input_names``) to test ``model.inputs.*``;
    ``with_logits`` adds a 2-class head output ``logits`` after the pooled output (a
    multi-output model); ``token_type_ids`` names a third input the model reads.
    """
    rng = np.random.default_rng(seed)
    emb = word_embeddings(rng, 0.5)
    w1 = (np.eye(DIM) + rng.normal(0, 0.3, (DIM, DIM))).astype(np.float32)
    w2 = (np.eye(DIM) + rng.normal(0, 0.3, (DIM, DIM))).astype(np.float32)
    ids, mask = input_names
    inits = [numpy_helper.from_array(emb, "emb"), numpy_helper.from_array(w1, "w1"),
             numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.array([-1], np.int64), "axes_last"),
             numpy_helper.from_array(np.array([1], np.int64), "axes_seq"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "eps")]
    nodes = [helper.make_node("Gather", ["emb", ids], ["tok"], name="embed"),
             helper.make_node("MatMul", ["tok", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("MatMul", ["hr", "w2"], ["token_states"], name="fc2"),
             helper.make_node("Cast", [mask], ["maskf"], to=TensorProto.FLOAT, name="mask_cast"),
             helper.make_node("Unsqueeze", ["maskf", "axes_last"], ["mask3"], name="mask_unsq"),
             helper.make_node("Mul", ["token_states", "mask3"], ["masked"], name="mask_mul"),
             helper.make_node("ReduceSum", ["masked", "axes_seq"], ["summed"], keepdims=0,
                              name="sum"),
             helper.make_node("ReduceSum", ["mask3", "axes_seq"], ["count"], keepdims=0,
                              name="count"),
             helper.make_node("Add", ["count", "eps"], ["count_eps"], name="count_eps"),
             helper.make_node("Div", ["summed", "count_eps"], ["sentence"], name="mean")]
    inputs = [helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info(mask, TensorProto.INT64, ["batch", "seq"])]
    if token_type_ids:  # an input the model reads (added to the ids' embedding, times 0)
        inits.append(numpy_helper.from_array(np.zeros((2, DIM), np.float32), "type_emb"))
        nodes[0:1] = [helper.make_node("Gather", ["emb", ids], ["tok0"], name="embed"),
                      helper.make_node("Gather", ["type_emb", token_type_ids], ["typ"],
                                       name="embed_types"),
                      helper.make_node("Add", ["tok0", "typ"], ["tok"], name="embed_sum")]
        inputs.append(helper.make_tensor_value_info(token_type_ids, TensorProto.INT64,
                                                    ["batch", "seq"]))
    outputs = [helper.make_tensor_value_info("token_states", TensorProto.FLOAT,
                                             ["batch", "seq", DIM]),
               helper.make_tensor_value_info("sentence", TensorProto.FLOAT, ["batch", DIM])]
    if with_logits:
        w3 = np.zeros((DIM, 2), np.float32)
        w3[0, 1], w3[1, 0] = 3.0, 3.0
        inits.append(numpy_helper.from_array(w3, "w3"))
        nodes.append(helper.make_node("MatMul", ["sentence", "w3"], ["logits"], name="head"))
        outputs.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2]))
    graph = helper.make_graph(nodes, "tiny_embed", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="quantkit-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def write_model(path: Path, model: onnx.ModelProto | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model if model is not None else text_model(), str(path))
    return path


def rows(n: int = 120, *, seed: int = 0) -> list[dict]:
    """Labeled snippets: label 1 texts lean on positive words, label 0 on negative ones."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        y = i % 2
        words = list(rng.choice(FILLER, size=int(rng.integers(3, 9))))
        pool = POS_WORDS if y else NEG_WORDS
        other = NEG_WORDS if y else POS_WORDS
        words += list(rng.choice(pool, size=2))
        if rng.random() < 0.2:
            words.append(str(rng.choice(other)))
        rng.shuffle(words)
        out.append({"text": " ".join(words) + f" n{i}", "label": y})
    return out


def write_csv(path: Path, data: list[dict] | None = None, *, columns=("text", "label")) -> Path:
    data = rows() if data is None else data
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in data:
            w.writerow(r)
    return path


def cli_args(world: dict, *extra: str) -> list[str]:
    """CLI overrides for a full quantkit run on the tiny world (everything under tmp dirs).

    ``verdict.min_power=0``: the tiny world's test split (24 examples) is below
    ``verdict.min_n``, so every power plan is below the default 0.5 and nothing would be
    tested; its runs test every declared member anyway to exercise the test path (the power
    gate itself is tested in tests/run/test_run_ledger.py). The test ledger is the world's
    own (``<root>/ledger.sqlite``): the tiny model and data are the same model and test
    examples in every world, and the default ledger (the session's private user data dir)
    is shared by every test (tests/run/test_run_ledger.py runs the default on purpose)."""
    return ["model=onnx", f"model.path={world['model']}", "data=local",
            f"data.path={world['csv']}", f"data.tokenizer={world['tokenizer']}",
            "data.label_names=[neg,pos]", "data.calib.num_samples=32", "progress=false",
            f"cache_dir={world['cache']}", f"stage_cache_dir={world['stages']}",
            f"hydra.run.dir={world['run']}", f"verdict.ledger={world['root']}/ledger.sqlite",
            "verdict.n_boot=200", "compare.subset=16",
            "compare.backend_check_subset=16", "precision.search.subset=16",
            "experiment_name=tiny", "bench.enabled=false", "verdict.min_power=0",
            # the generic recipe: the tests of other features do not pay for ptq.recipe=auto's
            # trials (tests/run/test_recipe_choice.py and the "auto" record fixture run it)
            "ptq.recipe=generic", *extra]


def make_world(root: Path) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    return {"root": root,
            "tokenizer": write_tokenizer(root / "tok" / "tokenizer.json"),
            "model": write_model(root / "tiny.onnx"),
            "csv": write_csv(root / "data.csv"),
            "cache": root / "cache", "stages": root / "stages", "run": root / "run"}


def label_free_world(root: Path, *, n_rows: int) -> dict:
    """The world of the label-free and embedding tests: :func:`make_world` whose data is
    ``n_rows`` labelled snippets (``csv``: big.csv; runs drop the labels with
    :data:`LABEL_FREE`) and the tiny embedding model saved beside the classifier
    (``embed``: embed.onnx; ``{**world, "model": world["embed"]}`` runs it)."""
    world = make_world(root)
    world["csv"] = write_csv(root / "big.csv", rows(n_rows))
    world["embed"] = write_model(root / "embed.onnx", embedding_model())
    return world


# ---------------------------------------------------------------------------------------
# running the real CLI and checking what a failed run leaves behind

#: What a failed run may leave in its run dir: Hydra's composed config (and the log file).
ALLOWED_DEBRIS = (".hydra",)


def run_quantkit(args: list[str], *, cwd: Path, error_file: Path | None = None,
                 timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("QUANTKIT_ERROR_FILE", None)
    if error_file is not None:
        env["QUANTKIT_ERROR_FILE"] = str(error_file)
    env.setdefault("HF_HUB_OFFLINE", "1")
    return subprocess.run([sys.executable, "-m", "quantkit", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


#: CLI overrides of a run that reads no labels (the label-free metrics)
LABEL_FREE = ("data.label_column=null", "data.label_names=[]")


def run_in(world: dict, name: str, *extra: str, own_ledger: bool = False
           ) -> tuple[subprocess.CompletedProcess, Path]:
    """One real CLI run on ``world`` (:func:`cli_args`, ``extra`` overriding) in its own run
    dir ``<root>/<name>``; returns the process and that dir. ``own_ledger``: a test ledger
    of its own in the run dir (each run its own experiment: looks across runs are
    tests/run/test_run_ledger.py's), else the world's (``<root>/ledger.sqlite``)."""
    run_dir = world["root"] / name
    ledger = (f"verdict.ledger={run_dir}/ledger.sqlite",) if own_ledger else ()
    args = override(cli_args(world), f"hydra.run.dir={run_dir}", *ledger, *extra)
    return run_quantkit(args, cwd=world["root"]), run_dir


def override(base: list[str], *extra: str) -> list[str]:
    """``base`` with the keys of ``extra`` replaced (Hydra refuses a key given twice)."""
    keys = {e.lstrip("+~").split("=", 1)[0] for e in extra}
    return [a for a in base if a.lstrip("+~").split("=", 1)[0] not in keys] + list(extra)


def debris(run_dir: Path, stage_dir: Path) -> list[str]:
    """Partial or premature outputs: anything in the run dir beyond Hydra's config and the
    log, temp files anywhere, staging or unverifiable entries in the stage cache."""
    from quantkit.cache import MANIFEST, StageCache

    found = []
    if run_dir.exists():
        for p in sorted(run_dir.rglob("*")):
            rel = p.relative_to(run_dir)
            if rel.parts[0] in ALLOWED_DEBRIS or (p.suffix == ".log" and len(rel.parts) == 1):
                continue
            found.append(f"run dir: {rel}")
    if stage_dir.exists():
        cache = StageCache(stage_dir)
        for p in sorted(stage_dir.rglob("*")):
            rel = p.relative_to(stage_dir)
            if any(part.startswith((".tmp", ".corrupt", ".old")) for part in rel.parts):
                found.append(f"stage cache partial: {rel}")
            elif p.is_dir() and len(rel.parts) == 3 and rel.parts[0] != "locks":
                stage, key = rel.parts[0], rel.parts[2]
                if not (p / MANIFEST).is_file() or cache.get(stage, key) is None:
                    found.append(f"stage cache entry fails verification: {rel}")
    for base in (run_dir, stage_dir):
        if base.exists():
            found += [f"temp file: {p}" for p in base.rglob("*.tmp*")]
    return found


def read_error(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def comparable(record: dict) -> dict:
    """The record without what legitimately differs between runs (tests/test_e2e.py's rule)."""
    from test_e2e import comparable as _comparable  # tests/ is on sys.path (tests/conftest.py)

    return _comparable(record)
