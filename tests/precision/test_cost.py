"""The cost model: table lookups, estimates with their label, refusal of unknown targets."""

from __future__ import annotations

import pytest

from quantkit.errors import ConfigError
from quantkit.precision.cost import estimate_layer, relative_throughput
from quantkit.precision.cost_table import MEASURED_H200, PEAK_RATIO


def test_published_ratios_per_architecture():
    assert relative_throughput(75, "Conv", "int8") == 2.0
    assert relative_throughput("A100", "MatMul", "int8") == 2.0
    assert relative_throughput("L4", "Gemm", "fp8") == 2.0
    assert relative_throughput("B200", "MatMul", "fp8") == PEAK_RATIO["blackwell"]["fp8"]
    assert relative_throughput(90, "MatMul", "fp16") == 1.0


def test_hopper_uses_the_nearest_h200_measurement():
    small = relative_throughput("H200", "MatMul", "fp8", mkn=(128, 768, 768))
    big = relative_throughput("H100", "MatMul", "fp8", mkn=(8192, 8192, 8192))
    assert small == pytest.approx(MEASURED_H200[(128, 768, 768)]["fp8"] / 5.2)
    assert small < 1.0 < big  # FP8 loses on launch-bound GEMMs, wins on large ones
    # without a shape: the published ratio
    assert relative_throughput("H200", "MatMul", "fp8") == 2.0


def test_estimate_is_labelled_and_scales_with_format():
    flops = 2.0 * 32768 * 3072 * 768
    fp16 = estimate_layer(flops, "fp16", "H200", mkn=(32768, 3072, 768))
    fp8 = estimate_layer(flops, "fp8", "H200", mkn=(32768, 3072, 768))
    assert fp16.label == "estimated on H200" and fp8.basis.startswith("measured H200")
    assert fp8.time_ms == pytest.approx(fp16.time_ms * 725.6 / 1210.5)
    a100 = estimate_layer(flops, "int8", 80)
    assert a100.label == "estimated on A100 (sm 80)" and a100.basis == "published peak ratio"
    assert a100.time_ms == pytest.approx(flops / (312e12 * 2.0) * 1e3)


@pytest.mark.parametrize("target,fmt,op", [("V100", "int8", "MatMul"), (70, "int8", "MatMul"),
                                           (86, "fp8", "MatMul"), (90, "int4", "MatMul"),
                                           (90, "fp8", "Softmax")])
def test_unknown_or_impossible_is_refused(target, fmt, op):
    with pytest.raises(ConfigError):
        relative_throughput(target, op, fmt)


def test_bad_flops_refused():
    with pytest.raises(ConfigError, match="FLOPs"):
        estimate_layer(float("nan"), "fp16", 90)
