"""Small real graphs for the ptq tests and a real INT8 pipeline to measure them with.

``int8_outputs`` quantizes a model the way a run does (collect_stats -> minmax amax ->
build_plan -> insert_qdq, TensorRT target) and runs FP32 and INT8 on ONNX Runtime with
exact Q/DQ numerics (basic optimizations: no fused integer kernels).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantkit.backends.ort import OrtRunner
from quantkit.calibrate import activation_tensors, collect_stats, select_tensors
from quantkit.backends.runners import calibration_runner
from quantkit.calibrate.calibrators import make_calibrator
from quantkit.calibrate.ranges import compute_ranges
from quantkit.precision.plan import build_plan
from quantkit.qdq.insert import insert_qdq

F = TensorProto.FLOAT


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def make_model(nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def ln_linear(rng, *, k=32, n=32, outlier=50.0, residual=False):
    """x [B, T, k] -> LayerNormalization (gamma with one outlier channel) -> MatMul W + b
    (-> + LN output when ``residual``: a second reader, like a BERT block)."""
    gamma = np.ones(k, np.float32)
    gamma[3] = outlier
    beta = (rng.standard_normal(k) * 0.1).astype(np.float32)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = (rng.standard_normal(n) * 0.1).astype(np.float32)
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["h"], name="ln",
                              axis=-1),
             helper.make_node("MatMul", ["h", "w"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "b"], ["y0" if residual else "y"], name="bias")]
    if residual:
        nodes.append(helper.make_node("Add", ["y0", "h"], ["y"], name="res"))
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["B", "T", k])],
                      [helper.make_tensor_value_info("y", F, ["B", "T", n])],
                      [init("gamma", gamma), init("beta", beta), init("w", w), init("b", b)])


def run(model, feeds, output="y", level="basic"):
    with OrtRunner(model, graph_optimization_level=level) as r:
        return np.concatenate([r.infer(f)[output] for f in feeds])


def calibrated_plan(model, feeds, *, method="minmax", op_types=("MatMul", "Gemm", "Conv")):
    targets = select_tensors(model, op_types=op_types)
    res = collect_stats(model, feeds, activation_tensors(targets), progress=False, runner_factory=calibration_runner)
    ranges = compute_ranges(res.stats, {method: make_calibrator(method)})[method]
    plan = build_plan(model, amax=ranges.amax, excluded=ranges.excluded, op_types=op_types,
                      remainder="fp32", skip_small=False, calibrator=method)
    return plan, res


def int8_outputs(model, feeds, *, plan=None, output="y", int8_weights=False):
    """(FP32 outputs, INT8 outputs, plan) on ``feeds`` (calibrated on the same feeds)."""
    if plan is None:
        plan, _ = calibrated_plan(model, feeds)
    q, _ = insert_qdq(model, plan, target="tensorrt", int8_weights=int8_weights)
    return run(model, feeds, output), run(q, feeds, output), plan


def nmse(ref, out):
    ref = np.asarray(ref, np.float64)
    return float(np.mean((np.asarray(out, np.float64) - ref) ** 2) / np.mean(ref ** 2))


def refined_model(model, plan, calib, recipe):
    """``quantkit.ptq.pipeline.refine`` of ``plan`` on ``model`` with ``calib`` (a list of
    feeds) as the calibration data: (the edited model, its StepRecords as a list)."""
    from quantkit.ptq.pipeline import CalibData, refine

    data = CalibData(batches=lambda: calib, subset=lambda: calib[:2])
    out = refine(model, plan, {}, recipe, data)
    return out.model, list(out.records)
