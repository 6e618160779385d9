"""Which tensors to calibrate, and one streaming FP32 pass that collects their statistics.

- ``select_tensors(model)`` lists the weighted nodes to quantize (TRT_RULES.md rule 4):
  each `QuantTarget` names its activation inputs and its constant weight (`WeightTarget`,
  with the per-channel axis of rule 3), in graph order.
- ``collect_stats(model, batches, tensors, runner_factory=...)`` runs the FP32 model once through ONNX Runtime
  with the tensors added as outputs and streams each one into a `HistogramStats`.
  Memory is O(tensors x bins) (x chunks when ``num_chunks`` is set for bootstrap).
- ``compute_ranges`` (re-exported from ``ranges.py``) turns the statistics into `Ranges`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from quantkit.calibrate.ranges import Ranges, compute_ranges
from quantkit.calibrate.histogram import DEFAULT_NUM_BINS, HistogramStats, combine_stats
from quantkit.graph.selection import NodeSelection
from quantkit.graph.weights import WEIGHT_INPUTS, WEIGHTED_OPS, weight_axis
from quantkit.errors import BackendError, CalibrationError, ConfigError, DataError, QuantkitError, first_line

__all__ = ["QuantTarget", "WeightTarget", "select_tensors", "activation_tensors",
           "CollectResult", "collect_stats", "compute_ranges", "Ranges"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WeightTarget:
    """A constant weight input: initializer or Constant-node output, quantized per channel."""

    name: str
    input_index: int
    axis: int
    shape: tuple[int, ...]
    source: str  # "initializer" | "Constant"


@dataclass(frozen=True)
class QuantTarget:
    """One weighted node to quantize: its activation inputs and (optionally) its weight.

    ``node`` is the node's name, or ``"<op_type>_<index>"`` when the node is unnamed;
    ``node_index`` is its position in ``graph.node``.
    """

    node: str
    op_type: str
    node_index: int
    activations: tuple[str, ...]
    weight: WeightTarget | None = None


def _constants(graph: onnx.GraphProto) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, source) for initializers and Constant-node outputs."""
    out: dict[str, tuple[tuple[int, ...], str]] = {
        init.name: (tuple(int(d) for d in init.dims), "initializer") for init in graph.initializer}
    for node in graph.node:
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or not node.output:
            continue
        shape: tuple[int, ...] | None = None
        for attr in node.attribute:
            if attr.name == "value":
                shape = tuple(int(d) for d in attr.t.dims)
            elif attr.name in ("value_float", "value_int", "value_string"):
                shape = ()
            elif attr.name in ("value_floats", "value_ints", "value_strings"):
                shape = (len(onnx.helper.get_attribute_value(attr)),)
            elif attr.name == "sparse_value":
                shape = tuple(int(d) for d in attr.sparse_tensor.dims)
        if shape is not None:
            out[node.output[0]] = (shape, "Constant")
    return out


def select_tensors(model: onnx.ModelProto, *,
                   op_types: Sequence[str] = WEIGHTED_OPS,
                   include_nodes: Sequence[str] | str = (),
                   exclude_nodes: Sequence[str] | str = ()) -> list[QuantTarget]:
    """Weighted nodes to quantize, in graph (topological) order.

    ``include_nodes`` / ``exclude_nodes`` are regexes matched against whole node names
    (:mod:`quantkit.graph.selection`): when include patterns are given a node must match
    one; a node matching an exclude pattern is dropped. Only the first two inputs count (Conv/Gemm bias stays unquantized).
    Nodes whose inputs are all constant, or whose weight has no output-channel axis
    (e.g. a 1-D MatMul weight: GEMV), are skipped with a log message.
    """
    if not isinstance(model, onnx.ModelProto):
        raise ConfigError("select_tensors needs an onnx.ModelProto", value=type(model).__name__,
                          fix="load the model with onnx.load(path)")
    selection = NodeSelection.from_patterns(include_nodes, exclude_nodes)
    graph = model.graph
    consts = _constants(graph)
    wanted = set(op_types)
    targets: list[QuantTarget] = []
    for idx, node in enumerate(graph.node):
        if node.op_type not in wanted or node.domain not in ("", "ai.onnx"):
            continue
        name = node.name or f"{node.op_type}_{idx}"
        if not selection.selects(name):
            continue
        inputs = [(k, t) for k, t in enumerate(node.input[:2]) if t]
        const_inputs = [(k, t) for k, t in inputs if t in consts]
        acts = tuple(t for k, t in inputs if t not in consts)
        if not acts:
            log.info("skip %s (%s): all inputs are constant", name, node.op_type)
            continue
        weight = None
        if const_inputs:
            k, t = const_inputs[0]
            if k not in WEIGHT_INPUTS.get(node.op_type, (1,)):
                log.info("skip %s (%s): constant input %d is not a weight", name,
                         node.op_type, k)
                continue
            shape, source = consts[t]
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            try:
                axis = weight_axis(node.op_type, len(shape), attrs, input_index=k)
            except CalibrationError as exc:
                log.info("skip %s (%s): %s", name, node.op_type, exc)
                continue
            weight = WeightTarget(name=t, input_index=k, axis=axis, shape=shape, source=source)
        targets.append(QuantTarget(node=name, op_type=node.op_type, node_index=idx,
                                   activations=acts, weight=weight))
    return targets


def activation_tensors(targets: Iterable[QuantTarget]) -> list[str]:
    """Unique activation tensor names of ``targets``, first-seen order."""
    return list(dict.fromkeys(t for target in targets for t in target.activations))


@dataclass
class CollectResult:
    """What one calibration pass saw. ``chunk_stats`` (bootstrap) only if asked for."""

    stats: dict[str, HistogramStats]
    samples_seen: int
    batches_seen: int
    seconds: float
    num_bins: int = DEFAULT_NUM_BINS
    chunk_stats: list[dict[str, HistogramStats]] | None = field(default=None, repr=False)


RunnerFactory = Callable[[Any, Sequence[str]], Any]


def _batch_size(feed: Mapping[str, Any], first_input: str | None) -> int:
    value = feed.get(first_input) if first_input in feed else next(iter(feed.values()), None)
    shape = np.shape(value) if value is not None else ()
    return int(shape[0]) if len(shape) else 1


def collect_stats(model_path_or_proto: str | os.PathLike | onnx.ModelProto,
                  batches: Iterable[Mapping[str, np.ndarray]],
                  tensors: Sequence[str], *,
                  num_bins: int = DEFAULT_NUM_BINS,
                  progress: bool = True,
                  runner_factory: RunnerFactory,
                  num_chunks: int | None = None) -> CollectResult:
    """Run the FP32 model once over ``batches`` and stream ``tensors`` into histograms.

    ``tensors`` may be intermediate tensors or graph inputs (taken from the feed).
    ``runner_factory(model, extra_outputs)`` returns a Runner context manager (the run's
    ``ctx.runner``; ``quantkit.backends.runners.calibration_runner`` for ONNX Runtime CPU
    defaults): calibration does not choose a backend. ``num_chunks=K`` also keeps per-chunk statistics (batch b ->
    chunk ``b % K``) for ``bootstrap_ranges``. ``samples_seen`` sums the batch dimension
    of the model's first input.
    """
    if isinstance(model_path_or_proto, onnx.ModelProto):
        model = model_path_or_proto
    else:
        path = os.fspath(model_path_or_proto)
        if not os.path.isfile(path):
            raise CalibrationError("model file not found", where="collect_stats", value=path,
                                   fix="check the model path")
        model = onnx.load(path)
    names = list(dict.fromkeys(tensors))
    if not names:
        raise CalibrationError("no tensors to calibrate", where="collect_stats",
                               fix="select tensors with select_tensors(model)")
    if num_chunks is not None and (isinstance(num_chunks, bool) or not isinstance(num_chunks, int)
                                   or num_chunks < 1):
        raise ConfigError("num_chunks must be a positive integer", where="calibrate.num_chunks",
                          value=num_chunks, fix="use e.g. 16, or None to skip bootstrap")
    HistogramStats(num_bins)  # validates num_bins early

    graph = model.graph
    inits = {i.name for i in graph.initializer}
    graph_inputs = [i.name for i in graph.input if i.name not in inits]
    produced = {o for n in graph.node for o in n.output if o}
    weights = [t for t in names if t in inits and t not in produced]
    if weights:
        raise CalibrationError("initializers are weights, not activations", value=weights[:5],
                               where="collect_stats",
                               fix="compute weight ranges with weight_amax_per_channel")
    missing = [t for t in names if t not in produced and t not in graph_inputs]
    if missing:
        raise CalibrationError(f"{len(missing)} tensors are not in the model: "
                               + ", ".join(missing[:10]), where="collect_stats",
                               fix="take tensor names from select_tensors(model)")
    from_feed = [t for t in names if t in graph_inputs]
    fetch = [t for t in names if t not in set(from_feed)]
    first_input = graph_inputs[0] if graph_inputs else None

    k = num_chunks or 1
    chunks = [{t: HistogramStats(num_bins) for t in names} for _ in range(k)]
    batches_in_chunk = [0] * k
    samples = 0
    n_batches = 0
    total = len(batches) if hasattr(batches, "__len__") else None  # type: ignore[arg-type]
    log.info("calibration pass: %d tensors (%d from the feed), %s batches", len(names),
             len(from_feed), total if total is not None else "?")
    start = time.perf_counter()

    from tqdm import tqdm

    feed_set = set(from_feed)
    with contextlib.ExitStack() as stack:
        runner = stack.enter_context(runner_factory(model, fetch)) \
            if fetch else None
        bar = tqdm(batches, total=total, disable=not progress, desc="calibrate", unit="batch",
                   leave=False)
        for b, feed in enumerate(bar):
            if not isinstance(feed, Mapping):
                raise CalibrationError("each calibration batch must be a dict name -> array",
                                       where=f"batch {b}", value=type(feed).__name__)
            for name, value in feed.items():  # bad input data, not a model property (rule 9)
                arr = np.asarray(value)
                if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
                    bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
                    raise DataError("calibration input data contains NaN or Inf",
                                    where=f"calibration batch {b} input {name}",
                                    value=f"{bad} of {arr.size} values",
                                    fix="clean or drop those samples before calibrating "
                                        "(check the image decoding / normalization)")
            outputs: Mapping[str, Any] = {}
            if runner is not None:
                try:
                    outputs = runner.infer(dict(feed), fetch)  # the Runner protocol
                except BackendError as exc:  # the runner named the input that does not fit
                    raise CalibrationError(f"inference failed: {exc.what}",
                                           where=f"calibration batch {b}"
                                                 + (f", {exc.where}" if exc.where else ""),
                                           value=exc.value, fix=exc.fix) from exc
                except QuantkitError:
                    raise
                except Exception as exc:  # ORT raises untyped errors
                    first = first_line(exc)
                    raise CalibrationError(
                        f"inference failed: {first}", where=f"calibration batch {b}",
                        fix="check the feed's names, dtypes and shapes match the model "
                            f"inputs {graph_inputs}") from exc
            target = chunks[b % k]
            for t in names:
                src = feed if t in feed_set else outputs
                if t not in src:
                    raise CalibrationError("tensor missing from the run's outputs",
                                           where=f"calibration batch {b}", value=t,
                                           fix="the runner must return every requested tensor")
                target[t].observe(src[t])
            batches_in_chunk[b % k] += 1
            samples += _batch_size(feed, first_input)
            n_batches += 1
    if n_batches == 0:
        raise CalibrationError("no calibration batches", where="collect_stats",
                               fix="check the calibration split is not empty")
    used = [c for c, n in zip(chunks, batches_in_chunk) if n]
    stats = {t: combine_stats([c[t] for c in used]) for t in names} if k > 1 else chunks[0]
    seconds = time.perf_counter() - start
    log.info("calibration pass done: %d batches, %d samples, %d tensors in %.2f s",
             n_batches, samples, len(names), seconds)
    if num_chunks is not None and len(used) < 2:
        log.warning("only %d non-empty calibration chunk(s): bootstrap needs >= 2", len(used))
    return CollectResult(stats=stats, samples_seen=samples, batches_seen=n_batches,
                         seconds=seconds, num_bins=num_bins,
                         chunk_stats=used if num_chunks is not None else None)
