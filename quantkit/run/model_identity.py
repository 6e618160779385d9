"""Which model a run's looks at the test split belong to (quantkit/verdict/ledger.py, "Model"):
a declared ``model.id``; else a user's ONNX file by its fingerprint (weights and FP32
outputs on a fixed probe: quantkit/models/fingerprint.py), stage-cached by the file's
sha256; else a model quantkit prepares by its source and name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import onnx

from quantkit.models.fingerprint import RULE, ModelFingerprint, fingerprint_model
from quantkit.models.model import Model
from quantkit.verdict.ledger import model_key

__all__ = ["ModelIdentity", "model_identity"]


@dataclass(frozen=True)
class ModelIdentity:
    """The ledger's key of the run's model, what it rests on, and the fingerprint the ledger
    matches against the models it knows (None: declared or prepared)."""

    key: str
    basis: str
    fingerprint: ModelFingerprint | None = None


def model_identity(settings, model: Model, proto: onnx.ModelProto, *,
                   cached: Callable[..., tuple[Any, Any, bool]],
                   environment: Mapping[str, Any]) -> ModelIdentity:
    """The identity of ``model`` (``proto``: its loaded graph) for the test ledger;
    ``cached``: the run's stage cache (RunContext.cached), ``environment``: what a float
    computation's cache key needs (RunContext.measured_key)."""
    s = settings
    fp = None
    if not s.model.id and s.model.kind == "onnx":
        obj, _, _ = cached("model_fingerprint",
                           {"model": model.sha256, "rule": RULE, **environment},
                           lambda: (fingerprint_model(proto).to_dict(), None))
        fp = ModelFingerprint.from_dict(obj)
    key, basis = model_key(kind=s.model.kind, sha256=model.sha256, source=model.source,
                           name=s.model.name, declared=s.model.id,
                           fingerprint=fp.key() if fp is not None else None)
    if fp is not None:
        basis = f"{basis}: {fp.describe()}"
    return ModelIdentity(key, basis, fp)
