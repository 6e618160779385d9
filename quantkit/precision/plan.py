"""The Plan: one precision (int8 | fp16 | fp32) and one human reason per ONNX node.

One Plan drives both Q/DQ insertion (``quantkit.qdq.insert``) and FP16 casting
(``quantkit.qdq.casts``). :func:`build_plan` applies TRT_RULES.md: weighted ops whose
activation inputs were calibrated run INT8 (rules 4, 9, 10); everything else runs in the
remainder precision (FP16 by default), except nodes kept in FP32 (e.g. FP16 overflow).

Decision order for each node, first match wins:

1. ``force``: a regex that matches the whole node name or the whole op type
   (``re.fullmatch``) sets the precision ("forced by config"). Forcing INT8 needs a finite
   amax for every activation input, else ConfigError.
2. Automatic INT8: op type in ``op_types``, node not matched by ``exclude_nodes``, matched
   by ``include_nodes`` when that is given (regexes on the whole node name,
   :mod:`quantkit.graph.selection`), every activation input has a finite amax and is not
   ``excluded``, and (``skip_small``) not a GEMV / small GEMM / few-channel Conv.
3. ``fp32_nodes_reasons``: FP32 with the given reason. It only overrides the remainder:
   INT8 nodes keep INT8, because their outputs stay FP32 (see ``quantkit.qdq.casts``).
3b. FP16 remainder only (``quantkit.precision.fp16_rules``): nodes reading a constant FP16
   would flush to 0, and normalizations (op types ``fp32_ops``, default
   ``DEFAULT_FP32_OPS``; ``fp32_ops=()`` turns the rule off), FP32 with the rule's reason.
4. The remainder precision, with the reason the node is not INT8.

Then the Concat rule (issue 46, :mod:`quantkit.graph.mixed_concat`): a node that would run
INT8 / FP8 on an activation carrying the output of a Concat whose inputs must not share one
scale (their amax differ by more than ``concat_range_ratio``, or it joins box-like and
score-like inputs) runs in the remainder instead, with a reason naming the Concat, its
inputs and their ranges (a forced one is a ConfigError); such tensors carry no amax in the
Plan, so no writer can put one Q/DQ after the Concat. A Concat that is itself INT8 (in
``op_types`` or forced) is not affected: each input gets its own per-tensor Q/DQ before it.

Size rule (TRT rule 10, thresholds from NVIDIA ModelOpt's INT8 exclusions):
- MatMul / Gemm: GEMV-like when M or N is statically 1 (or an operand is 1-D); a small GEMM
  when K or N is statically < 16 (Tensor Core INT8 kernels need K, N >= 16).
- Conv / ConvTranspose with input or output channels (per group) < 16 stays out unless
  (group 1, either channel count a multiple of 8, the other >= 16 or the node reads a graph
  input, square kernel) or (grouped, output channels a multiple of 8, kernel >= 3).
Unknown (symbolic) dimensions never make a node small.
"""

from __future__ import annotations

import dataclasses

import difflib
import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

import onnx

from quantkit.errors import ConfigError
from quantkit.graph.mixed_concat import (DEFAULT_CONCAT_RANGE_RATIO, MixedConcat,
                                         check_concat_range_ratio, mixed_concats)
from quantkit.graph.selection import NodeSelection
from quantkit.graph.weights import WEIGHTED_OPS
from quantkit.graph.facts import (TensorInfo, attr, constant_tensors, ensure_node_names,
                                quant_slots, tensor_infos)

log = logging.getLogger(__name__)

__all__ = ["Precision", "NodeDecision", "Plan", "build_plan", "ensure_node_names",
           "DEFAULT_OP_TYPES", "MIN_GEMM_DIM", "MIN_CONV_CHANNELS"]

#: Weighted ops quantized by default (TRT rules 4 and 9: the safe INT8 scope).
DEFAULT_OP_TYPES = WEIGHTED_OPS
#: MatMul / Gemm with K or N below this stay out of INT8 (rule 10; ModelOpt's _MIN_MATMUL_DIM).
MIN_GEMM_DIM = 16
#: Conv channel count below which the ModelOpt INT8 exceptions must hold (rule 10).
MIN_CONV_CHANNELS = 16

_WEIGHTED = frozenset(WEIGHTED_OPS)


class Precision(str, Enum):
    """Where a node computes: INT8 or FP8 E4M3 (Q/DQ on its inputs), FP16 or FP32.

    FP8 is only ever set on purpose (``force`` or :meth:`Plan.with_precision`; the target GPU
    must run it, ``precision/gpus.py``); :func:`build_plan` chooses INT8 automatically as
    before."""

    INT8 = "int8"
    FP8 = "fp8"
    FP16 = "fp16"
    FP32 = "fp32"

    def __str__(self) -> str:
        return self.value


def _precision(value: object, where: str) -> Precision:
    try:
        return Precision(str(value.value if isinstance(value, Precision) else value).lower())
    except ValueError:
        raise ConfigError("unknown precision", where=where, value=value,
                          fix="use one of int8, fp8, fp16, fp32") from None


@dataclass(frozen=True)
class NodeDecision:
    """The precision of one node and why."""

    precision: Precision
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "precision", _precision(self.precision, "NodeDecision"))


@dataclass(frozen=True)
class Plan:
    """node name -> NodeDecision for every node of the main graph, plus the ranges used.

    ``activation_amax`` holds the finite calibrated amax of every tensor that may be
    quantized (INT8 node inputs and residual-Add skip inputs). ``activation_range`` holds
    the signed (min, max) calibration observed for those tensors; only targets with
    asymmetric activations (``qdq/targets.py``: ort_cpu) read it. Treat a Plan as a value:
    :meth:`with_precision` returns a new one.
    """

    decisions: dict[str, NodeDecision]
    activation_amax: dict[str, float] = field(default_factory=dict)
    calibrator: str = ""
    activation_range: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: FP8-grid amax of tensors read by FP8 nodes where it differs from ``activation_amax``
    #: (a mixed-format plan: INT8 and FP8 nodes reading one tensor, each on its own grid)
    fp8_amax: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        fixed = {}
        for name, d in self.decisions.items():
            if not isinstance(d, NodeDecision):
                d = NodeDecision(d[0], d[1]) if isinstance(d, tuple) else NodeDecision(**d)
            fixed[name] = d
        object.__setattr__(self, "decisions", fixed)
        object.__setattr__(self, "activation_amax",
                           {k: float(v) for k, v in self.activation_amax.items()})
        object.__setattr__(self, "activation_range",
                           {k: (float(v[0]), float(v[1]))
                            for k, v in self.activation_range.items()})
        object.__setattr__(self, "fp8_amax", {k: float(v) for k, v in self.fp8_amax.items()})

    def fp8_amax_of(self, tensor: str) -> float:
        """The amax an FP8 node quantizes ``tensor`` with (KeyError if it has none)."""
        return self.fp8_amax[tensor] if tensor in self.fp8_amax else self.activation_amax[tensor]

    def precision_of(self, node: str) -> Precision:
        if node not in self.decisions:
            raise ConfigError("node is not in the plan", where="plan.decisions", value=node,
                              fix=_close_names_fix(node, self.decisions))
        return self.decisions[node].precision

    def counts(self) -> dict[str, int]:
        """Number of nodes per precision, e.g. ``{"int8": 4, "fp16": 20, "fp32": 1}``;
        ``fp8`` appears only in plans that have FP8 nodes (INT8-only records stay as they were)."""
        out = {p.value: 0 for p in Precision if p is not Precision.FP8}
        for d in self.decisions.values():
            out[d.precision.value] = out.get(d.precision.value, 0) + 1
        return out

    def int8_nodes(self) -> list[str]:
        """Names of the INT8 nodes, in graph order."""
        return [n for n, d in self.decisions.items() if d.precision is Precision.INT8]

    def quantized_nodes(self) -> list[str]:
        """Names of the INT8 and FP8 nodes (those that get Q/DQ), in graph order."""
        return [n for n, d in self.decisions.items()
                if d.precision in (Precision.INT8, Precision.FP8)]

    def nodes_with(self, precision: Precision | str) -> list[str]:
        p = _precision(precision, "Plan.nodes_with")
        return [n for n, d in self.decisions.items() if d.precision is p]

    def with_precision(self, nodes: Iterable[str] | str, precision: Precision | str,
                       reason: str) -> "Plan":
        """A new Plan where ``nodes`` have ``precision`` because of ``reason``."""
        p = _precision(precision, "Plan.with_precision")
        names = [nodes] if isinstance(nodes, str) else list(nodes)
        unknown = [n for n in names if n not in self.decisions]
        if unknown:
            raise ConfigError("node is not in the plan", where="Plan.with_precision",
                              value=unknown[0], fix=_close_names_fix(unknown[0], self.decisions))
        decisions = dict(self.decisions)
        for n in names:
            decisions[n] = NodeDecision(p, reason)
        return dataclasses.replace(self, decisions=decisions)

    def on_nodes(self, names: Iterable[str], fallback: "Plan") -> "Plan":
        """This plan for a graph whose nodes are ``names`` (in order): the decisions of the
        nodes it has, ``fallback``'s for the nodes it lacks (nodes a ptq rewrite put back,
        :mod:`quantkit.ptq.restore`); decisions of nodes no longer there are dropped."""
        names = list(names)
        if list(self.decisions) == names:
            return self
        decisions = {}
        for n in names:
            d = self.decisions.get(n) or fallback.decisions.get(n)
            if d is None:
                raise ConfigError("node is in neither plan", where="Plan.on_nodes", value=n,
                                  fix="build the fallback plan on the original graph")
            decisions[n] = d
        return dataclasses.replace(self, decisions=decisions)

    def to_dict(self) -> dict:
        """JSON-ready: ``{"calibrator", "decisions": {node: {"precision", "reason"}},
        "activation_amax", "activation_range": {tensor: [min, max]}}``."""
        return {
            "calibrator": self.calibrator,
            "decisions": {n: {"precision": d.precision.value, "reason": d.reason}
                          for n, d in self.decisions.items()},
            "activation_amax": dict(self.activation_amax),
            "activation_range": {k: list(v) for k, v in self.activation_range.items()},
            **({"fp8_amax": dict(self.fp8_amax)} if self.fp8_amax else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> "Plan":
        if not isinstance(data, Mapping) or not isinstance(data.get("decisions"), Mapping):
            raise ConfigError("a plan needs a 'decisions' mapping", where="Plan.from_dict",
                              value=type(data).__name__ if not isinstance(data, Mapping)
                              else sorted(data),
                              fix="pass the dict written by Plan.to_dict()")
        decisions = {}
        for name, d in data["decisions"].items():
            if not isinstance(d, Mapping) or "precision" not in d:
                raise ConfigError("a decision needs 'precision' and 'reason'",
                                  where=f"Plan.from_dict decisions[{name!r}]", value=d,
                                  fix='write {"precision": "int8", "reason": "..."}')
            decisions[name] = NodeDecision(_precision(d["precision"], f"decisions[{name!r}]"),
                                           str(d.get("reason", "")))
        return cls(decisions, dict(data.get("activation_amax", {})),
                   str(data.get("calibrator", "")),
                   {k: tuple(v) for k, v in data.get("activation_range", {}).items()},
                   dict(data.get("fp8_amax", {})))


def _close_names_fix(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=3)
    return (f"did you mean {', '.join(close)}?" if close
            else "use node names from the model (quantkit names unnamed nodes <op_type>_<index>)")


def build_plan(model: onnx.ModelProto, *, amax: Mapping[str, float],
               excluded: Mapping[str, str] | None = None,
               op_types: Iterable[str] = DEFAULT_OP_TYPES,
               include_nodes: Iterable[str] = (),
               exclude_nodes: Iterable[str] = (),
               force: Mapping[str, Precision | str] | None = None,
               remainder: Precision | str = "fp16",
               fp32_nodes_reasons: Mapping[str, str] | None = None,
               skip_small: bool = True,
               calibrator: str = "",
               fp32_ops: Iterable[str] | None = None,
               infos: Mapping[str, TensorInfo] | None = None,
               concat_range_ratio: float | None = DEFAULT_CONCAT_RANGE_RATIO) -> Plan:
    """Decide int8 / fp16 / fp32 with a reason for every node (see the module docstring).

    ``amax``: calibrated per-tensor amax of activations; ``excluded``: tensor -> why it must
    not be quantized (e.g. non-finite values, TRT rule 9). Names unnamed nodes of ``model``
    in place first (:func:`ensure_node_names`), so the plan can address every node.
    ``concat_range_ratio``: the Concat rule's ratio (module docstring); None turns the rule
    off (only for the scope's placeholder plan, whose ranges are not real).
    """
    ensure_node_names(model)
    graph = model.graph
    excluded = dict(excluded or {})
    force = dict(force or {})
    fp32_reasons = dict(fp32_nodes_reasons or {})
    op_types = tuple(op_types)
    selection = NodeSelection.from_patterns(tuple(include_nodes), tuple(exclude_nodes),
                                            where="build_plan")
    rem = _precision(remainder, "build_plan(remainder)")
    if rem in (Precision.INT8, Precision.FP8):
        raise ConfigError(f"the remainder precision cannot be {rem.value}",
                          where="build_plan(remainder)", value=rem.value,
                          fix="use fp16 or fp32; INT8 / FP8 need calibrated weighted ops")
    names = [n.name for n in graph.node]
    selection.check_matches(names, where="build_plan")
    for what, given in (("fp32_nodes_reasons", set(fp32_reasons)),):
        for n in sorted(given):
            if n not in names:
                raise ConfigError(f"{what} names a node the model does not have",
                                  where=f"build_plan({what})", value=n,
                                  fix=_close_names_fix(n, names))
    patterns = _compile_force(force)
    if concat_range_ratio is not None:
        concat_range_ratio = check_concat_range_ratio(concat_range_ratio,
                                                      where="build_plan(concat_range_ratio)")
    if rem is Precision.FP16:
        from quantkit.precision.fp16_rules import (DEFAULT_FP32_OPS, fp16_underflow_reasons,
                                                   normalization_fp32_reasons)

        rules = fp16_underflow_reasons(model)
        rules.update(normalization_fp32_reasons(
            model, op_types=DEFAULT_FP32_OPS if fp32_ops is None else fp32_ops))
        fp32_reasons = {**rules, **fp32_reasons}

    finite_amax: dict[str, float] = {}
    bad_amax: dict[str, float] = {}
    for t, v in amax.items():
        try:
            fv = float(v)
        except (TypeError, ValueError):
            raise ConfigError("amax must be a number", where=f"amax[{t!r}]", value=v,
                              fix="pass per-tensor amax as floats") from None
        if t in excluded:
            continue
        (finite_amax if math.isfinite(fv) and fv >= 0 else bad_amax)[t] = fv

    infos = tensor_infos(model) if infos is None else infos  # ModelGraph.infos: inferred once
    constants = constant_tensors(graph)
    graph_inputs = {i.name for i in graph.input}
    ctx = _Ctx(infos, constants, graph_inputs, finite_amax, bad_amax, excluded)
    used_patterns: set[str] = set()
    decisions: dict[str, NodeDecision] = {}
    forced_by: dict[str, str] = {}
    for node in graph.node:
        forced = _forced(node, patterns)
        if forced is not None:
            pattern, p = forced
            used_patterns.add(pattern)
            forced_by[node.name] = pattern
            if p in (Precision.INT8, Precision.FP8):
                problem = ctx.int8_blocker(node)
                if problem:
                    raise ConfigError(f"cannot force node {node.name} to {p.value}: {problem}",
                                      where=f"build_plan(force[{pattern!r}])", value=node.name,
                                      fix="calibrate the node's inputs or force fp16/fp32")
            decisions[node.name] = NodeDecision(p, f"forced by config ({pattern!r})")
            continue
        decision = _auto(node, ctx, op_types=op_types, selection=selection,
                         remainder=rem, skip_small=skip_small, calibrator=calibrator)
        if decision.precision is not Precision.INT8 and node.name in fp32_reasons:
            decision = NodeDecision(Precision.FP32, fp32_reasons[node.name])
        decisions[node.name] = decision
    for pattern in force:
        if pattern not in used_patterns:
            log.warning("force pattern %r matched no node name or op type", pattern)
    mixed = ({} if concat_range_ratio is None
             else mixed_concats(graph, finite_amax, ratio=concat_range_ratio))
    if mixed:
        decisions = _concat_rule(graph, decisions, ctx, mixed, forced_by, rem, fp32_reasons)
    plan = Plan(decisions, {t: v for t, v in finite_amax.items() if t not in mixed},
                calibrator)
    log.info("plan: %s", plan.counts())
    return plan


def _concat_rule(graph: onnx.GraphProto, decisions: dict[str, NodeDecision], ctx: "_Ctx",
                 mixed: Mapping[str, MixedConcat], forced_by: Mapping[str, str],
                 remainder: Precision, fp32_reasons: Mapping[str, str]
                 ) -> dict[str, NodeDecision]:
    """``decisions`` with every INT8 / FP8 node that reads a tensor in ``mixed`` moved to the
    remainder (FP32 where ``fp32_reasons`` names it); ConfigError for a forced one."""
    out = dict(decisions)
    for node in graph.node:
        d = out[node.name]
        if d.precision not in (Precision.INT8, Precision.FP8):
            continue
        t = next((t for t in ctx.activation_inputs(node) if t in mixed), None)
        if t is None:
            continue
        why = mixed[t].describe()
        if node.name in forced_by:
            raise ConfigError(f"cannot force node {node.name} to {d.precision.value}: it reads "
                              f"{t}, and {why}",
                              where=f"build_plan(force[{forced_by[node.name]!r}])",
                              value=node.name,
                              fix=f"force {node.name} to fp16 (one scale after that Concat "
                                  "rounds its narrow inputs away), or quantize the Concat "
                                  "itself so each input gets its own Q/DQ")
        reason = (f"reads {t}: {why}; one Q/DQ after that Concat would round its narrow "
                  f"inputs away, so {node.name} stays out of {d.precision.value}")
        out[node.name] = (NodeDecision(Precision.FP32, fp32_reasons[node.name])
                          if node.name in fp32_reasons else NodeDecision(remainder, reason))
        log.info("%s %s", node.name, reason)
    return out


def _compile_force(force: Mapping[str, Precision | str]) -> list[tuple[str, re.Pattern, Precision]]:
    out = []
    for pattern, p in force.items():
        try:
            rx = re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"invalid regex in force: {exc}", where="build_plan(force)",
                              value=pattern, fix="write a Python regular expression") from None
        out.append((pattern, rx, _precision(p, f"build_plan(force[{pattern!r}])")))
    return out


def _forced(node: onnx.NodeProto, patterns) -> tuple[str, Precision] | None:
    for pattern, rx, p in patterns:
        if rx.fullmatch(node.name) or rx.fullmatch(node.op_type):
            return pattern, p
    return None


@dataclass
class _Ctx:
    infos: dict[str, TensorInfo]
    constants: dict[str, onnx.TensorProto]
    graph_inputs: set[str]
    amax: dict[str, float]
    bad_amax: dict[str, float]
    excluded: dict[str, str]

    def activation_inputs(self, node: onnx.NodeProto) -> list[str]:
        slots = quant_slots(node, self.infos, self.constants)
        return [node.input[s] for s in slots.activations]

    def input_blocker(self, node: onnx.NodeProto) -> str | None:
        """Why an activation input of ``node`` cannot be quantized, or None."""
        for t in dict.fromkeys(self.activation_inputs(node)):
            if t in self.excluded:
                return f"input {t} excluded from INT8: {self.excluded[t]}"
            if t in self.bad_amax:
                return f"input {t} has non-finite amax {self.bad_amax[t]}"
            if t not in self.amax:
                return f"input {t} has no calibrated range"
        return None

    def int8_blocker(self, node: onnx.NodeProto) -> str | None:
        slots = quant_slots(node, self.infos, self.constants)
        if not (slots.activations or slots.weight is not None or slots.constants):
            return "it has no float32 input to quantize"
        return self.input_blocker(node)


def _auto(node: onnx.NodeProto, ctx: _Ctx, *, op_types, selection: NodeSelection, remainder,
          skip_small, calibrator) -> NodeDecision:
    op = node.op_type
    if op not in op_types:
        why = f"not a weighted op ({op})" if op not in _WEIGHTED else f"{op} not in op_types"
        return NodeDecision(remainder, why)
    if selection.excluded(node.name):
        return NodeDecision(remainder, "excluded by config (exclude_nodes)")
    if selection.not_included(node.name):
        return NodeDecision(remainder, "not in include_nodes")
    slots = quant_slots(node, ctx.infos, ctx.constants)
    if not slots.activations:
        return NodeDecision(remainder, f"no activation input to quantize ({op})")
    blocker = ctx.input_blocker(node)
    if blocker:
        return NodeDecision(remainder, blocker)
    if skip_small:
        small = _small_reason(node, ctx)
        if small:
            return NodeDecision(remainder, f"{small}: no INT8 Tensor Core benefit (TRT rule 10)")
    reason = f"in scope ({op})" + (f", calibrator {calibrator}" if calibrator else "")
    return NodeDecision(Precision.INT8, reason)


def _shape(ctx: _Ctx, name: str) -> tuple[int | None, ...] | None:
    info = ctx.infos.get(name)
    return info.shape if info is not None else None


def _small_reason(node: onnx.NodeProto, ctx: _Ctx) -> str | None:
    op = node.op_type
    if op in ("MatMul", "Gemm"):
        a, b = _shape(ctx, node.input[0]), _shape(ctx, node.input[1])
        if a is None or b is None:
            return None
        if op == "MatMul" and (len(a) == 1 or len(b) == 1):
            return "GEMV-like MatMul (1-D operand)"
        if len(a) < 2 or len(b) < 2:
            return None
        if op == "Gemm":
            m = a[1] if attr(node, "transA", 0) else a[0]
            k, n = (b[1], b[0]) if attr(node, "transB", 0) else (b[0], b[1])
        else:
            lead = a[:-1]
            m = math.prod(lead) if all(d is not None for d in lead) else None
            k, n = b[-2], b[-1]
        if m == 1 or n == 1:
            return f"GEMV-like {op} (M={m}, N={n})"
        if (k is not None and k < MIN_GEMM_DIM) or (n is not None and n < MIN_GEMM_DIM):
            return f"small {op} (K={k}, N={n} < {MIN_GEMM_DIM})"
        return None
    if op in ("Conv", "ConvTranspose"):
        w = _shape(ctx, node.input[1]) if len(node.input) > 1 else None
        if w is None or len(w) < 3 or any(d is None for d in w[:2]):
            return None
        group = int(attr(node, "group", 1))
        if op == "Conv":
            oc, ic = w[0], w[1]
        else:
            oc, ic = w[1], w[0] // max(group, 1)
        kernel = list(attr(node, "kernel_shape", None) or w[2:])
        if oc >= MIN_CONV_CHANNELS and ic >= MIN_CONV_CHANNELS:
            return None
        if group == 1:
            reads_input = node.input[0] in ctx.graph_inputs
            if ((oc % 8 == 0 or ic % 8 == 0)
                    and (reads_input or oc >= MIN_CONV_CHANNELS or ic >= MIN_CONV_CHANNELS)
                    and len(set(kernel)) == 1):
                return None
        elif oc % 8 == 0 and all(k >= 3 for k in kernel):
            return None
        return f"{op} with few channels (in {ic}, out {oc} per group)"
    return None
