"""Data: text or images, labeled or label-free, from an embedded asset, local files or the
hub -> seeded, group-disjoint train / calib / dev / test splits (``Splits``).

The run calls :func:`load_splits` once; ``splits.dev`` is for every choice, ``splits.test``
for the sign-off, ``split.groups`` / ``split.group_ids()`` for a cluster bootstrap,
``splits.info`` for the record (counts, limits, named warnings). After building the feeds
it calls :func:`note_truncation` so truncated texts are counted too.
"""

from __future__ import annotations

from pathlib import Path

from quantkit.data.info import DataInfo, DataWarning
from quantkit.data.splits import SPLIT_NAMES, ImageSplit, Splits, TextSplit, make_splits

__all__ = ["DataInfo", "DataWarning", "ImageSplit", "SPLIT_NAMES", "Splits", "TextSplit",
           "load_splits", "note_truncation"]

EMBEDDED = {"text": ("rotten_tomatoes",), "image": ("fashion_mnist",)}


def load_splits(settings, *, cache_dir: Path) -> Splits:
    """The splits ``settings.data`` describes (text or image), seeded by ``settings.seed``."""
    if settings.data.kind == "image":
        splits = load_image_splits(settings, cache_dir=cache_dir)
    else:
        splits = load_text_splits(settings, cache_dir=cache_dir)
    if splits.label_free and settings.model.kind in ("zoo", "hub") \
            and settings.model.name != "minilm_encoder":  # the encoder has no head to fit
        from quantkit.errors import ConfigError

        raise ConfigError(f"model.kind={settings.model.kind} fits a classification head on the "
                          "train split, which needs labels, and the data is label-free",
                          where="data.label_column" if settings.data.label_column is None
                          else "data.path", value=settings.data.label_column or settings.data.path,
                          fix="give labeled data (a label column, or one image subfolder per "
                              "class), or bring a model with its head (model=onnx)")
    return splits


def _text_table(cfg, cache_dir: Path, split: str):
    from quantkit.data import sources

    if cfg.source == "embedded":
        if cfg.name not in EMBEDDED["text"]:
            from quantkit.errors import ConfigError

            raise ConfigError("unknown embedded dataset", where="data.name", value=cfg.name,
                              fix="use data=rotten_tomatoes, data=local or data=hub")
        from quantkit.assets import asset_path

        return sources.load_local(asset_path("rotten_tomatoes", cache_dir), fmt="csv",
                                  cache_dir=str(cache_dir))
    if cfg.source == "local":
        return sources.load_local(cfg.path, fmt=cfg.format, cache_dir=str(cache_dir),
                                  encoding=cfg.encoding)
    return sources.load_hub(cfg.path, split=split, config=cfg.hub_config,
                            cache_dir=str(cache_dir))


def load_text_splits(settings, *, cache_dir: Path) -> Splits:
    from quantkit.data.table import to_examples

    cfg = settings.data
    ex = to_examples(_text_table(cfg, cache_dir, cfg.train_split), cfg)
    test_part = None
    if cfg.source == "hub" and cfg.eval_split:
        tx = to_examples(_text_table(cfg, cache_dir, cfg.eval_split), cfg)
        _merge_counts(ex.info, tx.info)
        groups = tx.groups if cfg.group_column else [f"test:{g}" for g in tx.groups]
        test_part = TextSplit("test", tx.texts, tx.labels, groups)
    full = TextSplit("all", ex.texts, ex.labels, ex.groups)
    _label_free_note(ex.info)
    return make_splits(full, ex.label_names, cfg, seed=settings.seed, info=ex.info,
                       test_part=test_part, calib_fits_data=_no_head(settings))


def _no_head(settings) -> bool:
    """A ready ONNX model (``model=onnx``) fits no head on the train split, so calibration
    may take every example test and dev leave (:func:`quantkit.data.splits.make_splits`)."""
    return settings.model.kind == "onnx"


def _merge_counts(into: DataInfo, other: DataInfo) -> None:
    for key in ("rows_read", "dropped_by_value", "empty_texts_dropped", "duplicates_dropped",
                "duplicate_label_conflicts"):
        setattr(into, key, getattr(into, key) + getattr(other, key))
    for w in other.warnings:
        into.warn(w.code, w.message)


def _label_free_note(info: DataInfo) -> None:
    if info.label_free:
        info.warn("label_free", "the data has no labels (data.label_column=null or an image "
                  "folder without class subfolders): verdicts compare with FP32 only "
                  "(verdict.metric=agreement, kl, abs_logit; cosine / recall_at_k for "
                  "embeddings)")


def load_image_splits(settings, *, cache_dir: Path) -> Splits:
    """Image splits: Fashion-MNIST (embedded: its test images are the test split, train /
    calib / dev come from its train images), a local folder (one subfolder per class, or
    images only: label-free), or a hub dataset with an image column."""
    cfg = settings.data
    n_train = settings.model.head.n_train if settings.model.kind == "zoo" else None
    train_key = "model.head.n_train" if n_train is not None else "data.train.size"
    label_free = cfg.label_column is None
    test_part = None
    ids: list[bytes] = []  # each image's source identity (quantkit.data.identity)
    if cfg.source == "embedded":
        if cfg.name not in EMBEDDED["image"]:
            from quantkit.errors import ConfigError

            raise ConfigError("unknown embedded image dataset", where="data.name", value=cfg.name,
                              fix="use data=fashion_mnist, or data.source=local with an image "
                                  "folder")
        from quantkit.data.images import FASHION_MNIST_CLASSES, FASHION_MNIST_ROOT, load_fashion_mnist

        tr_x, tr_y, te_x, te_y = load_fashion_mnist(cfg.path or FASHION_MNIST_ROOT)
        names = list(cfg.label_names) or list(FASHION_MNIST_CLASSES)
        if label_free:
            tr_y = te_y = None
        test_part = ImageSplit("test", te_x, te_y)
        x, y, rows = tr_x, tr_y, len(tr_x) + len(te_x)
    elif cfg.source == "local":
        from quantkit.data.image_io import load_image_folder

        x, y, classes = load_image_folder(cfg.path, size=cfg.image.size,
                                          mode="L" if cfg.image.channels == 1 else "RGB",
                                          alpha=cfg.image.alpha,
                                          labeled=False if label_free else None,
                                          source_ids=ids)
        names = list(cfg.label_names) or classes
        rows = len(x)
    else:
        from quantkit.data import sources
        from quantkit.data.images import hub_images

        ds = sources.load_hub(cfg.path, split=cfg.train_split, config=cfg.hub_config,
                              cache_dir=str(cache_dir))
        x, y, names = hub_images(ds, cfg, source_ids=ids)
        rows = len(x)
        if cfg.eval_split:
            ev = sources.load_hub(cfg.path, split=cfg.eval_split, config=cfg.hub_config,
                                  cache_dir=str(cache_dir))
            test_ids: list[bytes] = []
            ex, ey, _ = hub_images(ev, cfg, source_ids=test_ids)
            test_part = ImageSplit("test", ex, ey, source_ids=_ids(test_ids, ex))
            rows += len(ex)
    info = DataInfo(kind="image", label_free=y is None, rows_read=rows)
    _label_free_note(info)
    return make_splits(ImageSplit("all", x, y, source_ids=_ids(ids, x)), names, cfg,
                       seed=settings.seed, info=info,
                       test_part=test_part, train_size=n_train, train_key=train_key,
                       calib_fits_data=_no_head(settings))


def _ids(ids: list[bytes], images) -> list[bytes] | None:
    """The source identities a loader gave, one per image; None (the pixels at source size
    are the identity) where it gave none."""
    return list(ids) if ids and len(ids) == len(images) else None


def note_truncation(splits: Splits, feeds) -> dict[str, int]:
    """Count, per split, the texts ``feeds`` truncate at ``data.max_length`` tokens; kept
    in ``splits.info.truncated`` (warning ``texts_truncated``). Images: nothing to count."""
    counter = getattr(feeds, "truncated", None)
    if counter is None:
        return {}
    counts = {name: int(counter(split).sum()) for name, split in splits.named().items()}
    splits.info.truncated = counts
    splits.info.max_length = feeds.encoder.max_length
    total = sum(counts.values())
    if total:
        splits.info.warn("texts_truncated", f"{total} texts are longer than data.max_length="
                         f"{feeds.encoder.max_length} tokens and were truncated ("
                         + ", ".join(f"{k} {v}" for k, v in counts.items() if v) + ")")
    return counts
