"""Stage search on the tiny world: the mixed candidate from typed results (not the record)."""

from __future__ import annotations

from quantkit.run import search_mixed, search_skip_reason


def test_search_builds_and_evaluates_the_mixed_candidate(ctx, artifacts, evaluations, layers,
                                                          reference):
    out = search_mixed(ctx, artifacts, evaluations, layers, reference)
    best = max((n for n in artifacts if n.startswith("int8.")),
               key=lambda n: evaluations[n].metric("accuracy"))
    assert out.calibrator == best and out.search["calibrator"] == best
    assert out.search["full_evals"] <= out.search["bound"]
    assert out.artifact.name == "mixed" and (ctx.run_dir / "model.mixed.onnx").is_file()
    cand = out.candidate_record()
    assert cand["verdict"]["status"] in ("PASS", "FAIL", "INCONCLUSIVE")
    assert cand["artifact_sha256"] == out.artifact.sha256
    assert set(out.fp16_layers) <= set(artifacts[best].plan.int8_nodes())


def test_no_int8_candidate_no_search(ctx, artifacts, evaluations, layers, reference):
    only = {"fp16": artifacts["fp16"]}
    assert search_mixed(ctx, only, evaluations, layers, reference) is None


def test_plain_runs_search(ctx):
    assert search_skip_reason(ctx.settings) is None
