"""Model export leaves no process-wide trace (issue 14 item 6): no HF_HUB_OFFLINE in
os.environ, warning filters and transformers' verbosity restored, even when it fails."""

from __future__ import annotations

import os
import warnings

import pytest

from quantkit.errors import ModelError


def _state():
    import transformers

    tlog = transformers.utils.logging
    return (os.environ.get("HF_HUB_OFFLINE"), list(warnings.filters), tlog.get_verbosity(),
            tlog.is_progress_bar_enabled())


def test_failed_local_export_changes_no_global_state(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from quantkit.models.torch_export import export_encoder

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    (tmp_path / "enc").mkdir()  # a local directory without a model: loading must fail offline
    before = _state()
    with pytest.raises(ModelError, match="could not load the encoder"):
        export_encoder(str(tmp_path / "enc"), tmp_path / "out.onnx", opset=17, pooling="mean")
    assert _state() == before
    assert "HF_HUB_OFFLINE" not in os.environ


def test_quiet_export_is_scoped():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from quantkit.models.torch_export import _quiet_export

    before = _state()
    with _quiet_export(torch, transformers):
        assert transformers.utils.logging.get_verbosity() == transformers.utils.logging.ERROR
        assert warnings.filters != before[1]
    assert _state() == before
