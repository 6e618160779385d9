"""How the report shows a verdict and an engine check: what was signed off, what was not.

A run signs off only the family it declared on dev (``record.signoff.family``), once on
the test split; every other candidate carries a *dev* verdict (``verdict.split == "dev"``),
which chose but proves nothing. Wherever the report shows a verdict (cards, tables, plots)
a dev-only candidate reads "<STATUS> on dev; not signed off", never a bare PASS, and is
drawn in the neutral colour, as the terminal summary says it ("(PASS on dev; not signed
off)"). Records from before the dev / test sign-off (no ``signoff``, no ``verdict.split``)
are shown as recorded.

The engine check (run/stages/backend_check.py) of the recommended candidate goes into the
recommended banner: the deployed artifact's bound when it passed, and what to run when it
has not run or did not pass.

Formatting only: every text comes from the record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quantkit.record.migrate import as_record
from quantkit.record.run_record import RunRecord
from quantkit.report.fmt import DASH, status_class

__all__ = ["NOT_SIGNED_OFF", "VerdictView", "engine_lines", "signed_candidates", "trt_command",
           "verdict_view"]

NOT_SIGNED_OFF = "not signed off"
DEV_CLASS = "dev"


@dataclass(frozen=True)
class VerdictView:
    """``text``: what the badge says; ``cls``: its CSS class; ``dev_only``: not signed off."""

    text: str
    cls: str
    dev_only: bool


def signed_candidates(record: RunRecord | Mapping[str, object]) -> frozenset[str] | None:
    """The candidates signed off on test (the declared family), an empty set when the run
    signed nothing off (a sweep job, or no family), None for a record from before the
    dev / test sign-off."""
    record = as_record(record)
    so = record.signed
    if so is not None and so.family.candidates:
        return frozenset(so.family.candidates)
    has_split = any(c.verdict is not None and c.verdict.split for c in record.candidates.values())
    return frozenset() if (record.signoff is not None or has_split) else None


def verdict_view(record: RunRecord | Mapping[str, object], name: str,
                 status: str | None) -> VerdictView:
    """The badge of candidate ``name`` whose recorded verdict status is ``status``."""
    record = as_record(record)
    text = str(status) if status not in (None, "") else DASH
    signed = signed_candidates(record)
    c = record.candidate(name)
    if signed is None or name in signed or c is None or c.verdict is None or status in (None, ""):
        return VerdictView(text, status_class(status), False)
    return VerdictView(f"{text} on dev; {NOT_SIGNED_OFF}", DEV_CLASS, True)


def trt_command(command: str | None) -> str:
    """The run's command with ``backend=trt`` (any ``backend=`` group choice replaced)."""
    words = [w for w in str(command or "python -m quantkit ...").split()
             if not w.strip("'\"").startswith("backend=")]
    return " ".join([*words, "backend=trt"])


def engine_lines(record: RunRecord | Mapping[str, object],
                 name: str | None) -> list[dict[str, str | bool]]:
    """What the banner of candidate ``name`` says about its engine check: the deployed
    artifact's bound (pass; ``todo`` False), or plainly what to run (not run, failed,
    inconclusive; ``todo`` True). Each line: ``{"text", "todo"}``."""
    record = as_record(record)
    c = record.candidate(name) if name else None
    bc = c.backend_check if c is not None else None
    if bc is None or bc.status is None:
        return []
    status = bc.status
    note = next((str(n) for n in record.notes if str(n).startswith(f"deployment of {name}:")), "")
    if status == "not_run":
        trt = str(bc.basis.deployment if bc.basis is not None else "").startswith("a TensorRT")
        run = (f"run `{trt_command(record.command)}` on the target GPU (tensorrt >= 10) "
               f"before deploying {name}" if trt else str(bc.what_to_run or ""))
        reason = bc.reason if bc.reason is not None else ""
        return [{"text": f"Engine check NOT run: {reason}. To do: {run}.", "todo": True}]
    if status in ("pass", "not_needed"):
        rest = note.split(": ", 1)[1] if ": " in note else str(bc.reason or "")
        return [{"text": f"Engine check {'PASS' if status == 'pass' else 'not needed'}: {rest}",
                 "todo": False}]
    return [{"text": f"Engine check {status}: {bc.what_to_run or 'it did not pass'}.",
             "todo": True}]
