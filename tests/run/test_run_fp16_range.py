"""Stage fp16_range_check: nodes whose FP32 values overflow FP16 stay FP32."""

from __future__ import annotations

import onnx
from onnx import numpy_helper

import tinyworld
from quantkit.run.stages.fp16_range_check import fp16_range_check as check_fp16_range
from quantkit.app import prepared_context


def test_tiny_model_fits_fp16(overflow):
    assert overflow.fp32_nodes == {} and overflow.to_record() == {"fp32_nodes": 0}


def test_a_node_beyond_65504_stays_fp32(tmp_path):
    from runworld import settings_for

    world = tinyworld.make_world(tmp_path / "w")
    m = onnx.load(str(world["model"]))
    for i, init in enumerate(m.graph.initializer):
        if init.name == "w1":  # fc1's outputs reach ~1e6: beyond FP16's max
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(init) * 3e5, "w1"))
    onnx.save(m, str(world["model"]))
    ctx = prepared_context(settings_for(world, "stage_cache=false"), tmp_path / "run")
    fp32 = check_fp16_range(ctx).fp32_nodes
    assert "fc1" in fp32 and "65504" in fp32["fc1"]
