"""One TensorRT settings schema: ``backend.trt.*`` composes into settings.TrtConfig, which is
the backend's EngineSettings; it validates itself, and a run's shapes must fit its profile."""

from pathlib import Path

import pytest

import quantkit
from quantkit.backends.trt import EngineSettings
from quantkit.errors import ConfigError
from quantkit.settings import TrtConfig

CONF = Path(__file__).resolve().parents[2] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def compose_settings(*overrides: str, experiment: str = "bert_int8"):
    return quantkit.configure([f"experiment={experiment}", *overrides])


def test_engine_settings_is_the_config_schema():
    assert EngineSettings is TrtConfig
    t = compose_settings("backend=trt", "backend.trt.tf32=true", "backend.trt.device=1",
                         "backend.trt.cuda_graphs=true", "backend.trt.max_batch=128",
                         "+backend.trt.dim_overrides.height=[32,64,128]").backend.trt
    assert isinstance(t, EngineSettings)
    assert (t.tf32, t.device, t.cuda_graphs, t.max_batch) == (True, 1, True, 128)
    assert t.dim_overrides == {"height": (32, 64, 128)}  # validated and normalized on build


@pytest.mark.parametrize("override, key", [
    ("backend.trt.opt_batch=100", "backend.trt.min_batch/opt_batch/max_batch"),
    ("backend.trt.device=-1", "backend.trt.device"),
    ("backend.trt.builder_optimization_level=9", "backend.trt.builder_optimization_level"),
    ("backend.trt.tensorrt_major=9", "backend.trt.tensorrt_major"),
    ("backend.trt.image_range=[8,4,2]", "backend.trt.image_range"),
    ("+backend.trt.shape_overrides.x=[[1,2],[1,2]]", "backend.trt.shape_overrides.x"),
])
def test_bad_trt_settings_one_line_error(override, key):
    with pytest.raises(ConfigError) as err:
        compose_settings("backend=trt", override)
    assert key in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("override, key, value", [
    ("bench.batch_sizes=[1,128]", "bench.batch_sizes[1]", 128),
    ("backend.batch_size=100", "backend.batch_size", 100),
    ("data.max_length=256", "data.max_length", 256),
])
def test_run_shapes_must_fit_the_engine_profile_before_any_work(override, key, value):
    """Before: a latency batch of 128 against max_batch 64 passed validation and failed late,
    on the first infer of the latency stage, after every engine had been built."""
    with pytest.raises(ConfigError) as err:
        compose_settings("backend=trt", override)
    msg = str(err.value)
    assert f"{key}={value} does not fit the TensorRT engine" in msg and "Fix:" in msg
    compose_settings(override, "backend.trt.max_batch=128", "backend.trt.max_sequence=256",
                     "backend.trt.opt_sequence=128", "backend=trt")  # widened: fits
    compose_settings(override)  # backend=ort: no engine profile to fit


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_on_trt(experiment):
    s = compose_settings("backend=trt", experiment=experiment)
    assert s.backend.name == "trt" and isinstance(s.backend.trt, EngineSettings)


def test_numerics_note_says_whether_tf32_ran():
    from quantkit.backends.trt import engine_numerics_note

    off = engine_numerics_note("int8.mse", compose_settings("backend=trt"))
    on = engine_numerics_note("fp32", compose_settings("backend=trt", "backend.trt.tf32=true"))
    assert "TF32 off: FP32-typed layers compute in IEEE FP32" in off and "GPU 0" in off
    assert "TF32 allowed (backend.trt.tf32=true)" in on and "strongly typed" in on
