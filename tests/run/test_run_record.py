"""Record assembly: the RunRecord from typed stage results; the recorded config is what ran."""

from __future__ import annotations

from quantkit.record.run_record import SCHEMA_VERSION, RunRecord
from quantkit.run.stages.model import Prepared
from quantkit.run.stages.record import RunResults, record as assemble_record
from quantkit.run.stages.backend_check import backend_check as check_backend
from quantkit.run.identity import recorded_config
from quantkit.report.summary import summary_lines


def test_record_from_results(ctx, reference, artifacts, evaluations, layers, calibration):
    res = RunResults(prepared=None, reference=reference, calibration=calibration,
                     artifacts=artifacts, evaluations=evaluations,
                     backend_checks={n: check_backend(ctx, a, reference) for n, a in artifacts.items()},
                     layers=layers)
    rec = assemble_record(RunRecord(experiment="t", run_dir=str(ctx.run_dir), command="",
                                    config={}, seed=0), res, ctx.run_dir)
    assert rec.schema_version == SCHEMA_VERSION
    assert list(rec.candidates) == ["fp32", *artifacts]
    written = rec.to_dict()  # record.json as the run writes it
    c = written["candidates"]["int8.mse"]
    assert c["metrics"] == evaluations["int8.mse"].evidence["metrics"]
    assert c["plan_counts"] == artifacts["int8.mse"].plan.counts() and "layers" in c
    assert c["backend_check"]["status"] == "not_run" and "layers" not in written["candidates"]["fp32"]
    models = {k: v for k, v in rec.artifacts.items() if k.startswith("model.")}
    assert models == {f"model.{n}.onnx": a.sha256 for n, a in artifacts.items()}
    assert (ctx.run_dir / "SHA256SUMS").is_file()
    assert rec.recommended is None  # no sign-off ran: nothing is recommended on dev alone
    assert c["verdict"]["split"] == "dev" and rec.candidates["int8.mse"].verdict.split == "dev"
    assert any(line.startswith("recommended:") for line in summary_lines(rec))
    assert Prepared.__dataclass_fields__  # the prepare stage's result type is public


def test_recorded_config_is_what_ran(tiny):
    from runworld import compose_cfg
    from quantkit.settings import build

    cfg = compose_cfg(tiny, "target=ort_cpu")
    assert cfg.precision.remainder == "fp16"  # what was asked for
    assert recorded_config(cfg, build(cfg))["precision"]["remainder"] == "fp32"  # what ran
    cfg = compose_cfg(tiny)
    assert recorded_config(cfg, build(cfg))["precision"]["remainder"] == "fp16"
