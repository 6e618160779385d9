"""What the record holds and the report deliberately does not show, and why.

Everything a stage records is rendered somewhere in report.md / report.html, or listed here
(report.json always holds all of it: it is the record). ``tests/record/test_record_coverage.py``
walks the schema (quantkit/record/) over every fixture record and fails when a field is
neither rendered nor listed, or when an entry here names no field of the schema.

Keys: ``"Class.field"`` (one field) or ``"Class"`` (every field of that record type).
"""

from __future__ import annotations

__all__ = ["NOT_RENDERED"]

_SAME = "the same value is shown from "
_DETAIL = "a detail of what the report shows: "
_LEGACY = "records before schema 1 (kept as recorded; not drawn in the report)"

NOT_RENDERED: dict[str, str] = {
    # -- the calibration pass
    "ActivationSummary.min": _DETAIL + "the activation plot draws the |x| percentiles and max",
    "ActivationSummary.max": _DETAIL + "the activation plot draws the |x| percentiles and max",
    "ActivationSummary.mean": _DETAIL + "the activation plot draws the |x| percentiles and max",
    "ActivationSummary.n_nonfinite": "non-finite tensors are excluded; the exclusions are listed",
    "ActivationSummary.n_zero": _DETAIL + "the activation plot draws the |x| percentiles and max",
    # -- a candidate's entry
    "CandidateRecord.dev": _SAME + "the family section's dev basis (the sweep report ranks on it)",
    "DevEvidence": _SAME + "the family section's dev basis (the sweep report ranks on it)",
    "CandidateRecord.eval_seconds": _DETAIL + "the stages table times the evaluate stage",
    "CandidateRecord.mean_abs_logit_fp32": _SAME + "metrics.abs_logit (task metrics table)",
    "CandidateRecord.n": _SAME + "metrics.n (task metrics table)",
    "CandidateRecord.signoff": _SAME + "the family section (order, look, familywise status)",
    "CandidateSignoff": _SAME + "the family section (order, look, familywise status)",
    "CandidateRecord.engine": "the TensorRT engine's file and metadata: quantkit.export.triton "
                              "reads them to export the signed plan",
    "EngineRecord": "the TensorRT engine's file and metadata: quantkit.export.triton reads "
                    "them to export the signed plan",
    "EngineMeta": "the TensorRT engine's metadata: quantkit.export.triton copies it into "
                  "quantkit_export.json",
    "CandidateRecord.engine_layers": "backend=trt: the flagged tensors re-measured on the engine, "
                                     "for a reviewer who opens report.json",
    "CandidateRecord.output": "an embedding output's name, pooling and width: the model section "
                              "names the compared output",
    "EmbeddingOutput": "an embedding output's name, pooling and width: the model section names "
                       "the compared output",
    "Interval.ref": _SAME + "the task metrics table (the reference's and candidate's values)",
    "Interval.cand": _SAME + "the task metrics table (the reference's and candidate's values)",
    "Interval.se": "written None since the paired bootstrap replaced the normal interval",
    "Margin.decided": _SAME + "the thresholds (the margin, or the declared minimum share)",
    "DecidedAt.threshold": _SAME + "the thresholds (the margin, or the declared minimum share)",
    "Margin.test": _SAME + "the thresholds' 'tested' row (exact binomial share)",
    "McNemar.a": _LEGACY, "McNemar.d": _LEGACY,
    "SliceInterval.level": _SAME + "the verdict's level (one per table)",
    "SliceInterval.se": "written None since the paired bootstrap replaced the normal interval",
    "SliceTest.n_boot": _SAME + "the bootstrap resamples threshold row",
    "SliceTest.p_noninferiority": _DETAIL + "the slice table shows the Holm-adjusted p-values",
    "SliceTest.p_regression": _DETAIL + "the slice table shows the Holm-adjusted p-values",
    "VerdictRecord.signoff": "the whole sign-off test (methods, p-values, gate): the verdict "
                             "shows its interval, status and reasons",
    "TestRecord": "the whole sign-off test (methods, p-values, gate): the report shows its "
                  "interval, n, flip rate and status",
    "FlaggedLayer.position": _DETAIL + "the per-layer table is in graph order",
    "FlaggedLayer.int8_sqnr_db": _SAME + "the per-layer table (the candidate's SQNR)",
    "FlaggedLayer.fp16_sqnr_db": _SAME + "the FP16 candidate's per-layer SQNR (the floor column)",
    "FlaggedLayer.int8_noise": _DETAIL + "the per-layer table shows the noise / floor ratio",
    "FlaggedLayer.fp16_noise": _DETAIL + "the per-layer table shows the noise / floor ratio",
    "FlaggedLayer.floor": _DETAIL + "the per-layer table shows the noise / floor ratio",
    "LayerStats.count": _DETAIL + "the per-layer comparison's example count is its stage's",
    "LayerStats.max_abs_error": _DETAIL + "the per-layer table shows SQNR, cosine, relative error",
    "LayerStats.mean_abs_error": _DETAIL + "the per-layer table shows SQNR, cosine, relative "
                                           "error",
    "EngineCheckPlan.required": _SAME + "the engine check's status (not needed / NOT run / ran)",
    "EngineCheckPlan.runs_here": _SAME + "the engine check's status (not needed / NOT run / ran)",
    # -- a detector's evidence (record/detection.py)
    "DetectionRecord.n_gt": _SAME + "the AP-per-class table's ground-truth boxes (their sum)",
    "DetectionVsFp32.per_class": "with labels the AP-per-class table is against the labels; a "
                                 "label-free run renders this one instead",
    "DetectionVsFp32.pr": "with labels the PR curves are against the labels; a label-free run "
                          "draws these instead",
    "DetectionVsFp32.pr50": "with labels the PR curves are against the labels; a label-free "
                            "run draws these instead",
    "Margin.relative_to": _SAME + "the margin line (relative to FP32's value of the metric)",
    # -- latency
    "LatencyStats.batch_size": _SAME + "the table's batch column",
    "LatencyStats.level": _SAME + "the method line (interval level)",
    "LatencyStats.mean_ms": _DETAIL + "the table shows P50 / P90 / P99 with their intervals",
    "LatencyStats.min_ms": _DETAIL + "the table shows P50 / P90 / P99 with their intervals",
    "LatencyStats.max_ms": _DETAIL + "the table shows P50 / P90 / P99 with their intervals",
    "LatencyStats.warmup": _SAME + "the method line (warm-up runs)",
    "LatencyStats.feeds": _SAME + "the method line (eval batches cycled)",
    "LatencyStats.timed_seconds": _DETAIL + "the stages table times the latency stage",
    "LatencyStats.timed": "GPU timing details (CUDA events vs host copies), in report.json",
    "LatencyStats.cuda_graphs": "GPU timing details (CUDA events vs host copies), in report.json",
    "LatencyStats.h2d_ms_mean": "GPU timing details (CUDA events vs host copies), in report.json",
    "LatencyStats.d2h_ms_mean": "GPU timing details (CUDA events vs host copies), in report.json",
    "VsFp16.pairs": _DETAIL + "the ratio's runs; the table shows the median ratio and interval",
    "LatencySettings.batch_sizes": _SAME + "the table's batch column",
    "LatencyRecord.seconds": _DETAIL + "the stages table times the latency stage",
    "HostLabel.gpu": _SAME + "the record's host (GPU facts of backend=trt)",
    "CostRow.target_qps": _SAME + "the cost table's target QPS",
    "CostRow.p99_budget_ms": _SAME + "the cost table's P99 budget",
    "CostFit.qps_per_instance_ci": _SAME + "the instances interval derived from it",
    "CostRow.saving_note": _SAME + "the cost table's saving column (FP32 cannot meet the budget)",
    # -- the precision search
    "ParetoPoint.k": _SAME + "the FP16 layer count (k is the prefix size)",
    "SearchEvalExtra.power": "each evaluation's power-plan sentence, test size and assurance: "
                             "the table shows the status they give",
    "PowerReading": "each evaluation's power-plan sentence, test size and assurance: the table "
                    "shows the status they give",
    "SearchEvalExtra.accuracy": _DETAIL + "the table shows the decision metric's delta",
    "MeasureCost.steps": "each subset evaluation of the measured sensitivity: the ranking shows "
                         "each layer's measured damage",
    "MeasureStep": "each subset evaluation of the measured sensitivity: the ranking shows each "
                   "layer's measured damage",
    "FormatFill.ran": _SAME + "the format fill's 'Ran' / 'Not run' line",
    "FormatFillSkipped.ran": _SAME + "the format fill's 'Ran' / 'Not run' line",
    # -- post-training steps
    "PtqChoice.budget_evaluations": _DETAIL + "the trials table lists every evaluation",
    "PtqChoice.evaluations": _SAME + "the trials table (one row per evaluation)",
    "PtqTrial.examples": _DETAIL + "the dev examples a trial scored on (recipe auto's subset)",
    "PtqTrial.seconds": _DETAIL + "the stages table times the ptq stage",
    # -- the sign-off
    "SignoffRecord.dev": _SAME + "the family section's dev basis",
    "FamilyRecord.alpha_one_sided": _SAME + "the sign-off's one-sided alpha (family line)",
    "FamilyRecord.supersedes": _SAME + "the test ledger line (the look it supersedes)",
    "PowerPlanRecord.adequate": _SAME + "the plan's sentence and each row's 'large enough'",
    "PowerPlanRecord.n_test": _SAME + "each row's test split size",
    "PowerRow.alpha_one_sided": _SAME + "the sign-off's one-sided alpha (family line)",
    "PowerRow.position": _SAME + "the family's order",
    "PowerRow.gate": "the churn gate's own plan: the row's reason states its planned size",
    "PowerRow.analytic": "the analytic plan the rule-based plan replaced: the row shows the "
                         "rule's test size and planned power",
    "AnalyticPlan": "the analytic plan the rule-based plan replaced: the row shows the rule's "
                    "test size and planned power",
    "PowerRow.rule": _DETAIL + "how the planned power was simulated; the row's reason names it",
    "RulePlan": _DETAIL + "how the planned power was simulated; the row's reason names it",
    "LedgerEvaluation.index": _SAME + "the order of this run's test evaluations",
    "TestLedgerRecord.complete": _SAME + "'each candidate evaluated once'",
    "DecisionRecord.alpha_one_sided": _SAME + "the sign-off's one-sided alpha (family line)",
    "DecisionRecord.look": _SAME + "the test ledger line (this look)",
    "LookOfDecision": _SAME + "the test ledger line (this look)",
    "DecisionRow.position": _SAME + "the family's order",
    "DecisionRow.p_noninferiority": _DETAIL + "the table shows the adjusted p-value",
    "DecisionRow.p_regression": _DETAIL + "FAIL needs the Holm-adjusted regression p; the "
                                          "row's reason says it",
    "DecisionRow.p_regression_adjusted": _DETAIL + "FAIL needs the Holm-adjusted regression p; "
                                                   "the row's reason says it",
    "DecisionRow.tested": _SAME + "signoff.test (the member's interval, n, flip rate)",
    "DecisionTest": _SAME + "signoff.test (the member's interval, n, flip rate)",
    "DecisionRow.look": _SAME + "the test ledger line (this look)",
    "DecisionRow.alpha_one_sided": _SAME + "the sign-off's one-sided alpha (family line)",
    "LookFacts.look": _SAME + "the test ledger line's summary (look k of this model)",
    # -- provenance
    "DataRecord.label_free": _SAME + "data.info.label_free (data load table)",
    "Model.cached": "whether the prepared model came from the cache: the CLI summary says it",
    # -- label-free and embedding details
    "Distribution.min": _DETAIL + "the histogram shows the distribution, its caption the mean "
                                  "and 1st percentile",
    "Distribution.p5": _DETAIL + "the histogram shows the distribution, its caption the mean "
                                 "and 1st percentile",
    "Distribution.median": _DETAIL + "the histogram shows the distribution, its caption the "
                                     "mean and 1st percentile",
    "Distribution.p95": _DETAIL + "the histogram shows the distribution, its caption the mean "
                                  "and 1st percentile",
    "Distribution.max": _DETAIL + "the histogram shows the distribution, its caption the mean "
                                  "and 1st percentile",
    "EmbeddingRecord.recall": _SAME + "metrics.recall_at_k (its mean)",
    "EmbeddingRecord.recall_k": _SAME + "verdict.recall_k in the recorded config",
    "EmbeddingRecord.top1_neighbour_agreement": _DETAIL + "the verdict reads recall@k",
    "EmbeddingRecord.gallery": _SAME + "the verdict margin's gallery (thresholds)",
    "GroupStats.n_groups": _DETAIL + "the family table shows the intra-group correlation",
    "GroupStats.mean_group_size": _DETAIL + "the family table shows the intra-group correlation",
    "GroupStats.design_effect": _DETAIL + "the family table shows the intra-group correlation",
    "Gallery.requested": _SAME + "verdict.gallery_size in the recorded config",
    "Gallery.seed": _SAME + "the run's seed",
    # -- the engine check
    "BackendCheckRecord.engine_tolerance": _SAME + "the gate's tolerance",
    "EngineGate.alpha": _DETAIL + "the gate's status and observed deficit are shown",
    "EngineGate.lower": _DETAIL + "the gate's status and observed deficit are shown",
    "EngineGate.upper": _DETAIL + "the gate's status and observed deficit are shown",
    "EngineGate.n": _SAME + "the engine check's n",
    "EngineGate.n_needed": _SAME + "the engine check's what-to-run line (the size it needs)",
    "EngineGate.reasons": _DETAIL + "the gate's status and observed deficit are shown",
    # -- the sign-off's ledger
    "EarlierLook.alpha_declared": "an earlier look's details: `quantkit ledger` lists them",
    "EarlierLook.n_examples": "an earlier look's details: `quantkit ledger` lists them",
    "EarlierLook.overlap": _SAME + "the examples it shares with this look",
    "EarlierLook.run_dir": "an earlier look's details: `quantkit ledger` lists them",
    "EarlierLook.state": _SAME + "its statuses (the state when it has none)",
    "EarlierLook.supersedes": "an earlier look's details: `quantkit ledger` lists them",
    "LookFacts.model_looks": _SAME + "the ledger line of what it knew ('N earlier look(s)')",
    "LookFacts.joined_by": _SAME + "the test ledger line's summary (why the look is charged "
                                  "where it is)",
    "FamilyNotTested.candidates": "always empty (no member was tested): the section says so",
    "SignoffSkipped.skipped": _SAME + "the recommendation's reason (the run wrote both)",
    "TestLedgerRecord.missing": _SAME + "'each candidate evaluated once' (nothing missing)",
    "ProxyScore.inputs_missing": _DETAIL + "the ranking's proxy scores already leave them out",
    # -- post-training steps
    "StepProof.agreement": _DETAIL + "the proof table shows the output error and its reason",
    "StepProof.tolerance": _SAME + "the proof's reason (kept within the tolerance, or dropped)",
}
