"""Config composition (every experiment), the schema, and one-line errors for bad values."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

import quantkit
from quantkit.errors import ConfigError
from quantkit.settings import Settings, build

CONF = Path(__file__).resolve().parents[1] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def compose_cfg(*overrides: str):
    return quantkit.compose(overrides)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_validates(experiment):
    cfg = compose_cfg(f"experiment={experiment}")
    s = build(cfg)
    assert isinstance(s, Settings)
    assert s.experiment_name == experiment


@pytest.mark.parametrize("group,option", [("calibrator", "minmax"), ("calibrator", "percentile"),
                                          ("calibrator", "entropy"), ("calibrator", "mse")])
def test_calibrator_options_select_one_method(group, option):
    s = build(compose_cfg("experiment=bert_int8", f"{group}={option}"))
    assert s.calibrator.methods == [option]


def test_bert_int8_defaults():
    s = build(compose_cfg("experiment=bert_int8"))
    assert s.model.kind == "zoo" and s.model.name == "minilm_sentiment" and s.model.opset == 17
    assert s.data.group_column == "movie_name" and s.data.max_length == 128
    assert s.verdict.margin == 0.01 and s.verdict.margin_kind == "relative"


@pytest.mark.parametrize("override,key", [
    ("verdict.margin=1.5", "verdict.margin"),
    ("verdict.alpha=0", "verdict.alpha"),
    ("calibrator.percentile=101", "calibrator.percentile"),
    ("calibrator.methods=[kl]", "calibrator.methods[0]"),
    ("data.calib.num_samples=0", "data.calib.num_samples"),
    ("precision.remainder=int4", "precision.remainder"),
    ("precision.concat_range_ratio=1", "precision.concat_range_ratio"),
    ("precision.concat_range_ratio=0.5", "precision.concat_range_ratio"),
    ("precision.concat_range_ratio=inf", "precision.concat_range_ratio"),
    ("precision.concat_range_ratio=nan", "precision.concat_range_ratio"),
    ("compare.numerics_margin_share=1.0", "compare.numerics_margin_share"),
    ("compare.numerics_margin_share=0", "compare.numerics_margin_share"),
    ("model=onnx", "model.path"),
])
def test_range_errors_name_the_key(override, key):
    cfg = compose_cfg("experiment=bert_int8", override) if override != "model=onnx" else \
        compose_cfg("experiment=bert_int8", "model=onnx", "model.path=null")
    with pytest.raises(ConfigError) as err:
        build(cfg)
    msg = str(err.value)
    assert key in msg and "\n" not in msg and "Fix:" in msg


def test_type_error_from_schema_names_key():
    cfg = OmegaConf.create({"data": {"eval": {"limit": "abc"}}})
    with pytest.raises(ConfigError, match=r"data\.eval\.limit"):
        build(cfg)


def test_concat_range_ratio_default_and_type():
    """precision.concat_range_ratio (issue 46): 16 by default, a number or a one-line error."""
    assert build(compose_cfg("experiment=bert_int8")).precision.concat_range_ratio == 16.0
    cfg = OmegaConf.create({"precision": {"concat_range_ratio": "wide"}})
    with pytest.raises(ConfigError, match=r"precision\.concat_range_ratio"):
        build(cfg)
