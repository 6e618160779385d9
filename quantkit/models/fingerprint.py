"""A user model's identity for the test ledger that survives a re-export (issue 49).

The same network saved again (renamed nodes and tensors, initializers in another order, a
weight stored transposed, another opset or exporter) is one model for the ledger; its file
sha256 is not. :func:`fingerprint_model` reads two things:

* **weights**: every floating-point constant of the graph (initializers and Constant nodes,
  subgraphs included) with at least :data:`MIN_WEIGHT_ELEMENTS` values, each as the sorted
  multiset of its values (names, order, shape and layout ignored: a transposed or reshaped
  weight is the same weight), the digests sorted and hashed together;
* **function**: the FP32 outputs on a fixed probe (:data:`PROBE_SEED`): each input drawn from
  its element type and rank, never its name (ids uniform over the rows of the table a
  Gather reads them from, other integers 1, floats standard normal), each output reduced to
  its RMS and :data:`PROBE_PROJECTIONS` seeded random projections.

Two fingerprints are the same model when the weights digests are equal and every probe
number agrees within :data:`PROBE_RTOL` of its output's RMS (float noise of a re-export is
orders of magnitude below it): :meth:`ModelFingerprint.matches`. The ledger files a model
under the key of the first fingerprint it registered that matches (quantkit/ledger_store.py);
:meth:`ModelFingerprint.key` also rounds the probe numbers, so it names the model stably in
the common case. A re-export that rewrites weights (BatchNorm folded into convolutions,
another precision) is another model: declare ``model.id`` to say it is the same. Where the
probe cannot run (an input this rule cannot draw), the weights alone identify the model and
the fingerprint says why.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from quantkit.backends.runners import ort_runner
from quantkit.errors import QuantkitError, first_line
from quantkit.graph.facts import all_graphs
from quantkit.models.fit import InputSpec, input_specs

__all__ = ["MIN_WEIGHT_ELEMENTS", "PROBE_PROJECTIONS", "PROBE_RTOL", "PROBE_SEED", "RULE",
           "ModelFingerprint", "fingerprint_model", "probe_feed", "weights_digest"]

log = logging.getLogger(__name__)

#: the fingerprint rule's version, stored with every fingerprint
RULE = "quantkit-model-fingerprint/1"
PROBE_SEED = 49
PROBE_BATCH = 2
PROBE_TOKENS = 8  # symbolic non-batch dims of integer inputs (token positions)
PROBE_PIXELS = 32  # symbolic spatial dims of rank-4 float inputs
PROBE_PROJECTIONS = 16
#: probe numbers agree when within this share of their output's RMS (module docstring)
PROBE_RTOL = 1e-3
#: scalars (an epsilon, a sqrt(d) scale) are left out: exporters inline or fold them
MIN_WEIGHT_ELEMENTS = 2
_FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16)
_DIGITS = 3  # significant digits of the probe numbers in the key


@dataclass(frozen=True)
class ModelFingerprint:
    """Weights digest and probe numbers of one model (module docstring)."""

    weights_sha256: str
    n_weights: int  # floating-point constants digested
    probe: tuple[tuple[float, ...], ...]  # per output: (RMS, projection 1, ...); () if none
    probe_error: str | None = None  # why the probe did not run
    rule: str = RULE

    def key(self) -> str:
        """sha256 of the weights digest and the probe numbers rounded to 3 significant
        digits of their output's RMS: the name the ledger gives a model it sees first."""
        parts = [self.rule, self.weights_sha256]
        for out in self.probe:
            rms = out[0] if out else 0.0
            scale = rms if rms > 0 else 1.0
            parts.append(f"{rms:.{_DIGITS - 1}e}:" + ",".join(
                str(int(round(v / scale * 10 ** _DIGITS))) for v in out[1:]))
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()

    def matches(self, other: "ModelFingerprint") -> bool:
        """The same model: equal weights digests and probe numbers within PROBE_RTOL of
        each output's RMS (a missing probe on either side: the weights alone)."""
        if self.rule != other.rule or self.weights_sha256 != other.weights_sha256:
            return False
        if not self.probe or not other.probe:
            return True
        if len(self.probe) != len(other.probe):
            return False
        for a, b in zip(self.probe, other.probe):
            if len(a) != len(b):
                return False
            scale = max(abs(a[0]), abs(b[0]), 1e-30)
            if np.any(np.abs(np.asarray(a) - np.asarray(b)) > PROBE_RTOL * scale):
                return False
        return True

    def describe(self) -> str:
        probe = (f"FP32 outputs on a fixed probe ({len(self.probe)} output(s))" if self.probe
                 else f"no probe ({self.probe_error})")
        return (f"weights digest of {self.n_weights} floating-point constants (values only: "
                f"names, order and layout ignored) and {probe}")

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "weights_sha256": self.weights_sha256,
                "n_weights": self.n_weights, "probe": [list(p) for p in self.probe],
                "probe_error": self.probe_error}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelFingerprint":
        return cls(weights_sha256=str(d["weights_sha256"]), n_weights=int(d["n_weights"]),
                   probe=tuple(tuple(float(v) for v in p) for p in d.get("probe", [])),
                   probe_error=d.get("probe_error"), rule=str(d.get("rule", RULE)))


def _constants(proto: onnx.ModelProto) -> Iterator[TensorProto]:
    for g in all_graphs(proto.graph):
        yield from g.initializer
        for node in g.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                for attr in node.attribute:
                    if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                        yield attr.t


def weights_digest(proto: onnx.ModelProto) -> tuple[str, int]:
    """(sha256 over the sorted per-tensor digests, how many tensors): module docstring."""
    digests = []
    for t in _constants(proto):
        if t.data_type not in _FLOATS:
            continue
        a = numpy_helper.to_array(t)
        if a.size < MIN_WEIGHT_ELEMENTS:
            continue
        v = np.sort(a.ravel()) + a.dtype.type(0)  # in its own dtype; -0.0 and 0.0 are one
        digests.append(hashlib.sha256(f"{t.data_type}\x1f".encode() + v.tobytes()).digest())
    h = hashlib.sha256(RULE.encode())
    for d in sorted(digests):
        h.update(d)
    return h.hexdigest(), len(digests)


def _gather_rows(proto: onnx.ModelProto) -> dict[str, int]:
    """graph input -> rows of the constant table a Gather reads with it as indices."""
    tables = {i.name: (list(i.dims)[0] if i.dims else 0) for i in proto.graph.initializer}
    out: dict[str, int] = {}
    for node in proto.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[0] in tables:
            rows = tables[node.input[0]]
            if rows > 0:
                out[node.input[1]] = min(out.get(node.input[1], rows), rows)
    return out


def _dims(spec: InputSpec, floating: bool) -> list[int]:
    dims = []
    for axis, d in enumerate(spec.dims):
        if isinstance(d, int) and d > 0:
            dims.append(d)
        elif axis == 0:
            dims.append(PROBE_BATCH)
        elif floating and len(spec.dims) == 4 and axis == 1:
            dims.append(3)
        elif floating and len(spec.dims) == 4:
            dims.append(PROBE_PIXELS)
        else:
            dims.append(PROBE_TOKENS)
    return dims


def probe_feed(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The fixed probe: each input drawn from its element type and rank only (module
    docstring), so a renamed or reordered input gets the same values."""
    rows = _gather_rows(proto)
    feed = {}
    for spec in input_specs(proto):
        floating = spec.elem_type in _FLOATS
        shape = _dims(spec, floating)
        rng = np.random.default_rng([PROBE_SEED, spec.elem_type, len(shape)])
        dtype = onnx.helper.tensor_dtype_to_np_dtype(spec.elem_type)
        if floating:
            feed[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif spec.name in rows:
            feed[spec.name] = rng.integers(0, rows[spec.name], size=shape).astype(dtype)
        else:
            feed[spec.name] = np.ones(shape, dtype=dtype)
    return feed


def _summary(y: np.ndarray) -> tuple[float, ...]:
    v = np.asarray(y, dtype=np.float64).ravel()
    v = np.where(np.isfinite(v), v, 0.0)
    n = max(int(v.size), 1)
    rms = float(np.sqrt(np.mean(v * v))) if v.size else 0.0
    dirs = np.random.default_rng([PROBE_SEED, 1, n]).standard_normal((PROBE_PROJECTIONS, n))
    proj = dirs[:, :v.size] @ v / np.sqrt(n) if v.size else np.zeros(PROBE_PROJECTIONS)
    return (rms, *(float(p) for p in proj))


def fingerprint_model(model: str | os.PathLike | onnx.ModelProto) -> ModelFingerprint:
    """The fingerprint of an ONNX file or proto (module docstring)."""
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    digest, n = weights_digest(proto)
    try:
        feed = probe_feed(proto)
        with ort_runner(None, proto, name="model fingerprint probe") as runner:
            outputs = runner.infer(feed)
        probe = tuple(_summary(outputs[o.name]) for o in proto.graph.output)
        return ModelFingerprint(digest, n, probe)
    except (QuantkitError, ValueError, TypeError) as exc:
        why = f"{type(exc).__name__}: {first_line(exc)}"[:200]
        log.warning("model fingerprint: the fixed probe did not run (%s); the weights digest "
                    "alone identifies the model for the test ledger", why)
        return ModelFingerprint(digest, n, (), probe_error=why)
