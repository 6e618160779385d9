"""Full-INT8 accuracy: quantkit's best calibrator vs ONNX Runtime quantize_static (TensorRT style).

Same model, same test split, same calibration samples, one run. quantkit's default INT8 is
what a run of the experiment builds (its ptq steps included) for the calibrator the run
picks on dev; every number is on the test split. The ORT peer uses QDQ,
signed symmetric INT8 activations and weights, per-channel weights, the weighted-op scope of
the model (MatMul/Gemm for MiniLM, Conv/Gemm for MobileNetV2) and the best of MinMax /
Percentile 99.99 / Entropy (2048 bins). NVIDIA ModelOpt ONNX PTQ (max and entropy, fp16 and
fp32 high precision) runs in its own virtual environment (``--modelopt-venv``, default
/work/venv-modelopt: it pulls onnxruntime-gpu and pins onnx, so it cannot share quantkit's)
on a copy of the model (it rewrites its input), through its public ``quantize`` API with
CPU calibration. Peers' artifacts are evaluated on ONNX Runtime CPU with quantkit's session
settings (``WeightBiasQuantization`` disabled) and exact Q/DQ numerics
(``session.disable_quant_qdq``, quantkit's ``backend.qdq_mode=exact``). quantkit's
candidates are evaluated exactly
as a run does (same stage-cache keys: after a run of the experiment they are read back, not
recomputed). Agreement = top-1 agreement with FP32 on the same examples.
Usage:

    python benchmarks/accuracy_vs_peers.py [--limit N]     # N first dev and test examples
    python benchmarks/accuracy_vs_peers.py --model mobilenet_int8   # or: model=mobilenet_int8

Last line: model=<m> acc_fp32=.. acc_quantkit=.. agree_quantkit=.. acc_ort=.. agree_ort=..
acc_modelopt=<..|na> agree_modelopt=<..|na> (each peer's best configuration by accuracy)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", "--eval-limit", dest="limit", type=int, default=None,
                    help="first N examples of dev and of test (documented partial run)")
    ap.add_argument("--model", default="bert_int8", choices=["bert_int8", "mobilenet_int8"],
                    help="the experiment whose model and data are measured")
    ap.add_argument("--modelopt-venv", default="/work/venv-modelopt",
                    help="virtual environment with nvidia-modelopt[onnx] (torch CPU first)")
    a = ap.parse_args([f"--model={x.split('=', 1)[1]}" if x.startswith("model=") else x
                       for x in sys.argv[1:]])
    overrides = ([f"data.test.limit={a.limit}", f"data.dev.limit={a.limit}"]
                 if a.limit else [])
    s, model, splits, enc = _common.setup(a.model, *overrides)
    text = s.data.kind == "text"

    import numpy as np

    import peers
    from quantkit.backends.batched import run_split
    from quantkit.backends.ort import UNSAFE_QDQ_OPTIMIZERS, OrtRunner
    from quantkit.data.feeds import as_feeds
    from quantkit.run import (apply_ptq, build_artifacts, calibrate, check_fp16_range,
                              evaluate_artifact, evaluate_reference, prepared_context,
                              quant_scope)

    enc = as_feeds(enc)
    test = splits.test
    lengths = enc.lengths(test) if hasattr(enc, "lengths") else None
    y = test.labels
    rows = []

    def evaluate_exact(path, name):
        """(accuracy, agreement with FP32) of a peer artifact on the test split, on the
        session settings quantkit evaluates with (exact Q/DQ, WeightBiasQuantization off)."""
        with OrtRunner(path, name=name, disabled_optimizers=UNSAFE_QDQ_OPTIMIZERS,
                       qdq_mode="exact") as r:
            logits = run_split(r, enc, test, output=model.output_name,
                               batch_size=s.backend.batch_size, progress=False, lengths=lengths)
        pred = logits.argmax(1)
        return float((pred == y).mean()), float((pred == ref_pred).mean())

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # the run's own stages (ptq included) and stage cache: quantkit's default INT8 is
        # the calibrator a run picks on dev, reported on test
        ctx = prepared_context(s, tmp)
        ref_dev, ref = evaluate_reference(ctx, "dev"), evaluate_reference(ctx, "test")
        acc_fp32 = ref.metric("accuracy")
        ref_pred = ref.logits.argmax(1)
        rows.append(("fp32", "-", acc_fp32, 1.0))
        cal = calibrate(ctx, apply_ptq(ctx, quant_scope(ctx)))
        arts = {n: art for n, art in build_artifacts(ctx, cal, check_fp16_range(ctx)).items()
                if n.startswith("int8.")}
        dev = {n: evaluate_artifact(ctx, art, ref_dev).metric("accuracy")
               for n, art in arts.items()}
        chosen = max(dev, key=dev.get)
        qk = {}
        for n, art in arts.items():
            res = evaluate_artifact(ctx, art, ref)
            qk[n] = (res.metric("accuracy"), float((res.logits.argmax(1) == ref_pred).mean()))
            rows.append(("quantkit", f"{n}{' (chosen on dev)' if n == chosen else ''}, "
                                     "INT8 + FP16 remainder (emulated)", *qk[n]))
        # ORT stacks its calibration batches: text batches padded to max_length (images
        # have one shape already)
        kw = {"pad_to": s.data.max_length} if text else {}
        feeds = [f for _, f in enc.batches(splits.calib, s.calibrator.batch_size, **kw)]
        scope = ("MatMul", "Gemm") if text else ("Conv", "Gemm")
        ort = {}
        for method in ("minmax", "percentile", "entropy"):
            out = tmp / f"ort.{method}.onnx"
            peers.ort_quantize(model.path, out, feeds, method=method, percentile=99.99,
                               op_types=scope)
            ort[method] = evaluate_exact(out, f"ort-{method}")
            rows.append(("ort", f"{method} (quantize_static QDQ, {'/'.join(scope)}, FP32 rest)",
                         *ort[method]))
        mo, mo_note = {}, None
        venv_python, mo_note = ensure_modelopt_venv(Path(a.modelopt_venv))
        if venv_python is not None:
            calib = tmp / "calib.npz"
            np.savez(calib, **{k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]})
            for method in ("max", "entropy"):
                for hp in ("fp16", "fp32"):
                    out = tmp / f"modelopt.{method}.{hp}.onnx"
                    err = modelopt_quantize(venv_python, model.path, out, calib, tmp,
                                            method=method, high_precision=hp, op_types=scope)
                    if err:
                        mo_note = err
                        continue
                    mo[f"{method}/{hp}"] = evaluate_exact(out, f"modelopt-{method}-{hp}")
                    rows.append(("modelopt", f"{method}, high precision {hp}", *mo[f"{method}/{hp}"]))
    print(f"test examples: {len(y)}{f' (--limit {a.limit})' if a.limit else ''}; dev examples: "
          f"{len(splits.dev)}; calibration samples: {len(splits.calib)}; exact Q/DQ numerics")
    print(f"{'tool':<10} {'configuration':<56} {'accuracy':>8} {'agree':>7}")
    for tool, conf, acc, agree in rows:
        print(f"{tool:<10} {conf:<56} {acc:>8.4f} {agree:>7.4f}")
    if mo_note:
        print(f"modelopt   not (fully) measured: {mo_note}")

    def best(d):  # peers: their best configuration on test (in the peers' favour)
        k = max(d, key=lambda m: d[m]) if d else None
        return (k, *d[k]) if k else (None, None, None)

    (ko, ao, go), (km, am, gm) = best(ort), best(mo)
    aq, gq = qk[chosen]
    print(f"quantkit: {chosen} (chosen on dev); best ORT: {ko}; best ModelOpt: {km or 'na'}")

    def f(v):
        return "na" if v is None else f"{v:.4f}"

    print(f"model={a.model} acc_fp32={acc_fp32:.4f} acc_quantkit={f(aq)} agree_quantkit={f(gq)} "
          f"acc_ort={f(ao)} agree_ort={f(go)} acc_modelopt={f(am)} agree_modelopt={f(gm)}")


#: run inside the ModelOpt venv: its public ONNX PTQ API, CPU calibration
_MODELOPT_SCRIPT = """
import sys, numpy as np
from modelopt.onnx.quantization import quantize
src, out, calib, method, hp, ops = sys.argv[1:7]
data = dict(np.load(calib))
quantize(src, quantize_mode="int8", calibration_data=data, calibration_method=method,
         calibration_eps=["cpu"], high_precision_dtype=hp, op_types_to_quantize=ops.split(","),
         output_path=out)
"""


def ensure_modelopt_venv(venv: Path) -> tuple[Path | None, str | None]:
    """(python of a venv with nvidia-modelopt[onnx], None) or (None, why not).

    Created on first use: torch 2.13.0 CPU first (else ModelOpt pulls a multi-GB CUDA torch),
    then ``nvidia-modelopt[onnx]`` (which brings onnxruntime-gpu and onnx 1.21: hence its own
    venv). Failing installs are reported, not raised: the other peers are still measured.
    """
    import subprocess

    python = venv / "bin" / "python"
    check = [str(python), "-c", "import modelopt.onnx.quantization"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python, None
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(python), "-m", "pip", "install", "-q", "torch==2.13.0+cpu"],
             [str(python), "-m", "pip", "install", "-q", "nvidia-modelopt[onnx]"]]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            last = (r.stderr or r.stdout).strip().splitlines()
            return None, f"`{' '.join(cmd[2:])}` failed: {last[-1] if last else r.returncode}"
    if subprocess.run(check, capture_output=True).returncode != 0:
        return None, "modelopt.onnx.quantization does not import in the new venv"
    return python, None


def modelopt_quantize(python, model_path, out, calib, tmp, *, method, high_precision,
                      op_types) -> str | None:
    """Quantize a copy of the model with ModelOpt in its venv; None, or why it failed."""
    import shutil
    import subprocess

    src = Path(tmp) / f"modelopt_input.{method}.{high_precision}.onnx"
    shutil.copyfile(model_path, src)  # ModelOpt rewrites its input in place
    r = subprocess.run([str(python), "-c", _MODELOPT_SCRIPT, str(src), str(out), str(calib),
                        method, high_precision, ",".join(op_types)],
                       capture_output=True, text=True)
    if r.returncode != 0 or not Path(out).exists():
        last = (r.stderr or r.stdout).strip().splitlines()
        return f"modelopt {method}/{high_precision} failed: {last[-1] if last else r.returncode}"
    return None


if __name__ == "__main__":
    main()
