"""The report's provenance section: model, data splits, artifacts and range files with their
sha256, packages, host, and the run's stages."""

from __future__ import annotations

from pathlib import PurePath

from quantkit.record.run_record import RunRecord
from quantkit.report.fmt import DASH, num, text

__all__ = ["provenance", "sha_for", "stage_cache", "stages"]

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
            **_data_load(record), "job_rows": _job_rows(record),
            "schema_version": text(record.schema_version),
            "artifact_rows": artifact_rows, "ranges_rows": ranges_rows,
            "packages": packages, "host_rows": host_rows}


def stage_cache(record: RunRecord) -> str:
    """The stage cache's hits and computed entries per stage (``record.stage_cache``)."""
    return "; ".join(f"{name} {c.hits} hit(s), {c.misses} computed"
                     for name, c in record.stage_cache.items())


def stages(record: RunRecord) -> list[dict[str, str]]:
    """One row per stage: its seconds and its other recorded facts."""
    return [{"name": name, "seconds": num(st.seconds, 2),
             "extra": ", ".join(f"{k}={text(v)}" for k, v in st.noted())}
            for name, st in record.stages.items()]


def _data_load(record: RunRecord) -> dict[str, list[str] | list[tuple[str, str]]]:
    """What the data load did (``record.data.info``): counts, truncation, named warnings."""
    info = record.data.info if record.data is not None else None
    if info is None:
        return {"data_load": [], "data_warnings": []}
    rows = [("kind", text(info.kind)), ("label-free", text(info.label_free)),
            ("grouped by", text(info.group_column) if info.grouped else "examples"),
            ("rows read", num(info.rows_read)), ("dropped by value", num(info.dropped_by_value)),
            ("empty texts dropped", num(info.empty_texts_dropped)),
            ("duplicates dropped", num(info.duplicates_dropped)),
            ("duplicate label conflicts", num(info.duplicate_label_conflicts)),
            ("examples in no split", num(info.unused)),
            ("texts truncated at " + text(info.max_length) + " tokens",
             ", ".join(f"{k} {v}" for k, v in info.truncated.items()) or DASH),
            ("split limits", ", ".join(f"{k}: {v}" for k, v in info.limits.items()) or DASH)]
    return {"data_load": rows, "data_warnings": [f"{w.code}: {w.message}" for w in info.warnings]}


def _job_rows(record: RunRecord) -> list[tuple[str, str]]:
    """Where and how the run ran (``record.job``: launcher, worker host, pid, attempt)."""
    job = record.job
    if job is None:
        return []
    return [("launcher", text(job.launcher) if job.launcher else "none (a plain run)"),
            ("worker host", text(job.worker_host)), ("pid", num(job.pid)),
            ("attempt", text(job.attempt)),
            ("a finished record was there before", text(job.earlier_finished))]
