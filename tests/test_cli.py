"""The real CLI, in subprocesses: help, --cfg, one-line errors, lazy imports."""

from __future__ import annotations

import subprocess
import sys


def test_help_lists_groups(cli):
    r = cli("--help")
    assert r.returncode == 0
    for group in ("model", "data", "calibrator", "precision", "backend", "verdict", "report",
                  "experiment"):
        assert f"{group}:" in r.stdout


def test_cfg_job_prints_composed_config(cli):
    r = cli("experiment=bert_int8", "--cfg", "job")
    assert r.returncode == 0
    assert "experiment_name: bert_int8" in r.stdout and "minilm_sentiment" in r.stdout


def test_bad_type_is_one_line_naming_key(cli, tmp_path):
    r = cli("experiment=bert_int8", "data.eval.limit=abc")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "data.eval.limit" in lines[0]
    assert not (tmp_path / "experiments").exists()


def test_unknown_key_and_group_are_one_line(cli):
    for args, needle in ((("data.eval.limt=5",), "data.eval.limt"),
                         (("experiment=bert_int9",), "bert_int8"),
                         (("calibrator=kl",), "entropy")):
        r = cli(*args)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], lines


def test_missing_onnx_file_is_one_line_naming_path(cli):
    r = cli("model=onnx", "model.path=/nonexistent.onnx")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "/nonexistent.onnx" in lines[0]


def test_import_is_lazy():
    code = ("import quantkit, quantkit.app, quantkit.settings, quantkit.data, quantkit.models, "
            "quantkit.backends.ort, sys; "
            "assert 'tensorrt' not in sys.modules and 'torch' not in sys.modules, "
            "[m for m in ('tensorrt', 'torch') if m in sys.modules]")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_fp8_on_a_gpu_without_fp8_is_one_line_naming_target_and_format(cli):
    r = cli("experiment=bert_int8", "gpu.sm=86", "precision.formats=[int8,fp8]")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "sm 86" in lines[0] and "fp8" in lines[0], lines
    r = cli("experiment=bert_int8", "target.sm=86")  # the GPU is gpu.sm, not target.sm
    assert r.returncode == 2 and "gpu.sm=86" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
