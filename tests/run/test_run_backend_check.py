"""Stage backend_check, the engine check: not run (and saying where to run it) for
target=tensorrt on a host without TensorRT, not needed where the signed numbers are the
deployment runtime's own, and a gate in the metric's units on ONNX Runtime CPU when the
signed numbers come from another execution (target=ort_cpu with qdq_mode=exact)."""

from __future__ import annotations

import dataclasses

import pytest

from quantkit.record.serde import encode
from quantkit.run.stages.ptq import ptq as apply_ptq
from quantkit.run.stages.fp32_reference import fp32_reference as evaluate_reference
from quantkit.run.stages.artifacts import artifacts as build_artifacts
from quantkit.run.stages.calibration import calibration as calibrate
from quantkit.run.stages.backend_check import backend_check as check_backend, compared_size
from quantkit.run.stages.fp16_range_check import fp16_range_check as check_fp16_range
from quantkit.run.scope import quant_scope
from quantkit.run.deployment import engine_check_plan, signoff_budget
from quantkit.run.verdicts import signoff_threshold
from quantkit.verdict.engine_gate import faithful_power, faithful_size


def _with(ctx, tmp_path, **changes):
    tmp_path.mkdir(parents=True, exist_ok=True)
    return dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, **changes),
                               run_dir=tmp_path)


def test_tensorrt_target_on_a_cpu_host_says_the_engine_check_has_not_run(ctx, artifacts,
                                                                          reference):
    assert ctx.settings.target == "tensorrt" and ctx.settings.backend.name == "ort"
    res = check_backend(ctx, artifacts["int8.minmax"], reference)
    r = encode(res.to_record())
    assert r["status"] == "not_run" and not r["checked"] and not r["gates_recommendation"]
    assert res.not_run and not res.blocks and not res.ok
    assert "NOT run" in r["what_to_run"] and "backend=trt" in r["what_to_run"]
    assert "target GPU" in r["what_to_run"]
    assert "gate" not in r  # ORT's fused CPU kernels are not compared with the emulation
    # the tolerance is out of the margin: the sign-off decides at (1 - share) x margin
    share = ctx.settings.compare.numerics_margin_share
    assert r["budget"]["share"] == share
    assert signoff_threshold(ctx.settings, "accuracy") == pytest.approx(
        (1 - share) * ctx.settings.verdict.margin)


def test_signed_numbers_from_the_deployment_runtime_need_no_check(ctx, artifacts, reference,
                                                                   tmp_path):
    c = _with(ctx, tmp_path, target="ort_cpu",
              precision=dataclasses.replace(ctx.settings.precision, remainder="fp32"))
    plan = engine_check_plan(c.settings)
    assert not plan.required and plan.runs_here
    r = encode(check_backend(c, artifacts["int8.minmax"], reference).to_record())
    assert r["status"] == "not_needed" and r["ok"] and not r["gates_recommendation"]
    assert signoff_budget(c.settings, "accuracy").signoff == c.settings.verdict.margin


@pytest.fixture(scope="module")
def ort_exact(ctx, tmp_path_factory):
    """target=ort_cpu evaluated with exact Q/DQ: the deployment (fused kernels) differs from
    the execution the numbers come from, and runs here."""
    c = _with(ctx, tmp_path_factory.mktemp("ort-exact"), target="ort_cpu",
              precision=dataclasses.replace(ctx.settings.precision, remainder="fp32"),
              backend=dataclasses.replace(ctx.settings.backend, qdq_mode="exact"))
    overflow = check_fp16_range(c)
    sources = apply_ptq(c, quant_scope(c), overflow, evaluate_reference(c))
    return c, build_artifacts(c, calibrate(c, sources), overflow, sources)


def test_the_check_gates_on_the_deployment_runtime(ort_exact, reference):
    c, arts = ort_exact
    plan = engine_check_plan(c.settings)
    assert plan.required and plan.runs_here
    res = check_backend(c, arts["int8.minmax"], reference)
    r = encode(res.to_record())
    available = min(c.settings.compare.backend_check_subset, len(c.splits.dev))
    n = compared_size(c, available, reference)  # the size with a faithful engine's best power
    assert r["checked"] and r["gates_recommendation"] and r["n"] == n and 0 < n <= available
    assert r["faithful_power"] == pytest.approx(faithful_power(n, r["engine_tolerance"],
                                                               alpha=c.policy.alpha))
    assert r["planned_n"] == faithful_size(r["engine_tolerance"], alpha=c.policy.alpha)
    gate = r["gate"]
    assert gate["units"] == "top-1 flip rate" and gate["n"] == n
    # the tolerance in flip-rate units: share x relative margin x FP32 dev accuracy
    share, margin = c.settings.compare.numerics_margin_share, c.settings.verdict.margin
    assert gate["tolerance"] == pytest.approx(share * margin * reference.metric("accuracy"))
    # 16 examples can never show a flip rate below 0.005: not a PASS, so it blocks
    assert r["status"] in ("fail", "inconclusive") and res.blocks and not res.ok
    assert r["what_to_run"] and "compare.backend_check_subset" in r["what_to_run"] \
        or r["status"] == "fail"
    assert set(r["accuracy"]) == {"artifact", "emulated"}


def test_a_disabled_check_blocks_where_it_would_gate(ort_exact, reference):
    c, arts = ort_exact
    off = dataclasses.replace(c, settings=dataclasses.replace(
        c.settings, compare=dataclasses.replace(c.settings.compare, backend_check_subset=0)))
    res = check_backend(off, arts["int8.minmax"], reference)
    assert res.status == "disabled" and res.blocks and "backend_check_subset" in res.what_to_run


def test_a_label_free_check_gates_the_engines_share_outside(ort_exact, reference):
    """verdict.metric=kl: the engine gate tests the engine's part of score_quantile (H4),
    and the sign-off's own part is what is left of it."""
    from quantkit.run.deployment import quantile_split

    c, arts = ort_exact
    kl = dataclasses.replace(c, settings=dataclasses.replace(
        c.settings, verdict=dataclasses.replace(c.settings.verdict, metric="kl")))
    q_s, q_e = quantile_split(kl.settings, "kl")
    share = kl.settings.compare.numerics_margin_share
    assert q_e == pytest.approx(share * kl.settings.verdict.score_quantile)
    assert q_s + q_e == pytest.approx(kl.settings.verdict.score_quantile)
    r = encode(check_backend(kl, arts["int8.minmax"], reference).to_record())
    gate = r["gate"]
    assert gate["units"].startswith("share of examples with KL")
    assert f"against at most {q_e:.4g}" in gate["reasons"][0]
    assert r["budget"]["composition"].endswith(f"(declared q {kl.settings.verdict.score_quantile:g}"
                                               f": sign-off {q_s:.4g}, engine {q_e:.4g})")


def test_each_members_gate_runs_at_alpha_over_the_family(ort_exact, reference):
    """The recommendation takes any family member whose gate passed, so each gate runs at
    alpha / family size (Bonferroni): with three members at their tolerance, one passing at
    alpha each would let 1 - (1 - alpha)^3 through (measured: engine_recall 0.074)."""
    c, arts = ort_exact
    one = encode(check_backend(c, arts["int8.minmax"], reference).to_record())
    three = encode(check_backend(c, arts["int8.minmax"], reference, family_size=3).to_record())
    assert one["gate"]["alpha"] == pytest.approx(c.policy.alpha)
    assert three["gate"]["alpha"] == pytest.approx(c.policy.alpha / 3)
    assert three["faithful_power"] <= one["faithful_power"] + 1e-12
