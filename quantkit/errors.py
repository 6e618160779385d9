"""Errors quantkit raises. Each says what went wrong, where, the offending value and the fix."""

from __future__ import annotations


class Phrase(str):
    """A ``value`` already worded for the user, e.g. ``"nan at row 17, inf at row 40"``: the
    message shows it as is, where any other value is shown with ``repr()``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str.__str__(self)


class QuantkitError(Exception):
    """Base class. ``str(err)`` is one line meant for the user."""

    exit_code = 2

    def __init__(self, what: str, *, where: str | None = None, value: object = None,
                 fix: str | None = None) -> None:
        self.what = what
        self.where = where
        self.value = value
        self.fix = fix
        parts = [what]
        if where:
            parts.append(f"at {where}")
        if value is not None:
            parts.append(f"got {value!r}")
        msg = "; ".join(parts)
        if fix:
            msg += f". Fix: {fix}"
        super().__init__(msg)


class ConfigError(QuantkitError):
    """A configuration value is missing, of the wrong type or out of range."""


class AssetError(QuantkitError):
    """A pinned offline asset could not be fetched or failed verification."""


class ModelError(QuantkitError):
    """A model file is missing, corrupt or does not fit the experiment."""


class DataError(QuantkitError):
    """A dataset is missing, malformed or does not fit the model."""


class CalibrationError(QuantkitError):
    """Calibration could not produce usable ranges."""


class GraphEditError(QuantkitError):
    """A graph edit (Q/DQ insertion, FP16 conversion) could not be applied."""


class BackendUnavailable(QuantkitError):
    """A backend (e.g. TensorRT) is not installed or cannot run here."""


class BackendError(QuantkitError):
    """A backend failed while building or running a model."""


class LedgerError(QuantkitError):
    """The persistent test ledger (a SQLite file or a PostgreSQL database) is missing,
    unreadable or refuses a look."""


class RecordError(QuantkitError):
    """A record.json (or a section of one) does not fit the record schema of its version."""


def first_line(exc: BaseException) -> str:
    """The first non-empty line of a library's exception, else its type's name (a checker's
    message may be empty or start with a blank line)."""
    return next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
