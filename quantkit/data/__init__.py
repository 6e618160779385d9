"""Data: labeled text from the embedded asset, local files or the hub -> seeded splits."""

from __future__ import annotations

from pathlib import Path

from quantkit.data.splits import Splits, TextSplit, make_splits, to_examples

__all__ = ["Splits", "TextSplit", "load_splits"]


def load_splits(settings, *, cache_dir: Path) -> Splits:
    from quantkit.data import sources

    cfg = settings.data
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
