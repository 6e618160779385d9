"""Feeds: one object per modality that turns a split into batches of ONNX feed dicts.

Every stage that runs a model (FP32 reference, calibration, FP16 range check, evaluation,
backend check, per-layer comparison, sensitivity) asks a ``Feeds`` for its batches and
never looks at texts or pixels itself:

- :class:`TextFeeds` wraps a :class:`~quantkit.data.text.TextEncoder`: batches in length
  order (less padding), ``lengths()`` are token counts and give the "length" slice.
- :class:`ImageFeeds` wraps an :class:`~quantkit.data.images.ImagePreprocess`: batches in
  order, preprocessing per batch only (memory O(batch)); no lengths, no length slice.

``batches(data, batch_size)`` yields ``(indices, feed)``: results go back in original order
by the indices. ``data`` is a split (``TextSplit`` / ``ImageSplit``) or its raw items (a list
of texts, a uint8 image array). ``cache_key()`` is what a stage-cache key needs beyond the
data's hash (text: nothing new, so text keys are what they always were).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from quantkit.errors import ConfigError, DataError

__all__ = ["Feeds", "TextFeeds", "ImageFeeds", "make_feeds", "image_preprocess", "check_kind",
           "length_buckets", "mean_pool"]

LAYOUTS = ("NCHW", "NHWC")


class Feeds(Protocol):
    kind: str
    input_names: list[str]

    def lengths(self, data: Any) -> np.ndarray | None: ...

    def batches(self, data: Any, batch_size: int, *, lengths: np.ndarray | None = None
                ) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]: ...

    def feeds(self, data: Any, batch_size: int) -> Iterator[dict[str, np.ndarray]]: ...

    def slices(self, lengths: np.ndarray | None) -> dict[str, np.ndarray]: ...

    def cache_key(self) -> dict: ...


def _texts(data: Any) -> Sequence[str]:
    texts = getattr(data, "texts", data)
    if hasattr(data, "images"):
        raise DataError("a text model cannot be fed images", where="data.kind", value="image",
                        fix="use a text model (model=minilm_sentiment, onnx, hub) or set "
                            "data.kind=image with an image model")
    return texts


def _images(data: Any) -> np.ndarray:
    if hasattr(data, "texts"):
        raise DataError("an image model cannot be fed texts", where="data.kind", value="text",
                        fix="use image data (data=fashion_mnist, or data.kind=image) with an "
                            "image model")
    return getattr(data, "images", data)


class TextFeeds:
    """Texts -> tokenized feeds, batched by length (each batch padded to its longest text)."""

    kind = "text"

    def __init__(self, encoder, *, pooling: str = "none", fixed_batch: int | None = None
                 ) -> None:
        self.encoder = encoder
        self.input_names = list(encoder.input_names)
        self.pooling = pooling
        self.fixed_batch = fixed_batch

    def pool(self, output: np.ndarray, feed: dict[str, np.ndarray]) -> np.ndarray:
        """A token-level output [batch, tokens, dims] pooled per ``model.output.pooling``
        (mean over the batch's attention mask, or the first token); others as they are."""
        mask_name = self.encoder.mask_input() if hasattr(self.encoder, "mask_input") else None
        return pool_output(output, feed.get(mask_name) if mask_name else None, self.pooling)

    def lengths(self, data: Any) -> np.ndarray:
        return self.encoder.lengths(_texts(data))

    def batches(self, data: Any, batch_size: int, *, lengths: np.ndarray | None = None,
                pad_to: int | None = None) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
        from quantkit.data.text import iter_feeds

        return iter_feeds(self.encoder, _texts(data), batch_size_for(self, batch_size), lengths,
                          pad_to=pad_to)

    def feeds(self, data: Any, batch_size: int, *, lengths: np.ndarray | None = None
              ) -> Iterator[dict[str, np.ndarray]]:
        return (feed for _, feed in self.batches(data, batch_size, lengths=lengths))

    def slices(self, lengths: np.ndarray | None) -> dict[str, np.ndarray]:
        return {"length": length_buckets(lengths)} if lengths is not None else {}

    def truncated(self, data: Any) -> np.ndarray:
        """bool per text: longer than data.max_length tokens, so truncated."""
        return self.encoder.truncated(_texts(data))

    def cache_key(self) -> dict:
        """The tokenizer by content (a changed vocabulary at the same path is another key; a
        moved cache still hits), and a fixed batch where the model has one."""
        return {"tokenizer": self.encoder.fingerprint(), **_fixed(self)}

    def describe(self) -> dict:
        return {"kind": self.kind, "inputs": self.input_names,
                "max_length": self.encoder.max_length, **_fixed(self)}


class ImageFeeds:
    """uint8 images -> one float32 input (NCHW or NHWC), preprocessed batch by batch, in order."""

    kind = "image"

    def __init__(self, preprocess, *, input_name: str = "input", layout: str = "NCHW",
                 pooling: str = "none", fixed_batch: int | None = None) -> None:
        from quantkit.data.images import ImagePreprocess

        if not isinstance(preprocess, ImagePreprocess):
            raise ConfigError("image feeds need an ImagePreprocess", where="data.image",
                              value=type(preprocess).__name__,
                              fix="pass quantkit.data.images.ImagePreprocess(...)")
        if layout not in LAYOUTS:
            raise ConfigError("unsupported image layout", where="data.image.layout", value=layout,
                              fix=f"use one of {list(LAYOUTS)}")
        self.preprocess = preprocess
        self.layout = layout
        self.input_names = [input_name]
        self.pooling = pooling
        self.fixed_batch = fixed_batch

    def pool(self, output: np.ndarray, feed: dict[str, np.ndarray]) -> np.ndarray:
        """A token-level output (e.g. a vision transformer's patch states) pooled (no mask)."""
        return pool_output(output, None, self.pooling)

    def lengths(self, data: Any) -> None:
        _images(data)
        return None

    def batches(self, data: Any, batch_size: int, *, lengths: np.ndarray | None = None
                ) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
        from quantkit.data.images import iter_image_feeds

        name = self.input_names[0]
        for idx, feed in iter_image_feeds(_images(data), batch_size_for(self, batch_size),
                                          self.preprocess, input_name=name):
            if self.layout == "NHWC":
                feed = {name: np.ascontiguousarray(feed[name].transpose(0, 2, 3, 1))}
            yield idx, feed

    def feeds(self, data: Any, batch_size: int, *, lengths: np.ndarray | None = None
              ) -> Iterator[dict[str, np.ndarray]]:
        return (feed for _, feed in self.batches(data, batch_size))

    def slices(self, lengths: np.ndarray | None) -> dict[str, np.ndarray]:
        return {}

    def cache_key(self) -> dict:
        """The preprocessing settings and its implementation's version (other pixels from the
        same settings are another key), the layout and the input name."""
        from quantkit.data.images import PREPROCESS_VERSION

        return {"preprocess": self.preprocess.to_dict(), "layout": self.layout,
                "input": self.input_names[0], "preprocess_version": PREPROCESS_VERSION,
                **_fixed(self)}

    def describe(self) -> dict:
        return {"kind": self.kind, "inputs": self.input_names, "layout": self.layout,
                "preprocess": self.preprocess.to_dict(), **_fixed(self)}


def batch_size_for(feeds, batch_size: int) -> int:
    """The batch size ``feeds`` actually give: 1 for a model whose batch is fixed at 1 (one
    example at a time, whatever the setting), else ``batch_size``."""
    return 1 if getattr(feeds, "fixed_batch", None) == 1 else batch_size


def _fixed(feeds) -> dict:
    """``{"fixed_batch": n}`` where the model fixes its batch (keys stay as they were
    without one)."""
    n = getattr(feeds, "fixed_batch", None)
    return {"fixed_batch": n} if n is not None else {}


def pool_output(output: np.ndarray, mask: np.ndarray | None, pooling: str) -> np.ndarray:
    """``output`` pooled over tokens when it is token-level (rank 3) and ``pooling`` is
    "mean" (positions where ``mask`` is 1; all positions without a mask) or "cls"."""
    if pooling == "none" or np.ndim(output) != 3:
        return output
    if pooling == "cls":
        return np.asarray(output)[:, 0]
    return mean_pool(output, mask).astype(np.float32)


def image_preprocess(settings):
    """The :class:`ImagePreprocess` that ``data.image`` describes (ConfigError if invalid)."""
    from quantkit.data.images import ImagePreprocess

    c = settings.data.image
    return ImagePreprocess(size=c.size, channels=c.channels, mean=tuple(c.mean), std=tuple(c.std),
                           resize=c.resize, channel_order=c.channel_order)


def _input_types(model) -> dict[str, tuple[int, int]]:
    """{graph input name: (ONNX elem type, rank)} of ``model`` (weights not loaded)."""
    import onnx

    proto = onnx.load(model.path, load_external_data=False)
    inits = {i.name for i in proto.graph.initializer}
    return {i.name: (i.type.tensor_type.elem_type, len(i.type.tensor_type.shape.dim))
            for i in proto.graph.input if i.name not in inits}


def check_kind(settings, model) -> None:
    """DataError naming ``data.kind`` when the model's inputs are of the other kind: an
    image model (one float input of rank 4) given text, or a text model (input_ids, or
    integer inputs) given images. Runs before any tokenizer or inference."""
    from onnx import TensorProto

    from quantkit.data.text import TEXT_INPUTS

    kind = settings.data.kind
    names = list(model.input_names)
    mapped = {getattr(settings.model.inputs, f, None) for f in TEXT_INPUTS} - {None}
    if kind == "text" and all(n in TEXT_INPUTS or n in mapped for n in names):
        return
    types = _input_types(model)
    floats = [n for n in names if types.get(n, (0, 0))[0] in
              (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16)]
    ints = [n for n in names if n in TEXT_INPUTS or types.get(n, (0, 0))[0] in
            (TensorProto.INT64, TensorProto.INT32)]
    if kind == "text" and len(names) == 1 and floats and types[floats[0]][1] in (3, 4):
        raise DataError("the model takes images and the data is text", where="data.kind",
                        value=f"text (model input {floats[0]}: float, rank "
                              f"{types[floats[0]][1]})",
                        fix="set data.kind=image with image data (data=image_folder "
                            "data.path=<folder>, or data=fashion_mnist)")
    if kind == "image" and ints and not floats:
        raise DataError("the model takes token ids and the data is images", where="data.kind",
                        value=f"image (model inputs {names})",
                        fix="set data.kind=text with text data (data=local data.path=<csv>, "
                            "or data=rotten_tomatoes)")


def make_feeds(settings, model, *, fixed_batch: int | None = None) -> TextFeeds | ImageFeeds:
    """The feeds for ``model``'s inputs from ``settings.data`` (text or image);
    ``fixed_batch``: the batch the model's inputs fix (1: fed one example at a time).

    Checks first (before any inference) that the model takes the data's kind, and for
    text that ``data.max_length`` is within the tokenizer's model limit.
    """
    check_kind(settings, model)
    pooling = getattr(model, "pooling", "none")
    if settings.data.kind == "image":
        if len(model.input_names) != 1:
            raise DataError("an image model must have exactly one input", where="model inputs",
                            value=model.input_names,
                            fix="export the model with one image input [N, C, H, W] (or NHWC)")
        return ImageFeeds(image_preprocess(settings), input_name=model.input_names[0],
                          layout=settings.data.image.layout, pooling=pooling,
                          fixed_batch=fixed_batch)
    from quantkit.data.text import TextEncoder, load_tokenizer, model_max_length

    if not model.tokenizer:
        raise ConfigError("a text model needs a tokenizer", where="data.tokenizer", value=None,
                          fix="set data.tokenizer=<tokenizer.json, vocab.txt, a directory "
                              "with either, or a hub name>")
    from quantkit.data.text_inputs import check_text_inputs

    fields = check_text_inputs(model.input_names, settings.model.inputs)  # field -> input
    return TextFeeds(TextEncoder(load_tokenizer(model.tokenizer, lowercase=settings.data.lowercase),
                                 max_length=settings.data.max_length,
                                 input_names=model.input_names,
                                 model_limit=model_max_length(model.tokenizer),
                                 input_map=fields), pooling=pooling, fixed_batch=fixed_batch)


def length_buckets(lengths: Any, edges: Sequence[int] = (16, 32, 64, 128)) -> np.ndarray:
    """Bucket labels for integer lengths: "<=16", "17-32", "33-64", "65-128", ">128".

    A length equal to an edge falls in the bucket that edge closes.
    """
    e = list(edges)
    if (not e or any(not isinstance(x, (int, np.integer)) or x < 1 for x in e)
            or any(b <= a for a, b in zip(e, e[1:]))):
        raise ConfigError("edges must be strictly increasing positive integers",
                          where="length_buckets(edges)", value=edges,
                          fix="use e.g. (16, 32, 64, 128)")
    n = np.asarray(lengths)
    if n.ndim != 1 or (n.size and (not np.issubdtype(n.dtype, np.integer) or n.min() < 0)):
        raise DataError("lengths must be a 1-D array of non-negative integers",
                        where="length_buckets", value=(n.shape, n.dtype),
                        fix="pass token counts per example")
    names = [f"<={e[0]}"]
    for lo, hi in zip(e, e[1:]):
        names.append(f"{lo + 1}-{hi}" if hi > lo + 1 else f"{hi}")
    names.append(f">{e[-1]}")
    idx = np.searchsorted(np.asarray(e), n, side="left")
    return np.asarray(names)[idx]


def mean_pool(hidden: Any, mask: Any | None = None) -> np.ndarray:
    """Mean over tokens of (n, t, d) hidden states, counting only positions where ``mask`` is 1.

    Padding changes nothing: a row padded with masked tokens pools to the same vector. A row
    whose mask is all zero pools to zeros.
    """
    h = np.asarray(hidden, dtype=np.float64)
    if h.ndim != 3:
        raise DataError("token-level hidden states must have shape (examples, tokens, dims)",
                        where="model.pooling", value=h.shape,
                        fix="use model.pooling=none for an output that is already pooled")
    if mask is None:
        return h.mean(axis=1)
    m = np.asarray(mask, dtype=np.float64)
    if m.shape != h.shape[:2]:
        raise DataError("attention mask shape does not match the hidden states",
                        where="model.pooling", value=(m.shape, h.shape[:2]),
                        fix="pass the attention mask fed to the model")
    count = m.sum(axis=1, keepdims=True)
    return (h * m[:, :, None]).sum(axis=1) / np.maximum(count, 1.0)
