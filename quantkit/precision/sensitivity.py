"""Which INT8 nodes hurt most: a one-pass proxy and a measured score, and a ranking.

Both scores feed :func:`quantkit.precision.fp16_search.search_fp16_set`, which needs only a
ranking (most sensitive first); the better the ranking, the fewer full evaluations.

Proxy (:func:`proxy_scores`), from one debug comparison of the full-INT8 model against FP32
(``LayerStats.result()`` per tensor, e.g. ``quantkit.compare.layer_diff.diff_layers``).
For an INT8 node ``n`` with quantized activation inputs ``I(n)`` and output ``o(n)``, with
``N(t) = 10^(-sqnr_db(t) / 10)`` the relative noise power of tensor ``t``
(``sum (r - c)^2 / sum r^2``)::

    N_in      = max over t in I(n) of N(t)    (0 for an input without stats: graph input)
    added     = max(0, N(o(n)) - N_in)        (noise power this node adds, relative to its
                                               output signal)
    clip      = max over t in I(n) of clipping_rate(t)   (0 when not measured)
    score     = added + clip_weight * clip    (clip_weight = 1.0 by default)

Noise powers of independent errors add, so ``N_out - N_in`` is the error introduced at this
node when it passes its input's relative error on unchanged (unit noise gain). ``clip`` is the
fraction of reference values beyond the calibrated amax: with ``clip_weight = 1`` a node
clipping 1% of its input scores like a node whose own error has an SQNR of 20 dB. The SQNR
drop ``sqnr_in - sqnr_out`` in dB is reported too (``drop_db``), but it does not rank:
a node reading an exact tensor (a graph input, SQNR = inf, capped at 200 dB) would show a
~170 dB "drop" for an ordinary 30 dB quantization error and outrank every truly fragile
node; the difference of noise powers has no such blow-up.

Measured (:func:`measured_scores`): the output damage (e.g. mean KL of logits vs FP32, or
disagreement rate) on a small fixed eval subset, one subset evaluation per node plus one
baseline. Mode ``"restore"``: ``damage(all INT8) - damage(only n kept FP16)``; mode
``"only"``: ``damage(only n INT8) - damage(none INT8)``. Bigger = more sensitive.

Numerics only: no I/O; the callables passed in run the models.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import onnx

from quantkit.compare.metrics import SQNR_DB_CAP, noise_power_from_sqnr_db
from quantkit.errors import ConfigError, DataError
from quantkit.graph.selection import node_name_list

log = logging.getLogger(__name__)

__all__ = ["MeasuredScores", "int8_node_tensors", "measured_scores", "proxy_scores", "rank",
           "MODES"]

#: Modes of :func:`measured_scores`.
MODES = ("restore", "only")


def _sqnr(stats: Mapping[str, Any] | None) -> float | None:
    if stats is None:
        return None
    v = stats.get("sqnr_db")
    if v is None:
        return None
    v = float(v)
    if math.isnan(v):
        return None
    return min(SQNR_DB_CAP, max(-SQNR_DB_CAP, v))


def _clip(stats: Mapping[str, Any] | None) -> float | None:
    if stats is None:
        return None
    v = stats.get("clipping_rate")
    return None if v is None or not math.isfinite(float(v)) else float(v)


def proxy_scores(layer_stats: Mapping[str, Mapping[str, Any]],
                 node_outputs: Mapping[str, str],
                 node_inputs: Mapping[str, Sequence[str]], *,
                 clip_weight: float = 1.0) -> dict[str, dict[str, Any]]:
    """One-pass sensitivity proxy per INT8 node (formula: module docstring).

    ``layer_stats``: tensor -> ``LayerStats.result()`` dict (``sqnr_db``, ``clipping_rate``,
    ...) of the full-INT8 model against FP32; ``node_outputs``: node -> its output tensor;
    ``node_inputs``: node -> its quantized activation inputs (see :func:`int8_node_tensors`).
    Returns node -> ``{"score", "added_noise", "noise_in", "noise_out", "sqnr_in_db",
    "sqnr_out_db", "drop_db", "clipping_rate", "inputs_missing"}``, in ``node_outputs``
    order. ``score`` is None when the output has no SQNR (the node ranks last).
    """
    if not (isinstance(clip_weight, (int, float)) and not isinstance(clip_weight, bool)
            and math.isfinite(clip_weight) and clip_weight >= 0):
        raise ConfigError("clip_weight must be a finite number >= 0",
                          where="precision.proxy_scores(clip_weight)", value=clip_weight,
                          fix="use 1.0 (1% clipped values count like 0.01 relative noise "
                              "power) or 0 to ignore clipping")
    out: dict[str, dict[str, Any]] = {}
    for node, out_tensor in node_outputs.items():
        inputs = list(dict.fromkeys(node_inputs.get(node, ())))
        sqnr_out = _sqnr(layer_stats.get(out_tensor))
        in_sqnrs = {t: _sqnr(layer_stats.get(t)) for t in inputs}
        missing = [t for t, v in in_sqnrs.items() if v is None]
        known = [v for v in in_sqnrs.values() if v is not None]
        sqnr_in = min(known) if known else SQNR_DB_CAP
        noise_in = max((noise_power_from_sqnr_db(v) for v in known), default=0.0)
        clips = [c for c in (_clip(layer_stats.get(t)) for t in inputs) if c is not None]
        clip = max(clips, default=0.0)
        row: dict[str, Any] = {"sqnr_in_db": sqnr_in, "sqnr_out_db": sqnr_out,
                               "clipping_rate": clip, "inputs_missing": missing,
                               "noise_in": noise_in}
        if sqnr_out is None:
            log.warning("proxy: no SQNR for output %s of node %s; it ranks last",
                        out_tensor, node)
            row.update(score=None, added_noise=None, noise_out=None, drop_db=None)
        else:
            noise_out = noise_power_from_sqnr_db(sqnr_out)
            added = max(0.0, noise_out - noise_in)
            row.update(score=added + float(clip_weight) * clip, added_noise=added,
                       noise_out=noise_out, drop_db=sqnr_in - sqnr_out)
        out[node] = row
    return out


def int8_node_tensors(model: onnx.ModelProto, int8_nodes: Iterable[str], *, infos=None
                      ) -> tuple[dict[str, str], dict[str, list[str]]]:
    """``(node_outputs, node_inputs)`` for :func:`proxy_scores`, in graph order.

    ``node_outputs[n]`` is the first output of node ``n``; ``node_inputs[n]`` its float32
    activation inputs (the ones ``insert_qdq`` quantizes, TRT rule 4). Does not edit ``model``;
    names follow ``ensure_node_names`` (the names a Plan uses).
    """
    from quantkit.graph.facts import constant_tensors, node_names, quant_slots, tensor_infos

    wanted = set(int8_nodes)
    graph = model.graph
    names = node_names(graph)
    unknown = sorted(wanted - set(names))
    if unknown:
        raise ConfigError("node is not in the model", where="precision.int8_node_tensors",
                          value=unknown[0], fix="pass node names from the plan built on this model")
    infos = tensor_infos(model) if infos is None else infos  # ModelGraph.infos when known
    constants = constant_tensors(graph)
    outputs: dict[str, str] = {}
    inputs: dict[str, list[str]] = {}
    for node, name in zip(graph.node, names):
        if name not in wanted:
            continue
        slots = quant_slots(node, infos, constants)
        outputs[name] = node.output[0]
        inputs[name] = list(dict.fromkeys(node.input[s] for s in slots.activations))
    return outputs, inputs


class MeasuredScores(dict):
    """node -> measured score (a plain dict), plus what measuring cost.

    ``steps``: one dict per subset evaluation, in order: ``{"step", "node", "fp16_set",
    "damage", "seconds"}`` (``step`` is "baseline" or "node"); ``evaluations`` and
    ``seconds`` total them; ``baseline``: the damage every score is taken against;
    ``mode``: "restore" | "only".
    """

    def __init__(self, scores: Mapping[str, float], *, mode: str, baseline: float,
                 steps: list[dict[str, Any]]) -> None:
        super().__init__(scores)
        self.mode = mode
        self.baseline = baseline
        self.steps = steps

    @property
    def evaluations(self) -> int:
        return len(self.steps)

    @property
    def seconds(self) -> float:
        return float(sum(s["seconds"] for s in self.steps))

    def cost(self) -> dict[str, Any]:
        """``{"mode", "evaluations", "seconds", "baseline", "steps"}`` (JSON-ready)."""
        return {"mode": self.mode, "evaluations": self.evaluations, "seconds": self.seconds,
                "baseline": self.baseline,
                "steps": [dict(s, fp16_set=list(s["fp16_set"])) for s in self.steps]}


def measured_scores(evaluate_subset: Callable[[frozenset[str]], float], nodes: Sequence[str], *,
                    mode: str = "restore") -> MeasuredScores:
    """Measured sensitivity per node from ``len(nodes) + 1`` subset evaluations.

    ``evaluate_subset(fp16_set)`` returns the damage (>= 0, smaller is better, e.g. mean KL
    of the logits vs FP32) of the model where the nodes in ``fp16_set`` are kept FP16 and the
    other ``nodes`` are INT8. ``mode="restore"``: score = damage(all INT8) - damage(only the
    node FP16); ``mode="only"``: score = damage(only the node INT8) - damage(none INT8).
    Bigger = more sensitive. Returns a :class:`MeasuredScores` (a dict in ``nodes`` order
    that also records every evaluation's set, damage and seconds).
    """
    where = "precision.measured_scores"
    if mode not in MODES:
        raise ConfigError("unknown sensitivity mode", where=f"{where}(mode)", value=mode,
                          fix=f"use one of {', '.join(MODES)}")
    names = node_name_list(nodes, where=f"{where}(nodes)", what="nodes",
                           fix="pass the names of the plan's INT8 nodes")
    everything = frozenset(names)
    steps: list[dict[str, Any]] = []

    def run(step: str, node: str | None, fp16: frozenset[str]) -> float:
        t0 = time.perf_counter()
        value = evaluate_subset(fp16)
        seconds = time.perf_counter() - t0
        try:
            damage = float(value)
        except (TypeError, ValueError):
            damage = math.nan
        if not math.isfinite(damage):
            raise DataError("evaluate_subset returned a non-finite damage", where=where,
                            value=value, fix="return a finite float (e.g. mean KL vs FP32)")
        steps.append({"step": step, "node": node,
                      "fp16_set": [n for n in names if n in fp16],
                      "damage": damage, "seconds": seconds})
        log.debug("sensitivity %s %s: damage %.6g (%.3f s)", step, node or "-", damage, seconds)
        return damage

    baseline = run("baseline", None, frozenset() if mode == "restore" else everything)
    scores: dict[str, float] = {}
    for n in names:
        if mode == "restore":
            scores[n] = baseline - run("node", n, frozenset({n}))
        else:
            scores[n] = run("node", n, everything - {n}) - baseline
    result = MeasuredScores(scores, mode=mode, baseline=baseline, steps=steps)
    log.info("measured sensitivity (%s) of %d nodes: %d subset evaluations, %.2f s",
             mode, len(names), result.evaluations, result.seconds)
    return result


def _score_value(value: Any) -> float | None:
    if isinstance(value, Mapping):
        value = value.get("score")
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError("a score must be a number, None, or a dict with 'score'",
                          where="precision.rank", value=value,
                          fix="pass proxy_scores() or measured_scores() output") from None
    return None if math.isnan(v) else v


def rank(scores: Mapping[str, Any], *, order: Sequence[str] | None = None) -> list[str]:
    """Node names, most sensitive (highest score) first.

    ``scores``: node -> number, or node -> dict with ``"score"`` (:func:`proxy_scores`).
    Ties keep node order: the position in ``order`` when given (graph order; nodes missing
    from it come after, in ``scores`` order), else ``scores``' own order. Scores closer than
    :data:`~quantkit.compare.ties.RANK_TIE_SHARE` of the largest |score| are ties
    (:func:`~quantkit.compare.ties.rank_with_ties`), so float noise between CPUs does not
    reorder them. Nodes whose score is None or NaN come last, in that order.
    """
    from quantkit.compare.ties import RANK_TIE_SHARE, rank_with_ties

    keys = list(scores)
    if order is not None:
        pos = {n: i for i, n in enumerate(node_name_list(order, where="precision.rank(order)", what="order",
                                                  fix="list every node once"))}
        base = len(pos)
        index = {n: pos.get(n, base + i) for i, n in enumerate(keys)}
    else:
        index = {n: i for i, n in enumerate(keys)}
    values = {n: _score_value(scores[n]) for n in keys}
    known_values = {n: values[n] for n in keys if values[n] is not None}
    top = max((abs(x) for x in known_values.values()), default=0.0)
    known = rank_with_ties(known_values, order=sorted(known_values, key=index.__getitem__),
                           tolerance=RANK_TIE_SHARE * top)
    unknown = sorted((n for n in keys if values[n] is None), key=lambda n: index[n])
    return known + unknown
