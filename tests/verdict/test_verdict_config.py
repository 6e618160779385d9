"""The sign-off keys of conf/verdict compose, validate, and reach the protocol functions."""

import pytest

import quantkit
from quantkit.errors import ConfigError
from quantkit.verdict import TestPolicy, declare_family, paired_signoff
from quantkit.verdict.margin import Margin


def _settings(*overrides):
    return quantkit.configure(["experiment=bert_int8", *overrides])


def test_defaults_and_overrides():
    v = _settings().verdict
    assert (v.family, v.min_n, v.min_groups, v.power) == ("fixed_sequence", 100, 75, 0.8)
    # bert_int8 declares its churn gate (conf/experiment/bert_int8.yaml); the default is 0.10
    assert v.max_flip_rate == 0.02 and v.min_agreement == 0.99 and v.alpha == 0.05
    assert _settings("experiment=mobilenet_int8").verdict.max_flip_rate == 0.10
    s = _settings("verdict.family=holm", "verdict.max_flip_rate=null", "verdict.n_boot=500",
                  "verdict.power_sims=0", "seed=3")
    v = s.verdict
    assert v.family == "holm" and v.max_flip_rate is None
    policy = TestPolicy.from_settings(s)  # every knob of the tests, from the config
    assert policy == TestPolicy(alpha=0.025, n_boot=500, seed=3, min_n=100, min_groups=75,
                                power=0.8, min_power=0.5, sims=0)
    assert policy.at(0.0125).alpha == 0.0125 and policy.at(0.0125).n_boot == 500
    t = paired_signoff([True] * 200, [True] * 200, margin=Margin(v.margin_kind, v.margin),
                       policy=policy)
    assert t.alpha == 0.025 and t.methods["bootstrap"]["n_boot"] == 500
    assert declare_family({"fp16": t}, method=v.family, alpha=policy.alpha).method == "holm"


@pytest.mark.parametrize("override, key", [("verdict.family=bonferroni", "verdict.family"),
                                           ("verdict.max_flip_rate=1.5", "verdict.max_flip_rate"),
                                           ("verdict.power=1", "verdict.power"),
                                           ("verdict.min_n=0", "verdict.min_n")])
def test_bad_values_are_one_line_config_errors(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as err:
        _settings(override)
    assert "\n" not in str(err.value)


def test_ledger_keys_default_and_refuse_bad_values(tmp_path):
    v = _settings().verdict
    assert v.ledger is None and v.ledger_path is None and v.new_study is None
    assert v.min_power == 0.5 and v.power_sims == 400
    v = _settings(f"verdict.ledger={tmp_path}/team.sqlite", "verdict.min_power=0",
                  "verdict.supersedes=0123abcd", "verdict.new_study='data of 2026-12'").verdict
    assert v.ledger.endswith("team.sqlite") and v.min_power == 0
    assert v.new_study == "data of 2026-12"
    assert _settings(f"verdict.ledger_path={tmp_path}/team.sqlite").verdict.ledger_path
    # a team ledger on PostgreSQL (issue 49 point 3: tests/test_ledger_backends.py)
    assert _settings("verdict.ledger='postgresql://ci@db/quantkit'").verdict.ledger == \
        "postgresql://ci@db/quantkit"
    (tmp_path / "afile").write_text("x")
    for override, key in [(f"verdict.ledger={tmp_path}", "verdict.ledger"),
                          (f"verdict.ledger={tmp_path}/afile/l.sqlite", "verdict.ledger"),
                          (f"verdict.ledger_path={tmp_path}", "verdict.ledger_path"),
                          (f"verdict.ledger_path={tmp_path}/afile/l.sqlite",
                           "verdict.ledger_path"),
                          ("verdict.new_study=' '", "verdict.new_study"),
                          ("verdict.ledger='mysql://ci/quantkit'", "verdict.ledger"),
                          ("verdict.ledger='postgresql://ci'", "verdict.ledger"),
                          ("model.id=' '", "model.id"),
                          ("verdict.min_power=1", "verdict.min_power"),
                          ("verdict.power_sims=-1", "verdict.power_sims"),
                          ("verdict.supersedes=xyz", "verdict.supersedes"),
                          ("verdict.supersedes=0123abc", "verdict.supersedes")]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as err:
            _settings(override)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="two different files"):
        _settings(f"verdict.ledger={tmp_path}/a.sqlite", f"verdict.ledger_path={tmp_path}/b.sqlite")


def test_label_free_share_keys():
    v = _settings().verdict
    assert (v.score_quantile, v.gallery_size) == (0.05, 1000)
    with pytest.raises(ConfigError, match=r"verdict\.gallery_size"):
        _settings("verdict.gallery_size=0")
    # the mean test score_quantile=null used to select is gone: one clear error, naming it
    with pytest.raises(ConfigError, match=r"verdict\.score_quantile") as err:
        _settings("verdict.metric=kl", "verdict.score_quantile=null")
    assert "\n" not in str(err.value) and "share" in str(err.value)
    assert _settings("verdict.score_quantile=null").verdict.metric == "accuracy"  # unused
