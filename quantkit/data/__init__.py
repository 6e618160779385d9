"""Data: labeled text or images from an embedded asset, local files or the hub -> seeded splits."""

from __future__ import annotations

from pathlib import Path

from quantkit.data.splits import ImageSplit, Splits, TextSplit, make_splits, to_examples

__all__ = ["ImageSplit", "Splits", "TextSplit", "load_splits"]

EMBEDDED = {"text": ("rotten_tomatoes",), "image": ("fashion_mnist",)}


def load_splits(settings, *, cache_dir: Path) -> Splits:
    from quantkit.data import sources

    cfg = settings.data
    if cfg.kind == "image":
        return load_image_splits(settings, cache_dir=cache_dir)
    eval_part = None
    if cfg.source == "embedded":
        if cfg.name != "rotten_tomatoes":
            from quantkit.errors import ConfigError

            raise ConfigError("unknown embedded dataset", where="data.name", value=cfg.name,
                              fix="use data=rotten_tomatoes, data=local or data=hub")
        from quantkit.assets import asset_path

        ds = sources.load_local(asset_path("rotten_tomatoes", cache_dir), fmt="csv",
                                cache_dir=str(cache_dir))
    elif cfg.source == "local":
        ds = sources.load_local(cfg.path, fmt=cfg.format, cache_dir=str(cache_dir))
    else:
        ds = sources.load_hub(cfg.path, split=cfg.train_split, config=cfg.hub_config,
                              cache_dir=str(cache_dir))
        if cfg.eval_split:
            ev = sources.load_hub(cfg.path, split=cfg.eval_split, config=cfg.hub_config,
                                  cache_dir=str(cache_dir))
            t, y, g, _ = to_examples(ev, cfg)
            eval_part = (t, y, g)
    texts, labels, groups, names = to_examples(ds, cfg)
    return make_splits(texts, labels, groups, names, cfg, seed=settings.seed, eval_part=eval_part)


def load_image_splits(settings, *, cache_dir: Path) -> Splits:
    """Image splits: Fashion-MNIST (embedded: train -> train/calib, test -> eval), a local
    folder with one subfolder per class, or a hub dataset with an image column."""
    from quantkit.data.splits import make_image_splits

    cfg = settings.data
    n_train = settings.model.head.n_train if settings.model.kind == "zoo" else None
    if cfg.source == "embedded":
        if cfg.name not in EMBEDDED["image"]:
            from quantkit.errors import ConfigError

            raise ConfigError("unknown embedded image dataset", where="data.name", value=cfg.name,
                              fix="use data=fashion_mnist, or data.source=local with an image "
                                  "folder")
        from quantkit.data.images import FASHION_MNIST_CLASSES, FASHION_MNIST_ROOT, load_fashion_mnist

        tr_x, tr_y, te_x, te_y = load_fashion_mnist(cfg.path or FASHION_MNIST_ROOT)
        names = list(cfg.label_names) or list(FASHION_MNIST_CLASSES)
        return make_image_splits(tr_x, tr_y, names, cfg, seed=settings.seed,
                                 eval_part=(te_x, te_y), n_train=n_train)
    if cfg.source == "local":
        from quantkit.data.images import load_image_folder

        x, y, classes = load_image_folder(cfg.path, size=cfg.image.size,
                                          mode="L" if cfg.image.channels == 1 else "RGB")
        names = list(cfg.label_names) or classes
        return make_image_splits(x, y, names, cfg, seed=settings.seed, n_train=n_train)
    from quantkit.data import sources
    from quantkit.data.images import hub_images

    ds = sources.load_hub(cfg.path, split=cfg.train_split, config=cfg.hub_config,
                          cache_dir=str(cache_dir))
    x, y, names = hub_images(ds, cfg)
    eval_part = None
    if cfg.eval_split:
        ev = sources.load_hub(cfg.path, split=cfg.eval_split, config=cfg.hub_config,
                              cache_dir=str(cache_dir))
        ex, ey, _ = hub_images(ev, cfg)
        eval_part = (ex, ey)
    return make_image_splits(x, y, names, cfg, seed=settings.seed, eval_part=eval_part,
                             n_train=n_train)
