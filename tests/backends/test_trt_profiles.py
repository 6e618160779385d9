"""Profiles against the shapes a run feeds: image dims get their own range, and a run whose
batch sizes or sequence length do not fit the profile stops before any build (real ONNX
graphs and files; the check runs before tensorrt is needed)."""

import onnx
import pytest
from onnx import TensorProto, helper

from quantkit.backends.trt import (EngineSettings, ProfileError, ShapeNeeds, build_engine,
                                   check_profiles_cover, profiles_from_model, shape_needs)
from quantkit.errors import ConfigError

from test_trt_settings import compose_settings  # same directory (pytest prepend import mode)


def image_model(layout="NCHW") -> onnx.ModelProto:
    dims = ["N", 3, "height", "width"] if layout == "NCHW" else ["N", "height", "width", 3]
    x = helper.make_tensor_value_info("pixels", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["pixels"], ["y"])], "g",
                                            [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    return m


def text_model() -> onnx.ModelProto:
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, ["batch", "sequence"])
    m = helper.make_model(helper.make_graph([helper.make_node("Identity", ["input_ids"], ["y"])],
                                            "g", [ids], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    return m


IMAGE = ShapeNeeds(kind="image", batch_sizes=(1, 32), image_size=112, image_channels=3)


def test_image_dims_take_the_image_size_not_the_sequence_range():
    """Before: H and W of a dynamic image input took the sequence range 1..128..128."""
    s = EngineSettings()  # opt_sequence=max_sequence=128: a text range
    assert profiles_from_model(image_model(), s, needs=IMAGE) == {
        "pixels": ((1, 3, 112, 112), (32, 3, 112, 112), (64, 3, 112, 112))}
    nhwc = ShapeNeeds(kind="image", batch_sizes=(1,), image_size=96, image_layout="NHWC")
    assert profiles_from_model(image_model("NHWC"), s, needs=nhwc)["pixels"][2] == (64, 96, 96, 3)
    ranged = EngineSettings(image_range=[64, 112, 224])
    assert profiles_from_model(image_model(), ranged, needs=IMAGE)["pixels"] == (
        (1, 3, 64, 64), (32, 3, 112, 112), (64, 3, 224, 224))
    no_size = ShapeNeeds(kind="image", batch_sizes=(1,))
    with pytest.raises(ProfileError, match="image input 'pixels' dim 2.*backend.trt.image_range"):
        profiles_from_model(image_model(), s, needs=no_size)


def test_shape_needs_of_a_run():
    text = shape_needs(compose_settings("backend=trt"))
    assert text.kind == "text" and text.batch_sizes == (1, 32) and text.sequence_length == 128
    assert text.sources["1"] == "bench.batch_sizes[0]" and text.sources["32"] == "backend.batch_size"
    img = shape_needs(compose_settings("backend=trt", experiment="mobilenet_int8"))
    assert img.kind == "image" and img.image_size and img.image_channels in (1, 3)
    no_bench = shape_needs(compose_settings("backend=trt", "bench.enabled=false"))
    assert no_bench.batch_sizes == (32,)


def test_check_profiles_cover_names_the_setting_and_the_fix():
    profiles = profiles_from_model(text_model(), EngineSettings(max_batch=16, opt_batch=8))
    needs = ShapeNeeds(kind="text", batch_sizes=(1, 32), sequence_length=128,
                       sources={"32": "bench.batch_sizes[1]"})
    with pytest.raises(ProfileError) as err:
        check_profiles_cover(profiles, needs, text_model())
    msg = str(err.value)
    assert "bench.batch_sizes[1]=32 does not fit the engine profile of input 'input_ids'" in msg
    assert "backend.trt.max_batch" in msg and isinstance(err.value, ConfigError)
    short = profiles_from_model(text_model(), EngineSettings(opt_sequence=64, max_sequence=64))
    with pytest.raises(ProfileError, match=r"data.max_length=128 .* \(max 64\)"):
        check_profiles_cover(short, ShapeNeeds(kind="text", batch_sizes=(1,), sequence_length=128))
    check_profiles_cover(profiles_from_model(text_model(), EngineSettings()), needs)  # fits
    small = profiles_from_model(image_model(), EngineSettings(image_range=[32, 64, 64]),
                                needs=IMAGE)
    with pytest.raises(ProfileError, match="data.image.size=112"):
        check_profiles_cover(small, IMAGE, image_model())


def test_build_engine_refuses_a_too_narrow_profile_before_needing_tensorrt(tmp_path):
    """The profile check comes first: on this machine (no tensorrt) the error is the profile's,
    so a GPU machine never builds engines that the latency stage cannot feed."""
    path = tmp_path / "m.onnx"
    onnx.save(text_model(), str(path))
    needs = ShapeNeeds(kind="text", batch_sizes=(1, 128), sequence_length=128,
                       sources={"128": "bench.batch_sizes[1]"})
    with pytest.raises(ProfileError, match="bench.batch_sizes\\[1\\]=128"):
        build_engine(path, EngineSettings(), cache_dir=tmp_path / "engines", needs=needs)
    assert not (tmp_path / "engines").exists()


def test_latency_profiles_one_per_timed_batch_size(tmp_path):
    """backend.trt.latency_profiles: profile 0 stays the general one; each bench batch size
    gets its own profile (batch fixed, TensorRT tunes for it), in the key and trtexec."""
    import shlex

    from quantkit.backends.trt import engine_key_dict, trtexec_command
    from quantkit.backends.trt.profiles import profile_set

    s = EngineSettings(opt_batch=32, max_batch=64, latency_profiles=True)
    base = profiles_from_model(text_model(), s)
    sets = profile_set(base, (1, 32, 64, 128))
    assert sets[0] == base and len(sets) == 3  # 32 is profile 0's opt; 128 does not fit
    assert sets[1]["input_ids"] == ((1, 1), (1, 128), (1, 128))
    assert sets[2]["input_ids"] == ((64, 1), (64, 128), (64, 128))
    assert profile_set(profiles_from_model(text_model(), EngineSettings(min_batch=4, opt_batch=4,
                                                                        max_batch=4)), (1, 4)) == [
        profiles_from_model(text_model(), EngineSettings(min_batch=4, opt_batch=4, max_batch=4))]
    path = tmp_path / "m.onnx"
    onnx.save(text_model(), str(path))
    needs = ShapeNeeds(kind="text", batch_sizes=(1, 32), sequence_length=128,
                       latency_batch_sizes=(1, 32))
    args = shlex.split(trtexec_command(path, s, needs=needs))
    assert [a for a in args if a.startswith("--optShapes")] == [
        "--optShapes=input_ids:32x128", "--optShapes=input_ids:1x128"]
    plain = EngineSettings(opt_batch=32, max_batch=64)
    assert len([a for a in shlex.split(trtexec_command(path, plain, needs=needs))
                if a.startswith("--optShapes")]) == 1
    assert "extra_profiles" in engine_key_dict(s, base, (), sets[1:])
    assert "extra_profiles" not in engine_key_dict(plain, base)
