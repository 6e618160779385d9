"""Stage "preflight": one clear error before any work (unwritable dirs, a missing backend, a
model file that cannot run with these settings, a test ledger that is not one)."""

from __future__ import annotations

import logging

import onnx

from quantkit.backends.ort import check_providers
from quantkit.backends.trt.infer import preflight as trt_preflight
from quantkit.data.text_inputs import check_text_inputs
from quantkit.errors import LedgerError
from quantkit.fsutil import ensure_dir
from quantkit.ledger_location import adopt_legacy, ledger_location
from quantkit.ledger_store import LedgerStore
from quantkit.models.fit import check_custom_ops, check_fixed_batch, input_specs, resolve_output
from quantkit.models.model import inspect_onnx
from quantkit.run.context import RunContext
from quantkit.run.stages.signoff import signoff_skip_reason
from quantkit.run.detection import detector_of

__all__ = ["preflight", "check_ledger", "check_model_fits"]

log = logging.getLogger(__name__)


def preflight(ctx: RunContext) -> None:
    """One clear error before any work: unwritable dirs, a missing backend, a bad ONNX file."""
    s = ctx.settings
    ensure_dir(ctx.cache_dir, key="cache_dir")
    if s.stage_cache and ctx.cache is not None:
        ensure_dir(ctx.cache.root, key="stage_cache_dir" if s.stage_cache_dir else "cache_dir")
    if s.backend.name == "trt":  # tensorrt of the pinned major, libcudart, backend.trt.device
        trt_preflight(s)
    else:  # an execution provider this onnxruntime lacks
        check_providers(s.backend.providers)
    if s.model.kind == "onnx":
        proto, _, output, _ = inspect_onnx(s.model.path, output=s.model.output.name)
        check_model_fits(s, proto)
    if s.model.output.kind == "detection":  # the decoder against the declared outputs
        detector_of(s, ctx.cache_dir)
    check_ledger(ctx)


def check_ledger(ctx: RunContext) -> None:
    """The test ledger of a run that will sign off opens as a quantkit ledger (created where
    missing; the cache's ledger of earlier versions copied to the default place once:
    quantkit/ledger_location.py); a file that is not one (random bytes, another database)
    is one LedgerError here, before any artifact is written."""
    if signoff_skip_reason(ctx.settings) is not None:
        return
    where = ledger_location(ctx.settings)
    adopt_legacy(where, ctx.cache_dir)
    if where.url is not None and where.shown != where.url:
        log.warning("test ledger: verdict.ledger holds a password; the record, report and log "
                    "show %s, but Hydra's %s/.hydra/ keeps the command line as typed: give the "
                    "password in PGPASSWORD or ~/.pgpass instead", where.shown, ctx.run_dir)
    try:
        LedgerStore(where.target).check()
    except LedgerError as exc:
        at = {"default": "the default test ledger (verdict.ledger unset)",
              "verdict.ledger_path (deprecated)": "verdict.ledger_path"}.get(where.chosen_by,
                                                                            where.chosen_by)
        fix = (f"move {where.shown} aside (its looks, if it held any, are then unknown to "
               "later runs: say so to the reviewer), or set verdict.ledger=<another file> (a "
               "new ledger, or the intact one)") if where.url is None else exc.fix
        raise LedgerError(exc.what, where=at, value=where.shown, fix=fix) from exc


def check_model_fits(settings, proto) -> None:
    """A BYO model that cannot run with these settings: one clear error before any data is
    read (custom-domain ops, a fixed batch vs the batch settings; data.kind: data/feeds.py)."""
    s = settings
    check_custom_ops(proto)
    specs = input_specs(proto)
    resolve_output(proto, s.model.output, has_labels=s.data.label_column is not None)
    if s.data.kind == "text" and any(sp.elem_type in (onnx.TensorProto.INT64,
                                                        onnx.TensorProto.INT32) for sp in specs):
        # model.inputs.* vs a text model's input names (an image model given text: data.kind
        # is checked with the feeds)
        check_text_inputs([sp.name for sp in specs], s.model.inputs)
    sizes = {"data.batch_size": s.data.batch_size, "backend.batch_size": s.backend.batch_size,
             "calibrator.batch_size": s.calibrator.batch_size,
             "compare.batch_size": s.compare.batch_size}
    if s.bench.enabled:
        sizes["bench.batch_sizes"] = list(s.bench.batch_sizes)
    check_fixed_batch(specs, sizes)
