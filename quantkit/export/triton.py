"""Export a run's signed candidate as a Triton Inference Server model repository.

    python -m quantkit.export.triton experiments/bert_int8/<time>            # recommended one
    python -m quantkit.export.triton <run_dir> --candidate int8.mse --platform tensorrt_plan

writes ``<out>/<model_name>/config.pbtxt`` and ``<out>/<model_name>/1/model.onnx`` (platform
``onnxruntime_onnx``) or ``1/model.plan`` (``tensorrt_plan``: the engine a backend=trt run
built for that candidate). Inputs, outputs, data types and dims come from the ONNX model; a
dynamic first dimension on every input and output becomes ``max_batch_size`` (dims then
exclude the batch). The file copied is checked against the sha256 the run recorded, so the
repository serves exactly the artifact that was signed off (a plan: against the engine's
sha256 the run recorded; its TensorRT version, GPU and compute capability go into
``quantkit_export.json``, since a plan runs only there). Every file is written
atomically; :func:`validate_repository` parses ``config.pbtxt`` back and checks it against
the model (the CLI runs it after writing).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from quantkit.errors import ConfigError, ModelError, QuantkitError
from quantkit.fsutil import atomic_path, atomic_write_text, sha256_file
from quantkit.record.candidate import CandidateRecord
from quantkit.record.migrate import load_record
from quantkit.record.run_record import RunRecord

__all__ = ["PLATFORMS", "TensorSpec", "model_io", "config_pbtxt", "parse_pbtxt", "export_candidate",
           "validate_repository", "RepositoryCheck", "main"]

log = logging.getLogger(__name__)

#: Triton platform -> the model file name Triton loads by default.
PLATFORMS = {"onnxruntime_onnx": "model.onnx", "tensorrt_plan": "model.plan"}
DEFAULT_MAX_BATCH = 64

#: ONNX element type -> Triton data type.
_DTYPES = {
    onnx.TensorProto.FLOAT: "TYPE_FP32", onnx.TensorProto.FLOAT16: "TYPE_FP16",
    onnx.TensorProto.BFLOAT16: "TYPE_BF16", onnx.TensorProto.DOUBLE: "TYPE_FP64",
    onnx.TensorProto.INT8: "TYPE_INT8", onnx.TensorProto.INT16: "TYPE_INT16",
    onnx.TensorProto.INT32: "TYPE_INT32", onnx.TensorProto.INT64: "TYPE_INT64",
    onnx.TensorProto.UINT8: "TYPE_UINT8", onnx.TensorProto.UINT16: "TYPE_UINT16",
    onnx.TensorProto.UINT32: "TYPE_UINT32", onnx.TensorProto.UINT64: "TYPE_UINT64",
    onnx.TensorProto.BOOL: "TYPE_BOOL", onnx.TensorProto.STRING: "TYPE_STRING",
}


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output: Triton data type and dims (-1 = variable)."""

    name: str
    data_type: str
    dims: tuple[int, ...]


def _spec(vi: onnx.ValueInfoProto) -> TensorSpec:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or tt.elem_type not in _DTYPES:
        raise ModelError("model input/output has no tensor type Triton can serve", where=vi.name,
                         value=onnx.TensorProto.DataType.Name(tt.elem_type) if tt.elem_type else None,
                         fix="export the model with typed tensor inputs and outputs")
    if not tt.HasField("shape"):
        raise ModelError("model input/output has no shape", where=vi.name, value=None,
                         fix="export the model with shapes (dynamic dims named, e.g. 'batch')")
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
    return TensorSpec(vi.name, _DTYPES[tt.elem_type], dims)


def model_io(model: onnx.ModelProto) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The graph's real inputs (initializers excluded) and outputs as Triton specs."""
    inits = {i.name for i in model.graph.initializer}
    inputs = [_spec(v) for v in model.graph.input if v.name not in inits]
    outputs = [_spec(v) for v in model.graph.output]
    return inputs, outputs


def batch_dynamic(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> bool:
    """True when every input and output has a variable first dimension (the batch)."""
    return all(t.dims and t.dims[0] == -1 for t in [*inputs, *outputs])


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def config_pbtxt(name: str, platform: str, inputs: Sequence[TensorSpec],
                 outputs: Sequence[TensorSpec], *, max_batch_size: int) -> str:
    """Triton ``config.pbtxt`` text. With ``max_batch_size > 0`` dims leave out the batch."""
    if platform not in PLATFORMS:
        raise ConfigError("unknown Triton platform", where="--platform", value=platform,
                          fix=f"use one of {list(PLATFORMS)}")
    skip = 1 if max_batch_size > 0 else 0
    lines = [f"name: {_q(name)}", f"platform: {_q(platform)}", f"max_batch_size: {max_batch_size}"]
    for key, specs in (("input", inputs), ("output", outputs)):
        lines.append(f"{key} [")
        for i, t in enumerate(specs):
            dims = ", ".join(str(d) for d in t.dims[skip:])
            lines += ["  {", f"    name: {_q(t.name)}", f"    data_type: {t.data_type}",
                      f"    dims: [ {dims} ]", "  }" + ("," if i < len(specs) - 1 else "")]
        lines.append("]")
    if max_batch_size > 0:
        lines.append("dynamic_batching { }")
    if platform == "tensorrt_plan":
        lines.append("instance_group [ { kind: KIND_GPU, count: 1 } ]")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- pbtxt parser

_TOKEN = re.compile(r'\s*(?:(#[^\n]*)|("(?:[^"\\]|\\.)*")|([{}\[\]:,])|([^\s{}\[\]:,"#]+))')


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"unexpected character at offset {pos}: {text[pos:pos + 20]!r}")
        pos = m.end()
        if m.group(1):
            continue
        out.append(m.group(2) or m.group(3) or m.group(4))
    return out


def _scalar(tok: str) -> Any:
    if tok.startswith('"'):
        return json.loads(tok) if "\\" in tok else tok[1:-1]
    if re.fullmatch(r"-?\d+", tok):
        return int(tok)
    if re.fullmatch(r"-?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?", tok):
        return float(tok)
    return tok  # an enum value or true/false


def parse_pbtxt(text: str) -> dict[str, list[Any]]:
    """Parse protobuf text format (the subset Triton configs use) into ``{field: [values]}``.

    Every field maps to a list (repeated or not); messages are nested dicts of the same form.
    Raises ValueError on malformed text.
    """
    toks = _tokens(text)
    pos = 0

    def message(end: str | None) -> dict[str, list[Any]]:
        nonlocal pos
        out: dict[str, list[Any]] = {}
        while pos < len(toks) and toks[pos] != end:
            key = toks[pos]
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"expected a field name, got {key!r}")
            pos += 1
            if pos < len(toks) and toks[pos] == ":":
                pos += 1
            out.setdefault(key, []).extend(values())
            if pos < len(toks) and toks[pos] in (",", ";"):
                pos += 1
        if end is not None:
            if pos >= len(toks):
                raise ValueError(f"missing {end!r}")
            pos += 1
        return out

    def value() -> Any:
        nonlocal pos
        if pos >= len(toks):
            raise ValueError("unexpected end of text")
        tok = toks[pos]
        pos += 1
        if tok == "{":
            return message("}")
        if tok in "}[],:":
            raise ValueError(f"unexpected {tok!r}")
        return _scalar(tok)

    def values() -> list[Any]:
        nonlocal pos
        if pos < len(toks) and toks[pos] == "[":
            pos += 1
            vals = []
            while pos < len(toks) and toks[pos] != "]":
                vals.append(value())
                if pos < len(toks) and toks[pos] == ",":
                    pos += 1
            if pos >= len(toks):
                raise ValueError("missing ']'")
            pos += 1
            return vals
        return [value()]

    return message(None)


# ----------------------------------------------------------------------------- validation

@dataclass
class RepositoryCheck:
    """Result of :func:`validate_repository`; truthy when there are no problems."""

    model_dir: Path
    problems: list[str] = field(default_factory=list)
    config: dict[str, list[Any]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return not self.problems


def _one(cfg: Mapping[str, list[Any]], key: str, default: Any = None) -> Any:
    v = cfg.get(key)
    return v[-1] if v else default


def validate_repository(model_dir: str | Path, *, model: onnx.ModelProto | None = None
                        ) -> RepositoryCheck:
    """Structural check of ``<repo>/<model_name>``: config.pbtxt parses, its name is the
    directory's, the platform is known, its model file is present in version 1, and (for
    ONNX, or when ``model`` is given) its inputs/outputs, data types, dims and batch match
    the model."""
    model_dir = Path(model_dir)
    check = RepositoryCheck(model_dir)
    p = check.problems
    cfg_path = model_dir / "config.pbtxt"
    if not cfg_path.is_file():
        p.append(f"{cfg_path} is missing")
        return check
    try:
        cfg = parse_pbtxt(cfg_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        p.append(f"config.pbtxt does not parse: {exc}")
        return check
    check.config = cfg
    if _one(cfg, "name") != model_dir.name:
        p.append(f"name {_one(cfg, 'name')!r} differs from the directory {model_dir.name!r}")
    platform = _one(cfg, "platform")
    if platform not in PLATFORMS:
        p.append(f"platform {platform!r} is not one of {list(PLATFORMS)}")
        return check
    model_file = model_dir / "1" / (_one(cfg, "default_model_filename") or PLATFORMS[platform])
    if not model_file.is_file() or model_file.stat().st_size == 0:
        p.append(f"model file {model_file} is missing or empty")
        return check
    mbs = _one(cfg, "max_batch_size", 0)
    if not isinstance(mbs, int) or mbs < 0:
        p.append(f"max_batch_size {mbs!r} is not a non-negative integer")
        return check
    if model is None and platform == "onnxruntime_onnx":
        try:
            model = onnx.load(str(model_file), load_external_data=False)
        except Exception as exc:  # a corrupt file is a finding, not a crash
            p.append(f"{model_file.name} is not a readable ONNX model ({type(exc).__name__})")
            return check
    if model is None:  # a plan: check against the ONNX it was built from, when recorded
        meta = model_dir / "quantkit_export.json"
        src = json.loads(meta.read_text(encoding="utf-8")).get("onnx_source") if meta.is_file() else None
        if not src or not Path(src).is_file():
            return check  # without tensorrt only the plan's presence can be checked
        model = onnx.load(src, load_external_data=False)
    inputs, outputs = model_io(model)
    if mbs > 0 and not batch_dynamic(inputs, outputs):
        p.append("max_batch_size > 0 but not every model input/output has a dynamic first dim")
    skip = 1 if mbs > 0 else 0
    for key, specs in (("input", inputs), ("output", outputs)):
        entries = [e for e in cfg.get(key, []) if isinstance(e, Mapping)]
        got = {_one(e, "name"): e for e in entries}
        want = {t.name: t for t in specs}
        if set(got) != set(want) or len(entries) != len(specs):
            p.append(f"{key} names {sorted(map(str, got))} differ from the model's {sorted(want)}")
            continue
        for name, t in want.items():
            e = got[name]
            if _one(e, "data_type") != t.data_type:
                p.append(f"{key} {name}: data_type {_one(e, 'data_type')} != model {t.data_type}")
            dims = tuple(e.get("dims", []))
            if dims != t.dims[skip:]:
                p.append(f"{key} {name}: dims {list(dims)} != model {list(t.dims[skip:])}"
                         + (" (batch excluded)" if skip else ""))
    return check


# ----------------------------------------------------------------------------- export

def _load_record(run_dir: Path) -> RunRecord:
    path = run_dir / "record.json"
    if not path.is_file():
        raise ConfigError("not a quantkit run directory (no record.json)", where=str(run_dir),
                          value=None, fix="pass a run directory, e.g. experiments/bert_int8/<time>")
    return load_record(path)


def _model_name(record: RunRecord, candidate: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", f"{record.experiment or 'model'}_{candidate}")


def _source(run_dir: Path, record: RunRecord, candidate: str) -> tuple[Path, str | None]:
    """The candidate's ONNX file and the sha256 the run recorded for it."""
    if candidate == "fp32":
        m = record.model
        return Path(m.path if m is not None else ""), m.sha256 if m is not None else None
    c = record.candidates[candidate]
    name = c.artifact or f"model.{candidate}.onnx"
    return run_dir / name, c.artifact_sha256 or record.artifacts.get(name)


def _signed_plan(cand: CandidateRecord, candidate: str, platform: str) -> tuple[Path, dict]:
    """The engine file a backend=trt run built and signed off for ``candidate``, checked against
    the engine sha256 the run recorded, and the facts it is valid for (TensorRT version, GPU
    name, compute capability): a plan only runs on that GPU and TensorRT version."""
    engine = cand.engine
    plan = Path(engine.engine_path) if engine is not None and engine.engine_path else None
    if engine is None or plan is None or not plan.is_file():
        raise ConfigError(f"no TensorRT engine for {candidate} in this run", where="--platform",
                          value=platform,
                          fix="run the experiment with backend=trt on the target GPU (it "
                              "builds and caches the engine), or export with "
                              "--platform onnxruntime_onnx")
    meta = engine.meta
    want = engine.engine_sha256 or meta.engine_sha256
    if not want:
        raise ModelError("the run recorded no sha256 for the candidate's engine, so the plan "
                         "cannot be checked against what was signed off", where=str(plan),
                         value=candidate, fix="rerun the experiment with backend=trt (this "
                                              "quantkit records the engine's sha256)")
    have = sha256_file(plan)
    if have != want:
        raise ModelError("the engine file differs from the one the run signed off (sha256 "
                         "mismatch; the engine cache entry was rebuilt or changed since)",
                         where=str(plan), value=have[:12],
                         fix="rerun the experiment with backend=trt to sign off the current "
                             "engine, or restore the signed one")
    facts = {"engine_sha256": want, "tensorrt_version": meta.tensorrt_version,
             "gpu_name": meta.gpu_name, "compute_capability": meta.compute_capability,
             "onnx_sha256": meta.onnx_sha256, "trtexec": engine.trtexec}
    if not (facts["tensorrt_version"] and facts["gpu_name"] and facts["compute_capability"]):
        raise ModelError("the run's engine record lacks the TensorRT version or GPU it was built "
                         "for", where=str(plan), value=sorted(meta.to_dict()),
                         fix="rerun the experiment with backend=trt")
    return plan, facts


def export_candidate(run_dir: str | Path, *, candidate: str | None = None,
                     out: str | Path | None = None, platform: str = "onnxruntime_onnx",
                     model_name: str | None = None, max_batch_size: int | None = None) -> Path:
    """Write the Triton model directory for one candidate of a run; returns its path.

    ``candidate`` defaults to the run's recommended (signed) candidate; ``out`` to
    ``<run_dir>/triton``; ``max_batch_size`` to the run's ``backend.trt.max_batch`` (the
    engine profile's maximum) or 64, used only when the model's batch dim is dynamic.
    """
    run_dir = Path(run_dir)
    record = _load_record(run_dir)
    if platform not in PLATFORMS:
        raise ConfigError("unknown Triton platform", where="--platform", value=platform,
                          fix=f"use one of {list(PLATFORMS)}")
    cands = record.candidates
    if candidate is None:
        candidate = record.recommended
        if not candidate:
            raise ConfigError("the run recommends no candidate (none passed its verdict)",
                              where=str(run_dir / "record.json"), value=None,
                              fix="pass --candidate NAME to export one anyway")
    if candidate not in cands:
        raise ConfigError("no such candidate in this run", where="--candidate", value=candidate,
                          fix=f"choose one of {sorted(cands)}")
    src, sha = _source(run_dir, record, candidate)
    if not src.is_file():
        raise ModelError("the candidate's ONNX file is missing", where=str(src), value=candidate,
                         fix="rerun the experiment; exports need the run's artifacts")
    if sha and sha256_file(src) != sha:
        raise ModelError("the candidate's ONNX file differs from the one the run signed off "
                         "(sha256 mismatch)", where=str(src), value=sha[:12],
                         fix="restore the run's artifact or rerun the experiment")
    proto = onnx.load(str(src), load_external_data=False)
    inputs, outputs = model_io(proto)
    if batch_dynamic(inputs, outputs):
        configured = record.configured("backend", "trt", "max_batch")
        mbs = max_batch_size if max_batch_size is not None else int(configured or
                                                                    DEFAULT_MAX_BATCH)
        if mbs <= 0:
            raise ConfigError("max_batch_size must be > 0 for a model with a dynamic batch",
                              where="--max-batch-size", value=mbs, fix="e.g. --max-batch-size 64")
    else:
        mbs = 0
        if max_batch_size:
            log.warning("model %s has no dynamic batch dim on every input/output: "
                        "max_batch_size 0 (dims are full shapes)", candidate)
    plan, engine_facts = None, None
    if platform == "tensorrt_plan":
        plan, engine_facts = _signed_plan(cands[candidate], candidate, platform)
    name = model_name or _model_name(record, candidate)
    model_dir = Path(out) if out is not None else run_dir / "triton"
    model_dir = model_dir / name
    target = model_dir / "1" / PLATFORMS[platform]
    with atomic_path(target) as tmp:
        shutil.copyfile(plan or src, tmp)
    atomic_write_text(model_dir / "config.pbtxt",
                      config_pbtxt(name, platform, inputs, outputs, max_batch_size=mbs))
    verdict = cands[candidate].verdict
    meta = {"run_dir": str(run_dir), "experiment": record.experiment,
            "candidate": candidate, "platform": platform, "source": str(plan or src),
            "onnx_source": str(src),
            "onnx_sha256": sha, "model_file_sha256": sha256_file(target),
            "verdict": verdict.status if verdict is not None else None,
            "recommended": record.recommended == candidate}
    if engine_facts is not None:
        if meta["model_file_sha256"] != engine_facts["engine_sha256"]:
            raise ModelError("the copied plan differs from the engine the run signed off",
                             where=str(target), value=meta["model_file_sha256"][:12],
                             fix="check the disk and export again")
        meta["tensorrt"] = engine_facts
    atomic_write_text(model_dir / "quantkit_export.json", json.dumps(meta, indent=2) + "\n")
    log.info("Triton model %s (%s) written to %s", name, platform, model_dir)
    return model_dir


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m quantkit.export.triton",
        description="Export a run's signed candidate as a Triton Inference Server model "
                    "repository (config.pbtxt + model file) and check it. Exit 0 ok, 1 the "
                    "structural check failed, 2 error.")
    parser.add_argument("run_dir", type=Path, help="a quantkit run directory (with record.json)")
    parser.add_argument("--candidate", help="default: the run's recommended candidate")
    parser.add_argument("--out", type=Path, help="model repository directory (default: <run_dir>/triton)")
    parser.add_argument("--platform", choices=sorted(PLATFORMS), default="onnxruntime_onnx")
    parser.add_argument("--name", help="model name (default: <experiment>_<candidate>)")
    parser.add_argument("--max-batch-size", type=int, default=None,
                        help="default: the run's backend.trt.max_batch, else 64")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        model_dir = export_candidate(args.run_dir, candidate=args.candidate, out=args.out,
                                     platform=args.platform, model_name=args.name,
                                     max_batch_size=args.max_batch_size)
    except QuantkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    check = validate_repository(model_dir)
    for problem in check.problems:
        print(f"problem: {problem}", file=sys.stderr)
    if not check:
        return 1
    print(model_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
