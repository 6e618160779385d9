"""Full-INT8 accuracy and agreement with FP32: quantkit's default vs its peers, per model.

For each model (``--model bert_int8,mobilenet_int8`` or ``--model all``), on the same model,
the same calibration samples and the same test split, in one process:

- **quantkit**: what a run of the experiment builds (its ``ptq`` steps included) for every
  calibrator, the one a run picks on dev (``run.signoff.family_members``: highest planned
  power of the sign-off's rule on dev evidence, then the best decision metric on dev)
  reported on test: INT8 Q/DQ + FP16 remainder, FP16 emulated, exact Q/DQ.
  Stage-cache keys are the run's, so after a run of the experiment its stages are read back.
- **ORT**: ``onnxruntime.quantization.quantize_static`` in TensorRT style: QDQ, signed
  symmetric INT8 activations and weights, per-channel weights, the model's weighted-op scope
  (MatMul/Gemm for MiniLM, Conv/Gemm for MobileNetV2), FP32 remainder; MinMax,
  Percentile 99.99 (2048 bins) and Entropy (128 bins: ``quantize_static`` passes no bin
  count to its entropy calibrator).
- **ModelOpt**: NVIDIA ModelOpt ONNX PTQ (``modelopt.onnx.quantization.quantize``, the API
  behind ``python -m modelopt.onnx.quantization``), max and entropy calibration, fp16 and
  fp32 high precision, same op scope, calibration on the CPU execution provider.
- **FP8 E4M3** (``--fp8``, the default; ``--no-fp8`` leaves it out): the same experiment with
  ``gpu.sm=90 precision.formats=[int8,fp8]`` (an H200): quantkit's ``fp8.<calibrator>``
  candidates, the one a run picks on dev reported on test, against ModelOpt's
  ``quantize_mode="fp8"`` (max calibration, ModelOpt's FP8 method; fp16 and fp32 high
  precision; per-channel FP8 weights, per-tensor activations), both evaluated with the same
  exact Q/DQ numerics (ONNX Runtime CPU's float8 QuantizeLinear / DequantizeLinear, bit for
  bit the numpy reference ``quantkit/qdq/fp8.py``). It runs in
  its own virtual environment (``--modelopt-venv``, default ``$QUANTKIT_MODELOPT_VENV`` or
  ``<cache>/peers/venv-modelopt`` under quantkit's cache dir, created on first use with torch 2.13.0 CPU first: it pulls
  onnxruntime-gpu and pins onnx 1.21) on a copy of the model (it rewrites its input). Where
  pip cannot find the CPU build of torch (no index or wheel folder offering it, e.g. under
  ``env -i``), the benchmark says in one line what to set and leaves ModelOpt out of the
  tables (its last-line fields read ``na``). A configuration that fails prints ``na`` with
  ModelOpt's error, never a number.

The peers calibrate on the run's calibration split (text padded to ``data.max_length``: both
stack their batches). Every artifact is evaluated by quantkit's own evaluation stage
(``run.evaluation.evaluate``): the same ONNX Runtime CPU session settings (``backend.*``,
``WeightBiasQuantization`` disabled) and exact Q/DQ numerics (``session.disable_quant_qdq``).
Peer artifacts run as they are (ModelOpt's fp16 graphs on ORT CPU's FP16 handling).
Agreement = top-1 agreement with FP32 on the same test examples.

A detector (``--model layout_int8``) is compared as a user meets it: quantkit's run of the
experiment (its recommended candidate as signed off on test, and how many weighted layers it
keeps out of INT8) against ORT's and ModelOpt's full INT8 (same calibration pages, same op
scope), each evaluated on the same test pages: mAP@[.5:.95] against the labels and mAP vs
FP32 (FP32's detections as ground truth). Its line::

    model=layout_int8 map_fp32=.. map_quantkit=.. map_modelopt=<..|na> map_ort=..
    map_vs_fp32_quantkit=.. fp16_layers_quantkit=.. map_vs_fp32_modelopt=<..|na>
    map_vs_fp32_ort=..

Each model prints a table, then the run ends with one line per model, the last model's last:

    model=<m> acc_fp32=.. acc_quantkit=.. agree_quantkit=.. acc_ort=.. agree_ort=..
    acc_modelopt=<..|na> agree_modelopt=<..|na> acc_quantkit_fp8=.. agree_quantkit_fp8=..
    acc_modelopt_fp8=<..|na> agree_modelopt_fp8=<..|na>

(the ``_fp8`` fields only with ``--fp8``; ``acc_quantkit`` / ``acc_modelopt`` stay INT8's)

``acc_<peer>`` / ``agree_<peer>`` are each the best over that peer's configurations on test
(possibly from different configurations: in the peers' favour); quantkit's are its one
default chosen on dev.

Usage (run under ``flock /tmp/qk-heavy.lock``):

    python benchmarks/accuracy_vs_peers.py --model all [--limit N]   # N first dev/test examples
    python benchmarks/accuracy_vs_peers.py --smoke   # bert_int8, 16 examples, INT8 and FP8

``--smoke``: bert_int8 on 16 dev / test examples and 16 calibration samples, quantkit with
``ptq.recipe=none precision.fp8_weight_rounding=nearest`` (:data:`SMOKE`), ORT's MinMax
only, every ModelOpt configuration; ModelOpt's rows are ``na`` when its venv does not exist
(smoke mode never creates it).

Most of a run's time is the peers' calibration (256 samples each: ORT three times, ModelOpt
four times in a fresh process), and its peak RSS is ORT's: its histogram calibrators
(percentile, entropy) keep every calibration batch's activations of every calibrated
tensor. Minutes and GB as measured: benchmarks/results/accuracy_vs_peers.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402  (also puts the repository root on sys.path)

MODELS = ("bert_int8", "mobilenet_int8", "layout_int8")
#: the detector experiments: mAP in place of accuracy, mAP vs FP32 in place of agreement
DETECTORS = ("layout_int8",)
#: --smoke: the smallest real run (with --limit 16): the ptq and FP8-rounding stages run, with
#: their plain choices (the recipe trials and the rounding scores are the runs' own tests')
SMOKE = ("data.calib.num_samples=16", "calibrator.batch_size=8", "ptq.recipe=none",
         "precision.fp8_weight_rounding=nearest")
#: the weighted-op scope of each data kind (quantkit's scope for the experiment)
SCOPES = {"text": ("MatMul", "Gemm"), "image": ("Conv", "Gemm"), "detection": ("Conv", "Gemm")}
#: ONNX Runtime quantize_static's calibration methods (--smoke: MinMax only)
ORT_METHODS = ("minmax", "percentile", "entropy")


@dataclasses.dataclass(frozen=True)
class Row:
    """One measured configuration: accuracy and agreement with FP32 on test (None: not run)."""

    tool: str
    configuration: str
    accuracy: float | None
    agreement: float | None
    note: str = ""
    chosen: bool = False  #: quantkit's default: the candidate a run picks on dev
    fmt: str = "int8"  #: the quantized format (int8 | fp8; fp32 for the reference)


@dataclasses.dataclass(frozen=True)
class ModelComparison:
    """Every configuration of one model, and its summary line."""

    model: str
    header: str
    rows: list[Row]
    fp8: bool = False  #: the FP8 rows were measured (their fields go into the line)
    #: a detector's: quantkit's recommended candidate's FP16 layers (weighted layers not INT8)
    fp16_layers: int | None = None

    def best(self, tool: str, fmt: str = "int8") -> tuple[float | None, float | None]:
        """(best accuracy, best agreement) over ``tool``'s measured ``fmt`` configurations."""
        rows = [r for r in self.rows if r.tool == tool and r.fmt == fmt
                and r.accuracy is not None]
        if not rows:
            return None, None
        return max(r.accuracy for r in rows), max(r.agreement for r in rows)

    def chosen(self, fmt: str) -> tuple[float | None, float | None]:
        """quantkit's candidate of ``fmt`` chosen on dev: (accuracy, agreement) on test."""
        return next(((r.accuracy, r.agreement) for r in self.rows
                     if r.tool == "quantkit" and r.chosen and r.fmt == fmt), (None, None))

    def line(self) -> str:
        def f(v):
            return "na" if v is None else f"{v:.4f}"

        fp32 = next((r.accuracy for r in self.rows if r.tool == "fp32"), None)
        if self.model in DETECTORS:  # accuracy: mAP@[.5:.95]; agreement: mAP vs FP32
            aq, gq = self.chosen("int8")
            (ao, go), (am, gm) = self.best("ort"), self.best("modelopt")
            return (f"model={self.model} map_fp32={f(fp32)} map_quantkit={f(aq)} "
                    f"map_modelopt={f(am)} map_ort={f(ao)} map_vs_fp32_quantkit={f(gq)} "
                    f"fp16_layers_quantkit={'na' if self.fp16_layers is None else self.fp16_layers}"
                    f" map_vs_fp32_modelopt={f(gm)} map_vs_fp32_ort={f(go)}")
        aq, gq = self.chosen("int8")
        ao, go = self.best("ort")
        am, gm = self.best("modelopt")
        out = (f"model={self.model} acc_fp32={f(fp32)} acc_quantkit={f(aq)} "
               f"agree_quantkit={f(gq)} acc_ort={f(ao)} agree_ort={f(go)} "
               f"acc_modelopt={f(am)} agree_modelopt={f(gm)}")
        if self.fp8:
            aq8, gq8 = self.chosen("fp8")
            am8, gm8 = self.best("modelopt", "fp8")
            out += (f" acc_quantkit_fp8={f(aq8)} agree_quantkit_fp8={f(gq8)} "
                    f"acc_modelopt_fp8={f(am8)} agree_modelopt_fp8={f(gm8)}")
        return out


def parse_models(value: str) -> list[str]:
    """``all`` or a comma list of experiment names -> the experiments, in order."""
    names = list(MODELS) if value == "all" else [m.strip() for m in value.split(",") if m.strip()]
    bad = [m for m in names if m not in MODELS]
    if bad or not names:
        raise SystemExit(f"--model: {bad or value!r} not among {', '.join(MODELS)} (or 'all')")
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", "--eval-limit", dest="limit", type=int, default=None,
                    help="first N examples of dev and of test (documented partial run)")
    ap.add_argument("--model", default="bert_int8",
                    help="comma list of experiments (bert_int8, mobilenet_int8, layout_int8) "
                         "or 'all'")
    ap.add_argument("--modelopt-venv", default=None,
                    help="virtual environment with nvidia-modelopt[onnx] (torch CPU first); "
                         "default <quantkit cache>/peers/venv-modelopt, created on first use")
    ap.add_argument("--all-calibrators", action="store_true",
                    help="also evaluate quantkit's non-chosen calibrators on test (context)")
    ap.add_argument("--fp8", action=argparse.BooleanOptionalAction, default=True,
                    help="also compare FP8 E4M3 (gpu.sm=90): quantkit's fp8.<calibrator> vs "
                         "ModelOpt quantize_mode=fp8 (default on; --no-fp8: INT8 only)")
    _common.bench_args(ap, "bert_int8 on 16 dev / test examples and 16 calibration samples, "
                           "INT8 and FP8, ptq.recipe=none, ORT MinMax only; ModelOpt only "
                           "where its venv exists")
    a = ap.parse_args([f"--model={x.split('=', 1)[1]}" if x.startswith("model=") else x
                       for x in sys.argv[1:]])
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    models = parse_models(a.model)
    extra: tuple[str, ...] = ()
    if a.smoke:
        a.limit, extra = 16, SMOKE
    t0 = time.perf_counter()
    venv = Path(a.modelopt_venv) if a.modelopt_venv else default_modelopt_venv()
    venv_python, venv_note = ensure_modelopt_venv(venv, create=not a.smoke)
    if venv_note:
        print(f"ModelOpt not measured: {venv_note}", flush=True)
    lines = []
    for m in models:
        t = time.perf_counter()
        if m in DETECTORS:
            comparison = compare_detector(m, venv_python, venv_note, overrides=extra)
        else:
            comparison = compare_model(m, a.limit, venv_python, venv_note,
                                       all_calibrators=a.all_calibrators, fp8=a.fp8,
                                       overrides=extra,
                                       ort_methods=ORT_METHODS[:1] if a.smoke else ORT_METHODS)
        print_table(comparison)
        print(f"({m}: {time.perf_counter() - t:.0f} s)", flush=True)
        lines.append(comparison.line())
    print(f"total {time.perf_counter() - t0:.0f} s")
    for line in lines:
        print(line, flush=True)
    return 0


def compare_model(experiment: str, limit: int | None, venv_python: Path | None,
                  venv_note: str | None, *, all_calibrators: bool = False,
                  fp8: bool = False, overrides: tuple[str, ...] = (),
                  ort_methods: tuple[str, ...] = ORT_METHODS) -> ModelComparison:
    """Measure quantkit's default, ORT and ModelOpt on ``experiment``'s model and data
    (``fp8``: on an H200 target, FP8 candidates of quantkit and ModelOpt too; ``overrides``:
    more of the experiment's, e.g. a smaller calibration split; ``ort_methods``: the
    calibration methods of ``quantize_static`` measured)."""

    from quantkit.run.stages.ptq import ptq as apply_ptq
    from quantkit.run.stages.artifacts import artifacts as build_artifacts
    from quantkit.run.stages.calibration import calibration as calibrate
    from quantkit.run.stages.fp16_range_check import fp16_range_check as check_fp16_range
    from quantkit.run.evaluation import evaluate_model as evaluate, evaluate_artifact
    from quantkit.run.stages.fp32_reference import fp32_reference as evaluate_reference
    from quantkit.run.stages.signoff import family_members
    from quantkit.app import prepared_context
    from quantkit.run.scope import quant_scope

    overrides = [*overrides, *([f"data.test.limit={limit}", f"data.dev.limit={limit}"]
                               if limit else [])]
    if fp8:  # an FP8 GPU: the run builds fp8.<calibrator> beside int8.<calibrator>
        overrides += ["gpu.sm=90", "precision.formats=[int8,fp8]"]
    s = _common.settings_for(experiment, *overrides)
    text = s.data.kind == "text"
    scope_ops = SCOPES[s.data.kind]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix=f"peers-{experiment}-") as tmp:
        tmp = Path(tmp)
        # the run's own stages (ptq included) and stage cache
        ctx = prepared_context(s, tmp / "run")
        splits = ctx.splits
        ref_dev, ref = evaluate_reference(ctx, "dev"), evaluate_reference(ctx, "test")
        ref_pred = ref.logits.argmax(1)
        rows.append(Row("fp32", "-", ref.metric("accuracy"), 1.0, fmt="fp32"))

        def measured(ev) -> tuple[float, float]:
            return ev.metric("accuracy"), float((ev.logits.argmax(1) == ref_pred).mean())

        overflow = check_fp16_range(ctx)
        sources = apply_ptq(ctx, quant_scope(ctx), overflow, ref_dev)
        cal = calibrate(ctx, sources)
        arts = {n: art for n, art in build_artifacts(ctx, cal, overflow, sources).items()
                if n.startswith(("int8.", "fp8."))}
        dev = {n: evaluate_artifact(ctx, art, ref_dev) for n, art in arts.items()}
        members = family_members(ctx, dev, None)
        chosen = {next(n for n in members if n.startswith("int8.")),
                  *(n for n in members if n.startswith("fp8."))}
        # a run tests only its chosen INT8 (and FP8) on test (--all-calibrators: the others)
        for n, art in arts.items():
            conf = (f"{n} {'(chosen on dev)' if n in chosen else ''} dev acc "
                    f"{dev[n].metric('accuracy'):.4f}, FP16 rest emulated")
            fmt = n.split(".")[0]
            if n in chosen or all_calibrators:  # accuracy only: no paired test, no look
                ev = evaluate(ctx, art.name, art.path, split="test",
                              plan_int8=art.plan.int8_nodes(),
                              plan_fp8=art.plan.nodes_with("fp8") or None, emulated=art.emulated,
                              artifact_sha=art.sha256)
                rows.append(Row("quantkit", conf, *measured(ev), chosen=n in chosen, fmt=fmt))
            else:
                rows.append(Row("quantkit", conf, None, None, "not chosen: not run on test",
                                fmt=fmt))

        # ONNX Runtime's ClipQuantFusion ("ClipQuantRewrite") fails session creation on a
        # Clip read by a float8 QuantizeLinear ("GetQConstantLowerUpper ... Unexpected data",
        # ModelOpt's FP8 MobileNetV2): FP8 peers run with that rewrite off, which leaves the
        # graph's math as written (a disabled optimizer never changes what a graph computes)
        ctx8 = with_disabled_optimizers(ctx, "ClipQuantRewrite")

        def evaluate_peer(path: Path, name: str, fmt: str = "int8") -> tuple[float, float]:
            # accuracy and agreement from the logits: no paired test on test, so no look in
            # the test ledger (quantkit.run.evaluation.evaluate_model refuses one without it)
            return measured(evaluate(ctx8 if fmt == "fp8" else ctx, name, path, split="test"))

        kw = {"pad_to": s.data.max_length} if text else {}
        feeds = [f for _, f in ctx.feeds.batches(splits.calib, s.calibrator.batch_size, **kw)]
        configs = [("int8", m, hp) for m in ("max", "entropy") for hp in ("fp16", "fp32")]
        configs += [("fp8", "max", hp) for hp in ("fp16", "fp32")] if fp8 else []
        rows += peer_rows(ctx.model.path, feeds, tmp, evaluate_peer, scope_ops=scope_ops,
                          ort_methods=ort_methods, configs=configs, venv_python=venv_python,
                          venv_note=venv_note)
    header = (f"{experiment}: test examples {len(splits.test)}"
              f"{f' (--limit {limit})' if limit else ''}; dev examples {len(splits.dev)}; "
              f"calibration samples {len(splits.calib)}; exact Q/DQ numerics "
              f"({ctx.qdq_mode()}); disabled ORT optimizers: "
              f"{','.join(s.backend.disabled_optimizers) or 'none'}")
    return ModelComparison(experiment, header, rows, fp8=fp8)


def compare_detector(experiment: str, venv_python: Path | None, venv_note: str | None, *,
                     overrides: tuple[str, ...] = ()) -> ModelComparison:
    """A detector experiment: quantkit's run as a user runs it (its recommended candidate,
    signed off on test: mAP against the labels and against FP32's detections, the weighted
    layers it keeps out of INT8) against ORT's and ModelOpt's full INT8 on the same
    calibration pages, each evaluated on the same test pages by the run's own evaluation
    (no paired test on test: no look in the ledger)."""

    import quantkit
    from quantkit.app import prepared_context
    from quantkit.run.detection import detection_evidence
    from quantkit.run.evaluation import evaluate_model as evaluate
    from quantkit.run.stages.fp32_reference import fp32_reference as evaluate_reference

    s = _common.settings_for(experiment, *overrides)
    scope_ops = SCOPES[s.data.kind]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix=f"peers-{experiment}-") as tmp:
        tmp = Path(tmp)
        rec = quantkit.run([f"experiment={experiment}", "progress=false", *overrides],
                           run_dir=tmp / "quantkit")
        ctx = prepared_context(s, tmp / "run")
        ref = evaluate_reference(ctx, "test")

        def measured(ev) -> tuple[float, float]:
            found = detection_evidence(ctx, "test", ev.logits, ref.logits)["metrics"]
            return found["map"], found["map_vs_fp32"]

        rows.append(Row("fp32", "-", ref.metric("map"), 1.0, fmt="fp32"))
        name = rec.recommended
        cand = rec.candidates.get(name) if name else None
        weighted = max(((c.plan_counts or {}).get("int8", 0) for n, c in rec.candidates.items()
                        if n.startswith("int8.")), default=None)
        fp16_layers = None
        if cand is not None and cand.plan_counts is not None and weighted is not None:
            fp16_layers = weighted - cand.plan_counts.get("int8", 0)
        if cand is not None and cand.split == "test":
            rows.append(Row("quantkit", f"{name} (recommended, signed off on test; "
                                        f"{fp16_layers} of {weighted} weighted layers not INT8)",
                            cand.metrics.map, cand.metrics.map_vs_fp32, chosen=True))
        else:
            rows.append(Row("quantkit", "no recommended candidate", None, None, chosen=True))
        for n, c in rec.candidates.items():
            if n.startswith("int8.") and c.split == "dev":
                dev_map = "na" if c.metrics.map is None else f"{c.metrics.map:.4f}"
                rows.append(Row("quantkit", f"{n} (full INT8, dev: mAP {dev_map})", None, None,
                                "not signed off: not run on test"))

        feeds = [f for _, f in ctx.feeds.batches(ctx.splits.calib, s.calibrator.batch_size)]
        configs = [("int8", m, hp) for m in ("max", "entropy") for hp in ("fp16", "fp32")]
        rows += peer_rows(ctx.model.path, feeds, tmp,
                          lambda path, name, fmt: measured(evaluate(ctx, name, path, split="test")),
                          scope_ops=scope_ops, ort_methods=ORT_METHODS, configs=configs,
                          venv_python=venv_python, venv_note=venv_note)
    header = (f"{experiment}: test pages {len(ctx.splits.test)}; dev pages {len(ctx.splits.dev)};"
              f" calibration pages {len(ctx.splits.calib)}; columns: mAP@[.5:.95] against the "
              f"labels, mAP vs FP32 (FP32's detections as ground truth); exact Q/DQ numerics "
              f"({ctx.qdq_mode()})")
    return ModelComparison(experiment, header, rows, fp16_layers=fp16_layers)


def peer_rows(model_path, feeds: list[dict], tmp: Path, evaluate_peer, *, scope_ops,
              ort_methods, configs, venv_python: Path | None, venv_note: str | None
              ) -> list[Row]:
    """The peers' rows: ORT ``quantize_static`` per method in ``ort_methods``, then ModelOpt
    per ``(mode, method, high precision)`` in ``configs``, each calibrated on ``feeds`` (the
    run's calibration batches; consumed) and scored by ``evaluate_peer(path, name, fmt)`` ->
    (task metric, agreement with FP32) on test. A ModelOpt configuration that fails or that
    ONNX Runtime cannot load is ``na`` with its error, never a number."""
    import numpy as np

    import peers
    from quantkit.errors import BackendError

    rows = []
    for method in ort_methods:
        out = tmp / f"ort.{method}.onnx"
        peers.ort_quantize(model_path, out, feeds, method=method, percentile=99.99,
                           op_types=scope_ops)
        bins = " 128 bins" if method == "entropy" else ""
        rows.append(Row("ort", f"{method}{bins} (quantize_static QDQ S8S8, "
                               f"{'/'.join(scope_ops)}, FP32 rest)",
                        *evaluate_peer(out, f"ort.{method}", "int8")))
        out.unlink()
    calib = tmp / "calib.npz"
    np.savez(calib, **{k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]})
    feeds.clear()
    for mode, method, hp in configs:
        conf = (f"{mode + ' ' if mode != 'int8' else ''}{method}, high precision {hp} "
                f"({'/'.join(scope_ops)})")
        if venv_python is None:  # said once, in one line, before the tables
            continue
        name = f"modelopt.{mode}.{method}.{hp}"
        out = tmp / f"{name}.onnx"
        err = modelopt_quantize(venv_python, model_path, out, calib, tmp, mode=mode,
                                method=method, high_precision=hp, op_types=scope_ops)
        if err:
            rows.append(Row("modelopt", conf, None, None, err, fmt=mode))
            continue
        try:
            rows.append(Row("modelopt", conf, *evaluate_peer(out, name, mode), fmt=mode))
        except BackendError as exc:  # ONNX Runtime cannot load ModelOpt's graph: na
            rows.append(Row("modelopt", conf, None, None,
                            f"ONNX Runtime could not run it: {str(exc)[:160]}", fmt=mode))
        out.unlink()
    return rows


def with_disabled_optimizers(ctx, *names: str):
    """``ctx`` whose ONNX Runtime sessions also disable the optimizers ``names``."""
    b = ctx.settings.backend
    backend = dataclasses.replace(b, disabled_optimizers=[*b.disabled_optimizers, *names])
    return dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, backend=backend))


def print_table(c: ModelComparison) -> None:
    print(c.header)
    cols = ("mAP", "vs FP32") if c.model in DETECTORS else ("accuracy", "agree")
    print(f"{'tool':<10} {'configuration':<66} {cols[0]:>8} {cols[1]:>7}")
    for r in c.rows:
        acc = "na" if r.accuracy is None else f"{r.accuracy:.4f}"
        agr = "na" if r.agreement is None else f"{r.agreement:.4f}"
        print(f"{r.tool:<10} {r.configuration:<66} {acc:>8} {agr:>7}"
              + (f"  ({r.note})" if r.note else ""))
    print(flush=True)


#: run inside the ModelOpt venv: its public ONNX PTQ API, CPU calibration
_MODELOPT_SCRIPT = """
import sys, numpy as np
from modelopt.onnx.quantization import quantize
src, out, calib, mode, method, hp, ops = sys.argv[1:8]
data = dict(np.load(calib))
quantize(src, quantize_mode=mode, calibration_data=data, calibration_method=method,
         calibration_eps=["cpu"], high_precision_dtype=hp, op_types_to_quantize=ops.split(","),
         output_path=out, log_level="WARNING")
"""


def default_modelopt_venv() -> Path:
    """``$QUANTKIT_MODELOPT_VENV``, else ``<quantkit cache dir>/peers/venv-modelopt``
    (``$QUANTKIT_CACHE`` or ~/.cache/quantkit): no path of one machine."""
    from quantkit.assets import cache_root

    named = os.environ.get("QUANTKIT_MODELOPT_VENV")
    return Path(named) if named else Path(cache_root(None)) / "peers" / "venv-modelopt"


TORCH_CPU = "torch==2.13.0+cpu"
#: what to set when pip cannot find the CPU build of torch
TORCH_FIX = (f"set PIP_FIND_LINKS=<a folder holding the {TORCH_CPU} wheel> or "
             "PIP_EXTRA_INDEX_URL=<an index offering it, e.g. "
             "https://download.pytorch.org/whl/cpu>, or pass --modelopt-venv <a venv where "
             "`import modelopt.onnx.quantization` works>")


def ensure_modelopt_venv(venv: Path, *, create: bool = True) -> tuple[Path | None, str | None]:
    """(python of a venv with nvidia-modelopt[onnx], None) or (None, why not, in one line).

    Created on first use unless ``create`` is false (``--smoke``): torch 2.13.0 CPU first
    (else ModelOpt pulls a multi-GB CUDA torch), then ``nvidia-modelopt[onnx]`` (which brings
    onnxruntime-gpu and onnx 1.21: hence its own venv). Failing installs are reported, not
    raised: the other peers are still measured; when pip cannot find the CPU build of torch,
    what to set (:data:`TORCH_FIX`).
    """
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import modelopt.onnx.quantization"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python, None
    if not create:
        return None, f"no venv with nvidia-modelopt[onnx] at {venv} (--smoke never creates it)"
    venv.parent.mkdir(parents=True, exist_ok=True)
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(python), "-m", "pip", "install", "-q", TORCH_CPU],
             [str(python), "-m", "pip", "install", "-q", "nvidia-modelopt[onnx]"]]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            out = r.stderr or r.stdout
            if TORCH_CPU in cmd and ("ResolutionImpossible" in out
                                     or "No matching distribution" in out
                                     or "Could not find a version" in out):
                return None, f"pip cannot find the CPU build of torch ({TORCH_CPU}): {TORCH_FIX}"
            last = out.strip().splitlines()
            return None, f"`{' '.join(cmd[2:])}` failed: {last[-1] if last else r.returncode}"
    if subprocess.run(check, capture_output=True).returncode != 0:
        return None, "modelopt.onnx.quantization does not import in the new venv"
    return python, None


def modelopt_quantize(python, model_path, out, calib, tmp, *, mode="int8", method,
                      high_precision, op_types) -> str | None:
    """Quantize a copy of the model with ModelOpt in its venv (``mode``: its
    ``quantize_mode``, int8 | fp8); None, or why it failed."""
    src = Path(tmp) / f"modelopt_input.{mode}.{method}.{high_precision}.onnx"
    shutil.copyfile(model_path, src)  # ModelOpt rewrites its input in place
    try:
        r = subprocess.run([str(python), "-c", _MODELOPT_SCRIPT, str(src), str(out), str(calib),
                            mode, method, high_precision, ",".join(op_types)],
                           capture_output=True, text=True)
    finally:
        src.unlink(missing_ok=True)
    if r.returncode != 0 or not Path(out).exists():
        lines = [ln for ln in (r.stderr or r.stdout).strip().splitlines() if ln.strip()]
        i = next((k for k in range(len(lines) - 1, -1, -1) if "Error" in lines[k]),
                 len(lines) - 1)
        err = lines[i].strip() if lines else ""
        if ":" not in err:  # a bare `AssertionError`: add the source line that raised it
            src_line = next((ln.strip() for ln in reversed(lines[:i])
                             if ln.strip().strip("^~ ")), "")
            err = f"{err} at `{src_line}`" if src_line else err
        return f"modelopt {mode} {method}/{high_precision} failed (rc {r.returncode}): {err}"
    return None


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("accuracy_vs_peers", main))
