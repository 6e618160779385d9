"""SmoothQuant scale migration: helps an outlier channel; FP32 function unchanged."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from ptq_graphs import int8_outputs, ln_linear, nmse, run
from quantkit.errors import ConfigError
from quantkit.ptq.capture import channel_stats
from quantkit.ptq.smoothquant import smooth_activations, smoothable_inputs


def _feeds(rng, k=32, n=6):
    return [{"x": rng.standard_normal((4, 8, k)).astype(np.float32)} for _ in range(n)]


def _smooth(model, feeds, **kw):
    groups = smoothable_inputs(model)
    stats = channel_stats(model, feeds, {t: -1 for t in groups})
    return smooth_activations(model, stats.absmax, **kw)


@pytest.mark.parametrize("residual", [False, True])
def test_smoothing_an_outlier_channel_reduces_int8_error(residual):
    rng = np.random.default_rng(0)
    model = ln_linear(rng, residual=residual)
    feeds = _feeds(rng)
    ref, before, _ = int8_outputs(model, feeds)
    smoothed, rec = _smooth(model, feeds, alpha=0.5)
    ref2, after, _ = int8_outputs(smoothed, feeds)
    np.testing.assert_allclose(ref2, ref, rtol=1e-4, atol=1e-4)
    assert nmse(ref, after) < 0.5 * nmse(ref, before)
    assert "h" in rec.changes
    # LN output read by the MatMul only: folded into gamma/beta; with a residual reader: a Mul
    ops = [n.op_type for n in smoothed.graph.node]
    assert ops.count("Mul") == (1 if residual else 0)
    assert ("LayerNormalization" in rec.changes["h"]) is (not residual)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.9])
def test_fp32_function_unchanged(residual, alpha):
    rng = np.random.default_rng(1)
    model = ln_linear(rng, residual=residual)
    feeds = _feeds(rng)
    smoothed, _ = _smooth(model, feeds, alpha=alpha)
    onnx.checker.check_model(smoothed, full_check=True)
    np.testing.assert_allclose(run(smoothed, feeds), run(model, feeds), rtol=1e-5, atol=1e-5)
    assert smoothed is not model and model.graph.initializer[0].name == "gamma"


def test_outlier_ratio_threshold_skips_flat_tensors_and_alpha_is_checked():
    rng = np.random.default_rng(2)
    model = ln_linear(rng, outlier=1.0)
    feeds = _feeds(rng)
    _, rec = _smooth(model, feeds, min_outlier_ratio=20.0)
    assert not rec.changes and "outlier ratio" in rec.skipped["h"]
    with pytest.raises(ConfigError, match="alpha"):
        _smooth(model, feeds, alpha=1.5)


def test_real_minilm_fp32_outputs_unchanged(minilm_model):
    """The prepared MiniLM + head (bert_int8's model) smoothed on every MatMul input: same
    logits."""
    model = onnx.load(str(minilm_model))
    rng = np.random.default_rng(0)
    names = {i.name for i in model.graph.input}
    feeds = []
    for _ in range(2):
        ids = rng.integers(1000, 20000, (4, 24)).astype(np.int64)
        mask = np.ones_like(ids)
        mask[1, 18:] = 0
        f = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            f["token_type_ids"] = np.zeros_like(ids)
        feeds.append(f)
    out = model.graph.output[0].name
    smoothed, rec = _smooth(model, feeds, alpha=0.5)
    assert len(rec.changes) == 25  # 4 MatMul inputs per layer x 6 layers + the head Gemm
    ref, got = run(model, feeds, out), run(smoothed, feeds, out)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    assert np.array_equal(ref.argmax(1), got.argmax(1))
