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


def test_export_runs_in_a_child_process_and_leaves_torch_out_of_the_run(tmp_path):
    """torch / transformers are imported by the export's child process only: the run's own
    process does not hold their memory for the rest of the run."""
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=32)
    transformers.BertModel(cfg).save_pretrained(tmp_path / "enc")
    code = ("import sys; from pathlib import Path\n"
            "from quantkit.models.torch_export import export_encoder\n"
            f"export_encoder({str(tmp_path / 'enc')!r}, Path({str(tmp_path / 'out.onnx')!r}), "
            "opset=17, pooling='mean')\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["False", "False"]
    import onnx

    model = onnx.load(str(tmp_path / "out.onnx"))
    assert [o.name for o in model.graph.output] == ["embedding"]
