"""quantkit.run: the stages of one run, one module each (issue 14; ARCHITECTURE.md).

Every stage is a function ``(ctx: RunContext, typed inputs) -> typed result``; each result
has ``to_record()``. :func:`quantkit.app.run` calls them in order and assembles the
RunRecord once at the end (:func:`assemble_record`). Stage order:

    check_preflight -> load_data -> prepare_model (feeds, ModelGraph) -> evaluate_reference
    -> quant_scope -> check_fp16_range -> apply_ptq (QuantSource) -> calibrate
    -> build_artifacts -> evaluate_artifact -> compare_layers -> search_mixed -> check_backend
    -> family_members -> sign_off -> measure -> recommend_signed -> assemble_record
"""

from quantkit.run.artifacts import (Artifact, build_artifact, build_artifacts, build_variant,
                                    plan_for_ranges)
from quantkit.run.backend_check import BackendCheck, check_backend
from quantkit.run.calibration import Calibration, calibrate
from quantkit.run.context import RunContext, make_context
from quantkit.run.engine import build_trt_engine
from quantkit.run.evaluation import (Evaluation, evaluate, evaluate_artifact, evaluate_reference,
                                     numerics_note)
from quantkit.run.fp16_range import Fp16Range, check_fp16_range
from quantkit.run.latency import LatencyReport, latency_feeds, latency_reuse, measure
from quantkit.run.layerwise import LayerReport, compare_layers
from quantkit.run.prepare import (Prepared, check_preflight, load_data, prepare_model,
                                  prepared_context, text_encoder)
from quantkit.run.ptq_stage import QuantSource, apply_ptq
from quantkit.run.assemble import (RunResults, assemble_record, candidate_records, record_files,
                                 recorded_config, slower_than_fp32, target_note,
                                 write_sha256sums)
from quantkit.run.scope import QuantScope, quant_scope
from quantkit.run.signoff import (SignOff, family_members, recommend_signed, sign_off,
                                  signoff_skip_reason)
from quantkit.run.search import (SearchOutcome, declared_mixed, measure_sensitivity, search_mixed,
                                 search_skip_reason)
from quantkit.run.summary import summary_lines

__all__ = ["SignOff", "family_members", "recommend_signed", "sign_off", "Artifact", "build_artifact", "build_artifacts", "build_variant", "plan_for_ranges", "BackendCheck",
           "check_backend", "Calibration", "calibrate", "RunContext", "make_context",
           "build_trt_engine", "Evaluation", "evaluate",
           "evaluate_artifact", "evaluate_reference", "numerics_note", "Fp16Range",
           "check_fp16_range", "LatencyReport", "latency_feeds", "latency_reuse", "measure",
           "LayerReport", "compare_layers", "Prepared", "check_preflight", "load_data",
           "prepare_model", "prepared_context", "text_encoder", "QuantSource", "apply_ptq",
           "RunResults", "assemble_record", "candidate_records", "record_files",
           "recorded_config", "slower_than_fp32", "target_note", "write_sha256sums",
           "QuantScope", "quant_scope", "SearchOutcome", "declared_mixed", "measure_sensitivity",
           "search_mixed", "search_skip_reason", "signoff_skip_reason", "summary_lines"]
