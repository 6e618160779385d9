"""The frozen "before" records of the run spine refactor (issue 14) and how they were made.

``python tests/run/record_fixture.py`` (from the repository root, with ``PYTHONPATH=$PWD``)
rebuilds the tiny world (tests/reliability/tinyworld.py) under a temporary root and runs the
real CLI once per entry of :data:`CONFIGS`; each record.json is saved as
``tests/run/data/record_before_<name>.json`` with the world root replaced by ``<ROOT>``.
History: the first fixtures were made on main at eb8b038, before any stage moved out of
app.py, and the issue-14 refactor reproduced them exactly (branch spine, 3e337e5: only the
recorded ort_cpu remainder changed, by design). The dev / test sign-off (issue 15) and the
ptq steps then changed records on purpose, so the fixtures were remade with this script on
the commit that added both. Session 4 remade them once more after the label-free metrics
(metrics.kl / abs_logit, agreement_slices, model.output / model.inputs) and the new verdict
keys (signoff_in_sweeps, supersedes, score floors): the comparator showed additions only, no
changed value; again after the merges of that session (data.info, ptq.range_search_error,
compare.max_outputs_per_run, search.proxy_remeasured_tensors: additions only). Session 7
(issue 28, the typed ptq stage) remade them: the comparator showed only ``calibration.ptq``
moved to the record's own ``ptq`` section and ``config.ptq`` gaining ``recipe`` / ``auto``
(the generic recipe's range search now comes from the recipe, so the ``range_search`` key
reads false); every number, artifact and verdict unchanged.
Issue 24 (engine check, dev tie rule) remade them on purpose: every candidate's
``backend_check`` is the engine check (status not_run for target=tensorrt on ORT CPU,
not_needed for ort_cpu; plan, budget, what_to_run; the old gate / agreement / accuracy /
blocks_recommendation keys are gone); verdict margins / thresholds are the sign-off's share
of the declared margin (relative 0.005 of 0.01 for target=tensorrt, where the engine
check is part of the bound; unchanged for ort_cpu), with the p-values, plan_n and reasons
that follow; the family's INT8 member is int8.minmax instead of int8.percentile (equal dev
accuracies: ties now go to the earliest calibrator).
Issue 24's
persistent test ledger remade them on purpose (branch ledger, on an avx512_vnni host): added
``config.verdict.ledger_path / min_power / power_sims``, ``signoff.ledger`` (the look, its alpha, earlier
looks, the model key), ``signoff.not_tested``, ``signoff.decision.look`` and each row's ``look`` /
``alpha_one_sided``, the members' ``signoff.look / look_id / alpha_one_sided``, and the power
plan rows' ``planned_power / power_method / power_sims / n_required_formula / min_power /
tested``; changed: look 1 tests at one-sided 0.0225 (0.9 x 0.025), so every test-split
interval is a 95.5% one (low / high / level / alpha, the gate's too), ``plan_n`` and the
reasons (one more: the look), the family and decision sha256, the recommendation basis, and
the power plan's ``n_required`` (simulated for the rule actually used, 398 instead of Nam's
381); no status changed.
Session 17 patched ``record_before_auto.json``'s ``ptq.choice`` by hand, the three differences
the comparator named after recipe auto's runner-up (recipe_choice.greedy_choice): GPTQ
scored within 5% of nearest, so bias correction was tried after both (one more trial, 4
evaluations) and the skipped sequential rounding's reason reads "... was not the best"; the
new trial's score is from an avx2 host, the others as they were.
Session 19 patched the same list by hand, the one difference the comparator can name after
``gptq_aware`` joined the weight-rounding dimension between ``gptq`` and ``gptq_sequential``:
the tiny world's GPTQ was not the best, so both later values are listed as not tried (no
trial, score or artifact changed).
Session 20 added ``precision.fp8_weight_rounding`` ("auto", the FP8 candidates' weight
rounding: run/fp8_weights.py) to ``config.precision`` by hand, one line per fixture: the
fixtures' runs have no FP8 candidate, so nothing else changes.
Session 16 added ``ptq.shift`` (false: a custom-recipe step) to ``config.ptq`` and
``ptq.settings`` by hand, two lines per fixture: the comparator named only that key.
Issue 24 (label-free shares, macro-F1, groups) remade them for three verdict config keys:
verdict.gallery_size added (1000), verdict.score_quantile null -> 0.05, verdict.min_groups
10 -> 75; no other comparable value changed (made on an avx512_vnni host: host-dependent
floats differ in their last digits and are compared by kind).
Session 9 remade them for two changes, nothing else differing: ``config.model.head.standardize``
added (false), and the search's ``power_plan`` text gains the churn gate's planned size (the
search now needs the gate's power on test too; ``n_required`` unchanged here).
Issue 27 removed one key by hand, nothing else: ``config.verdict.min_slice_n`` (read by
no code since the per-slice tests were folded into the sign-off; the report showed it as a
rule). The test's TestPolicy refactor of the same branch changed no value.
Session 23 patched the search's measured sensitivity by hand, the values the comparator
named after mode ``only`` began measuring each layer against an FP32 rest (0604a7b): the
baseline damage is 0 (no INT8 layer: the FP32 function), fc1's damage 7.38e-06 (Intel Xeon,
avx512_vnni / amx_int8), and the measured note says "the rest FP32"; ort_cpu (an FP32
remainder already) changed only the note. No ranking, artifact or verdict changed.
Session 24 patched three lines per fixture by hand, all the comparator named: the default
``compare.max_outputs_per_run`` 64 -> 256 (the tiny world's few tensors fit either way) and
the new recipe key ``stream_alpha`` (null: the tiny world has no Conv) in ``config.ptq`` and
``ptq.settings``.
Issue 46 (a detector's output kind) added config keys by hand, nothing else: ``data.labels``
(null), ``data.pages`` (the rendered layout pages' count, templates, seed) and
``model.output.decoder / family / class_names / decode / preprocess / gt_score_min`` (the
detection settings, null / empty / 0.25): the tiny world is no detector.
tests/run/test_record_fixture.py reruns the same configs and
compares, so any later change to a record is a visible, deliberate fixture update.
Session 25 added the search's ``confirmation`` (empty) and ``dev_halves`` (not split: the
tiny world's 24 dev examples are fewer than two halves of verdict.min_n) with a script that
copies exactly those two keys from a fresh run (rewritten sorted, indent 1, as
:func:`run_record` writes; which also moved session 24's hand-placed ``stream_alpha`` into
sorted order). Nothing else differed. Then, for the search's assurance (quantkit/verdict/
assurance.py), the same script copied each search evaluation's new ``extra.assurance`` and
its ``power_plan`` text (one clause added) from a fresh run; no status changed (the tiny
world's 24 test examples never gave the planned power).
Issue 46 (branch headrule) added ``precision.concat_range_ratio`` (16.0, the Concat rule:
quantkit/graph/mixed_concat.py) to ``config.precision`` by hand, one line per fixture, in
sorted order: the tiny world has no Concat, so its scope, plans and artifacts are unchanged.
Issue 49 (the ledger keyed by what the test is about) copied, with a script, exactly these
keys from fresh runs: ``config.verdict.ledger`` / ``new_study`` and ``config.model.id``
(null), and ``signoff.ledger`` whole: the ledger is the world's own ``<ROOT>/ledger.sqlite``
(tinyworld.cli_args; it was the cache's), ``model_key`` is the tiny model's fingerprint
(was the file's sha256) with its basis, ``same_data`` names source content, and the new keys
``location`` / ``model_looks`` / ``first_in_ledger`` / ``ledger_knows`` / ``joined_by``;
look ids and times are new. The comparator named nothing else.
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
sys.path.insert(0, str(HERE.parent / "reliability"))
sys.path.insert(0, str(HERE.parent))

import tinyworld  # noqa: E402

#: name -> CLI overrides on top of tinyworld.cli_args (which sets bench.enabled=false)
CONFIGS: dict[str, tuple[str, ...]] = {
    # default target (tensorrt rules, FP16 remainder), every calibrator, the search
    "tensorrt": (),
    # ort_cpu target (FP32 remainder, asymmetric ranges) with the latency stage on
    "ort_cpu": ("target=ort_cpu", "bench.enabled=true", "bench.batch_sizes=[1,4]",
                "bench.max_seconds=0.2", "bench.repeats=8", "bench.n_boot=100"),
    # ptq.recipe=auto: the recipe chosen on dev, every trial and its score in record.ptq
    "auto": ("ptq.recipe=auto", "ptq.auto.subset=64"),
}

#: Fields that legitimately differ between two runs of one config (times, paths, host,
#: installed packages, stage timings, latency numbers, the schema version added later, and
#: where and how the run ran: ``job``, launcher, worker host, attempt, added by issue 26).
VOLATILE = {"run_dir", "started", "finished", "stages", "stage_cache", "seconds",
            "eval_seconds", "command", "latency", "host", "packages", "schema_version",
            "measured_at", "collect_seconds", "job"}


def normalize(obj, root: str):
    """``obj`` with every occurrence of the world root replaced by ``<ROOT>``."""
    if isinstance(obj, dict):
        return {normalize(k, root): normalize(v, root) for k, v in obj.items()}
    if isinstance(obj, list):
        return [normalize(v, root) for v in obj]
    if isinstance(obj, str):
        return obj.replace(root, "<ROOT>")
    return obj


#: Notes that quote measured timings (the slower-than-FP32 warning) differ between runs.
TIMED_NOTES = ("recommended candidate ",)


def comparable(obj):
    """The record without :data:`VOLATILE` keys (at any depth) and timing notes."""
    if isinstance(obj, dict):
        return {k: ([n for n in v if not str(n).startswith(TIMED_NOTES)] if k == "notes"
                    else comparable(v)) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [comparable(v) for v in obj]
    return obj


# -- what depends on the host, compared by kind (issue 24: the suite passes on any x86) ---
#
# The fixtures were made on one CPU; the suite runs on others (AVX2, AVX-512 VNNI, AMX).
# FP32 inference sums in another order on each (MLAS kernels per ISA), so every float that
# comes from an inference (ranges, KL, NMSE, measured damage) may differ in its last digits,
# and a hash of bytes that hold such a float (an artifact with its scales, a ranges file, a
# plan with its amax) may differ. The numerics note names the host's ISA. Everything else
# (config, data and model hashes, plans' node sets, counts, verdicts, the family, the search
# path) is host-independent and compared exactly.

#: floats: equal up to FP32 summation order (differences seen: ~1e-11 relative)
FLOAT_RTOL, FLOAT_ATOL = 1e-4, 1e-9
#: record sections whose hashes are of the run's inputs (host-independent, compared exactly)
INPUT_SECTIONS = ("model", "data")
_SHA = re.compile(r"^[0-9a-f]{64}$")
#: the host-dependent clause of a candidate's numerics note (backends/ort.py: qdq_mode_note)
_ISA_CLAUSE = re.compile(r"INT8 on ONNX Runtime's fused integer kernels on .*$")


def mismatches(after, before, path: str = "") -> list[str]:
    """Where two comparable records differ beyond what the host may change (see above)."""
    if isinstance(after, dict) and isinstance(before, dict):
        if set(after) != set(before):
            return [f"{path}: keys {sorted(set(after) ^ set(before))} in only one record"]
        return [m for k in sorted(after) for m in mismatches(after[k], before[k], f"{path}/{k}")]
    if isinstance(after, list) and isinstance(before, list):
        if len(after) != len(before):
            return [f"{path}: {len(after)} items, fixture {len(before)}"]
        return [m for i, (a, b) in enumerate(zip(after, before))
                for m in mismatches(a, b, f"{path}[{i}]")]
    if isinstance(after, float) and isinstance(before, (int, float)) and \
            not isinstance(before, bool):
        ok = math.isclose(after, before, rel_tol=FLOAT_RTOL, abs_tol=FLOAT_ATOL)
        return [] if ok else [f"{path}: {after!r} != fixture {before!r}"]
    if isinstance(after, str) and isinstance(before, str):
        if _SHA.match(after) and _SHA.match(before) and \
                not path.lstrip("/").startswith(INPUT_SECTIONS):
            return []  # a hash of bytes holding measured floats: compared by kind
        after, before = _ISA_CLAUSE.sub("<ISA>", after), _ISA_CLAUSE.sub("<ISA>", before)
    return [] if after == before and type(after) is type(before) else \
        [f"{path}: {after!r} != fixture {before!r}"]


def run_record(root: Path, name: str) -> dict:
    """One real CLI run of config ``name`` on a fresh tiny world under ``root``; its record."""
    world = tinyworld.make_world(root)
    r = tinyworld.run_quantkit(tinyworld.override(tinyworld.cli_args(world), *CONFIGS[name]),
                               cwd=root)
    if r.returncode != 0:
        raise RuntimeError(f"quantkit run {name} failed:\n{r.stderr[-3000:]}")
    rec = json.loads((world["run"] / "record.json").read_text(encoding="utf-8"))
    return normalize(rec, str(root))


def main() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    for name in CONFIGS:
        with tempfile.TemporaryDirectory() as tmp:
            rec = run_record(Path(tmp) / "w", name)
        out = DATA / f"record_before_{name}.json"
        out.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(out)


if __name__ == "__main__":
    main()
