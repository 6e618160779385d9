"""Records are reproducible and change only on purpose: rerun the frozen tiny-world configs and
compare with the fixtures (tests/run/record_fixture.py says when they were made and why, and
which values depend on the host's CPU and are compared by kind)."""

from __future__ import annotations

import json

import pytest

from record_fixture import CONFIGS, DATA, comparable, mismatches, run_record


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_record_matches_before_fixture(name, tmp_path):
    before = json.loads((DATA / f"record_before_{name}.json").read_text(encoding="utf-8"))
    after = run_record(tmp_path / "w", name)
    assert isinstance(after.get("schema_version"), int)
    assert mismatches(comparable(after), comparable(before)) == []
    if name == "ort_cpu":  # the recorded config is what ran: the target forces FP32
        assert after["config"]["precision"]["remainder"] == "fp32"


def test_comparator_tells_host_noise_from_real_changes():
    """The fixture comparison passes another CPU's summation noise and ISA note, and fails
    every change a host cannot make."""
    before = {"model": {"sha256": "a" * 64}, "candidates": {"int8": {
        "artifact_sha256": "b" * 64, "kl": 5.620721922302927e-06, "flips": 3,
        "status": "PASS", "numerics": "exact; INT8 on ONNX Runtime's fused integer kernels on "
                                      "avx2: u8s8 pair sums can saturate in int16 (no VNNI)"}}}
    other_host = {"model": {"sha256": "a" * 64}, "candidates": {"int8": {
        "artifact_sha256": "c" * 64, "kl": 5.620721922295331e-06, "flips": 3,
        "status": "PASS", "numerics": "exact; INT8 on ONNX Runtime's fused integer kernels on "
                                      "avx2,avx512_vnni: int8 products summed exactly"}}}
    assert mismatches(other_host, before) == []
    for path, value in [(("model", "sha256"), "d" * 64), (("candidates", "int8", "kl"), 5.7e-06),
                        (("candidates", "int8", "flips"), 4),
                        (("candidates", "int8", "status"), "FAIL"),
                        (("candidates", "int8", "numerics"), "emulated")]:
        changed = json.loads(json.dumps(other_host))
        node = changed
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        assert len(mismatches(changed, before)) == 1, path
    assert mismatches({"a": 1}, {"a": 1, "b": 2}) and mismatches({"a": [1]}, {"a": [1, 2]})
