"""The report's provenance section: model, data splits, artifacts and range files with their
sha256, packages, host, and the run's stages."""

from __future__ import annotations

from pathlib import PurePath

from quantkit.record.run_record import RunRecord
from quantkit.report.fmt import DASH, num, text

__all__ = ["provenance", "sha_for", "stages"]

NOT_RECORDED = "not recorded"


#: The model facts shown as rows, in this order.
MODEL_FACTS = ("source", "path", "sha256", "opset", "input_names", "output_name", "tokenizer")


def sha_for(record: RunRecord, path: str | None) -> str:
    """The sha256 the record lists for ``path`` (by run-relative path or file name)."""
    arts = record.artifacts
    if not path:
        return NOT_RECORDED
    p = PurePath(str(path))
    keys = [str(path), p.name]
    if record.run_dir:
        try:
            keys.append(str(p.relative_to(record.run_dir)))
        except ValueError:
            pass
    for key in keys:
        if key in arts:
            return arts[key]
    return NOT_RECORDED


def provenance(record: RunRecord) -> dict[str, object]:
    """Rows of the provenance tables (model, data, artifacts, ranges, packages, host)."""
    model, data = record.model, record.data
    model_rows = [(k, text(getattr(model, k))) for k in MODEL_FACTS] if model is not None else []
    data_rows = [{"split": s, "size": num(size), "sha256": sha or NOT_RECORDED}
                 for s, size, sha in (data.splits() if data is not None else [])]
    artifact_rows = []
    for name, c in record.candidates.items():
        art = c.artifact
        sha = c.artifact_sha256
        if not sha and art:
            sha = sha_for(record, art)
            if sha == NOT_RECORDED and model is not None and model.path and \
                    PurePath(str(art)).name == PurePath(str(model.path)).name:
                sha = model.sha256 or sha
        artifact_rows.append({"candidate": name, "file": text(art), "sha256": sha or NOT_RECORDED,
                              "numerics": c.numerics or DASH})
    files = record.calibration.files if record.calibration is not None else {}
    ranges_rows = [{"method": m, "path": str(p), "sha256": sha_for(record, p)}
                   for m, p in files.items()]
    packages = [(k, v if v else "not installed") for k, v in record.packages.items()]
    host_rows = [(k, text(v) if v is not None else "none detected" if k == "gpu" else DASH)
                 for k, v in record.host.items()]
    return {"model_rows": model_rows, "data_name": text(data.name if data else None),
            "data_source": text(data.source if data else None), "data_rows": data_rows,
            "artifact_rows": artifact_rows, "ranges_rows": ranges_rows,
            "packages": packages, "host_rows": host_rows}


def stages(record: RunRecord) -> list[dict[str, str]]:
    """One row per stage: its seconds and its other recorded facts."""
    return [{"name": name, "seconds": num(st.seconds, 2),
             "extra": ", ".join(f"{k}={text(v)}" for k, v in st.noted())}
            for name, st in record.stages.items()]
