"""Load a labeled table with Hugging Face ``datasets``: embedded asset, local files or the hub."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from quantkit.errors import DataError, first_line

log = logging.getLogger(__name__)

_FORMATS = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json",
            ".parquet": "parquet", ".bz2": "csv", ".gz": "csv"}


def _format_of(path: Path, declared: str | None) -> str:
    if declared:
        return declared
    suffix = path.suffix.lower()
    if suffix in (".bz2", ".gz"):
        suffix = Path(path.stem).suffix.lower() or ".csv"
    fmt = _FORMATS.get(suffix)
    if fmt is None:
        raise DataError("cannot tell the data file's format from its suffix", where="data.path",
                        value=str(path), fix="set data.format=csv|json|parquet")
    return fmt


def _decode_error(exc: BaseException) -> UnicodeDecodeError | None:
    """The UnicodeDecodeError behind ``exc`` (datasets wraps it in its own errors)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, UnicodeDecodeError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


@contextlib.contextmanager
def _quiet_datasets_errors():
    """datasets logs a read failure to stderr itself before raising it; the DataError we
    raise says it on one line, so mute that logger (restored afterwards)."""
    logger = logging.getLogger("datasets")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _first_undecodable_line(files: list[str], encoding: str) -> str | None:
    """'line 2 of x.csv has byte 0xe9': the first line that does not decode (streamed)."""
    for name in files:
        if name.endswith((".bz2", ".gz", ".xz", ".zip", ".zst")):
            return None  # compressed: the raw lines say nothing
        try:
            with open(name, "rb") as f:
                for no, line in enumerate(f, start=1):
                    try:
                        line.decode(encoding)
                    except UnicodeDecodeError as err:
                        return (f"line {no} of {Path(name).name} has byte "
                                f"0x{line[err.start:err.start + 1].hex()}")
        except OSError:
            return None
    return None


def load_local(path: str | Path, *, fmt: str | None = None, cache_dir: str | None = None,
               encoding: str | None = None):
    """A ``datasets.Dataset`` from a local csv / json(l) / parquet file (or a directory of them).

    ``encoding`` (csv / json): the files' text encoding, default utf-8. A file that is not
    valid in it fails with one line naming the byte, its position and the fix.
    """
    import datasets

    p = Path(path).expanduser()
    if not p.exists():
        raise DataError("dataset file not found", where="data.path", value=str(p),
                        fix="point data.path at an existing csv/json/parquet file")
    files = sorted(str(f) for f in p.iterdir() if f.is_file()) if p.is_dir() else [str(p)]
    if not files:
        raise DataError("dataset directory is empty", where="data.path", value=str(p),
                        fix="put csv/json/parquet files into it")
    kind = _format_of(Path(files[0]), fmt)
    kwargs = {"sep": "\t"} if files[0].endswith(".tsv") else {}
    if encoding and kind in ("csv", "json"):
        kwargs["encoding"] = encoding
    datasets.disable_progress_bars()
    try:
        with _quiet_datasets_errors():
            ds = datasets.load_dataset(kind, data_files=files, split="train",
                                       cache_dir=str(Path(cache_dir) / "hf_datasets") if cache_dir else None,
                                       **kwargs)
    except Exception as exc:  # datasets raises many types for unreadable files
        bad = _decode_error(exc)
        if bad is not None:
            where_bad = _first_undecodable_line(files, bad.encoding)
            raise DataError(f"the file is not valid {bad.encoding} text ({where_bad or bad.reason})",
                            where="data.path", value=str(p),
                            fix="re-save it as UTF-8 (e.g. iconv -f latin1 -t utf-8 in.csv > "
                                "out.csv) or set data.encoding=<its encoding, e.g. latin-1>"
                            ) from exc
        raise DataError(f"could not read the dataset file: {first_line(exc)}",
                        where="data.path", value=str(p),
                        fix=f"check that it is valid {kind} (or set data.format)") from exc
    log.info("loaded %d rows from %s (%s)", len(ds), p, kind)
    return ds


def load_hub(name: str, *, split: str, config: str | None = None, cache_dir: str | None = None):
    """A split of a Hugging Face hub dataset (needs network unless already cached)."""
    import datasets

    try:
        return datasets.load_dataset(name, config, split=split,
                                     cache_dir=str(Path(cache_dir) / "hf_datasets") if cache_dir else None)
    except Exception as exc:
        raise DataError(f"could not load hub dataset: {first_line(exc)}",
                        where="data.path", value=f"{name}:{split}",
                        fix="check the dataset id and split, and network access "
                            "(or download it and use data=local)") from exc
