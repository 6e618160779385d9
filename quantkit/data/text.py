"""Tokenize text into model feeds, batch by length (less padding), keep the original order."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from quantkit.errors import ConfigError, DataError, first_line

log = logging.getLogger(__name__)

TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
#: pad tokens looked up when a tokenizer carries no padding settings (BERT, RoBERTa / MPNet)
PAD_TOKENS = ("[PAD]", "<pad>")


def pad_token_id(tokenizer) -> int:
    """The id a batch is padded with: the tokenizer's own padding settings (a tokenizer.json
    saved by transformers keeps them: 0 for BERT / MiniLM, 1 for MPNet and RoBERTa), else
    the id of its pad token, else 0. Padded positions are masked out of attention and
    pooling, but they still run through the graph, so calibration statistics see them: they
    must be the pad tokens the model was trained with."""
    padding = tokenizer.padding
    if padding and isinstance(padding.get("pad_id"), int):
        return int(padding["pad_id"])
    ids = [tokenizer.token_to_id(t) for t in PAD_TOKENS]
    return next((i for i in ids if i is not None), 0)


def _read_json(path: Path) -> dict:
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}


def model_max_length(name_or_path: str) -> int | None:
    """The longest input, in tokens, the tokenizer's model takes, where its files say so:
    ``tokenizer_config.json`` ``model_max_length`` or ``config.json``
    ``max_position_embeddings`` beside the tokenizer. None when unknown."""
    p = Path(name_or_path).expanduser()
    folder = p if p.is_dir() else p.parent
    if not folder.is_dir():
        return None
    limits = []
    v = _read_json(folder / "tokenizer_config.json").get("model_max_length")
    if isinstance(v, (int, float)) and 0 < v < 1_000_000:  # transformers' "no limit" is 1e30
        limits.append(int(v))
    v = _read_json(folder / "config.json").get("max_position_embeddings")
    if isinstance(v, int) and v > 0:
        limits.append(v)
    return min(limits) if limits else None


def _vocab_tokenizer(vocab: Path, lowercase: bool | None):
    """A BERT WordPiece tokenizer from a ``vocab.txt`` alone (tokenizers' BertWordPiece)."""
    from tokenizers import BertWordPieceTokenizer

    if lowercase is None:
        lowercase = bool(_read_json(vocab.parent / "tokenizer_config.json").get("do_lower_case", True))
    words = vocab.read_text(encoding="utf-8", errors="replace").splitlines()
    missing = [t for t in ("[CLS]", "[SEP]", "[UNK]") if t not in words]
    if missing:
        raise DataError("vocab.txt lacks BERT special tokens", where="data.tokenizer",
                        value=missing, fix="give a BERT WordPiece vocab.txt (with [CLS] [SEP] "
                        "[UNK] [PAD]) or a tokenizer.json")
    log.info("tokenizer: BERT WordPiece from %s (lowercase=%s)", vocab, lowercase)
    return BertWordPieceTokenizer(str(vocab), lowercase=lowercase)


def load_tokenizer(name_or_path: str, *, lowercase: bool | None = None):
    """A fast tokenizer from a tokenizer.json, a vocab.txt, a directory with either, or a
    hub name. ``lowercase`` applies to vocab.txt tokenizers (default: the directory's
    tokenizer_config.json ``do_lower_case``, else true)."""
    from tokenizers import Tokenizer

    p = Path(name_or_path).expanduser()
    if p.is_dir():
        p = p / "tokenizer.json" if (p / "tokenizer.json").is_file() or not (
            p / "vocab.txt").is_file() else p / "vocab.txt"
    if p.suffix == ".txt" and p.is_file():
        return _vocab_tokenizer(p, lowercase)
    # A path (absolute, ./ ../ ~, two or more '/'), not a hub id ("name" or "org/name"):
    # never ask the hub for it.
    looks_local = (p.is_absolute() or name_or_path.startswith((".", "~"))
                   or name_or_path.count("/") >= 2 or "\\" in name_or_path)
    if p.suffix == ".json" or p.exists() or looks_local:
        if not p.is_file():
            raise DataError("tokenizer not found", where="data.tokenizer", value=str(p),
                            fix="point data.tokenizer at a tokenizer.json, a vocab.txt, a "
                                "directory with either, or a hub tokenizer name")
        try:
            return Tokenizer.from_file(str(p))
        except Exception as exc:  # tokenizers raises a bare Exception for bad files
            reason = first_line(exc)
            raise DataError(f"could not read the tokenizer ({reason})",
                            where="data.tokenizer", value=str(p),
                            fix="point data.tokenizer at a valid tokenizer.json "
                                "(saved by tokenizers or transformers) or a vocab.txt") from exc
    try:
        return Tokenizer.from_pretrained(name_or_path)
    except Exception as exc:
        raise DataError("could not load tokenizer from the hub", where="data.tokenizer",
                        value=name_or_path, fix="check the name and network access, "
                        "or use a local directory with tokenizer.json") from exc


class TextEncoder:
    """Encodes texts into the feeds a model's inputs want (by input name)."""

    def __init__(self, tokenizer, *, max_length: int, input_names: Sequence[str],
                 model_limit: int | None = None, input_map: dict[str, str] | None = None
                 ) -> None:
        # input_map: tokenizer field -> model input name (model.inputs.*; default: itself)
        fields = {(input_map or {}).get(f, f): f for f in TEXT_INPUTS}
        unknown = [n for n in input_names if n not in fields]
        if unknown:
            raise DataError("model input cannot be fed from text", where="model.inputs",
                            value=unknown[0],
                            fix=f"the model's inputs are {list(input_names)}; map the "
                                "tokenizer's fields with model.inputs.input_ids=<name> "
                                "model.inputs.attention_mask=<name> (token_type_ids too)")
        self.fields = {n: fields[n] for n in input_names}  # model input -> tokenizer field
        if "input_ids" not in self.fields.values():
            raise DataError("a text model needs an input_ids input", where="model inputs",
                            value=list(input_names), fix="export the model with an input named "
                            "input_ids (attention_mask and token_type_ids are optional)")
        if model_limit is not None and max_length > model_limit:
            raise ConfigError("data.max_length is above the model's limit", where="data.max_length",
                              value=max_length, fix=f"set data.max_length={model_limit} or less "
                              "(the tokenizer's model_max_length / max_position_embeddings)")
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.input_names = list(input_names)
        self.pad_id = pad_token_id(tokenizer)  # before no_padding() forgets the settings
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=max_length)

    def fingerprint(self) -> str:
        """sha256 of what turns a text into feeds: the tokenizer's own serialization
        (vocabulary, normalizer, truncation at ``max_length``) and the input mapping. A
        stage-cache key part that follows the tokenizer's content, not the path it was
        read from."""
        import hashlib
        import json

        h = hashlib.sha256(self.tokenizer.to_str().encode())
        h.update(json.dumps(self.fields, sort_keys=True).encode())
        if self.pad_id != 0:  # padding with 0 is what every key before pad ids meant
            h.update(f"pad_id={self.pad_id}".encode())
        return h.hexdigest()

    def truncated(self, texts: Sequence[str]) -> np.ndarray:
        """bool per text: longer than ``max_length`` tokens (special tokens included)."""
        return np.array([len(e.overflowing) > 0 for e in self.tokenizer.encode_batch(list(texts))],
                        dtype=bool)

    def lengths(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([len(e.ids) for e in self.tokenizer.encode_batch(list(texts))], dtype=np.int64)

    def encode(self, texts: Sequence[str], *, pad_to: int | None = None) -> dict[str, np.ndarray]:
        """Feeds padded to the longest text of the batch (or to ``pad_to`` tokens): ids with
        the tokenizer's pad id (:func:`pad_token_id`), mask and token types with 0."""
        encs = self.tokenizer.encode_batch(list(texts))
        width = max(max(len(e.ids) for e in encs), pad_to or 0)
        n = len(encs)
        ids = np.full((n, width), self.pad_id, dtype=np.int64)
        mask = np.zeros((n, width), dtype=np.int64)
        types = np.zeros((n, width), dtype=np.int64)
        for i, e in enumerate(encs):
            k = len(e.ids)
            ids[i, :k] = e.ids
            mask[i, :k] = 1
            types[i, :k] = e.type_ids
        all_feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return {k: all_feeds[self.fields[k]] for k in self.input_names}

    def mask_input(self) -> str | None:
        """The model input that carries the attention mask (None: the model takes none)."""
        return next((n for n, f in self.fields.items() if f == "attention_mask"), None)


def length_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Index batches in order of length (stable), so each batch pads little."""
    order = np.argsort(lengths, kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def iter_feeds(encoder: TextEncoder, texts: Sequence[str], batch_size: int,
               lengths: np.ndarray | None = None, *, pad_to: int | None = None
               ) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Yield (indices, feed) per batch; results are put back in order by the indices.

    Default: batches in length order, padded to their longest text. ``pad_to`` keeps the
    original order and pads every batch to that many tokens (fixed shapes, as tools that
    stack calibration batches need).
    """
    if pad_to is not None:
        for i in range(0, len(texts), batch_size):
            idx = np.arange(i, min(i + batch_size, len(texts)))
            yield idx, encoder.encode([texts[j] for j in idx], pad_to=pad_to)
        return
    if lengths is None:
        lengths = encoder.lengths(texts)
    for idx in length_batches(lengths, batch_size):
        yield idx, encoder.encode([texts[i] for i in idx])
