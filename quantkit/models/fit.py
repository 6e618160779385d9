"""Does this model fit this data and these settings? Checked before any inference (issue 18).

Each check reads only the ONNX graph's declared inputs, outputs and nodes, so a mismatch is
one clear error naming the setting to change, before FP32 inference, calibration or export
work is spent:

- custom-domain operators that ONNX Runtime cannot run (named by node, op and domain);
- the class count (the logits output's static last dimension vs the data's labels);
- a fixed batch dimension above 1 vs every batch-size setting of the run (a fixed batch of 1
  runs as it is: the feeds give one example at a time);
- the output compared (``model.output.name / kind / pooling``: :func:`resolve_output`);
- a text model's input names vs the tokenizer's fields (``model.inputs.*``:
  :func:`quantkit.data.text_inputs.check_text_inputs`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx

from quantkit.errors import ConfigError, DataError, ModelError
from quantkit.graph.facts import all_graphs

__all__ = ["InputSpec", "OutputSpec", "input_specs", "check_custom_ops", "check_class_count",
           "check_class_width", "check_fixed_batch", "fixed_batch", "output_names", "resolve_output",
           "STANDARD_DOMAINS"]

#: Operator domains ONNX Runtime's CPU build runs without a custom-op library.
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "ai.onnx.preview.training"})

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InputSpec:
    """A graph input as declared: name, element type and dims (int, a symbolic name, or None)."""

    name: str
    elem_type: int
    dims: tuple[int | str | None, ...]

    @property
    def dtype_name(self) -> str:
        return onnx.TensorProto.DataType.Name(self.elem_type).lower()

    def describe(self) -> str:
        dims = ", ".join("?" if d is None else str(d) for d in self.dims)
        return f"{self.name}: {self.dtype_name}[{dims}]"


def _dims(value_info: onnx.ValueInfoProto) -> tuple[int | str | None, ...]:
    shape = value_info.type.tensor_type.shape
    out: list[int | str | None] = []
    for d in shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            out.append(d.dim_param)
        else:
            out.append(None)
    return tuple(out)


def input_specs(proto: onnx.ModelProto) -> list[InputSpec]:
    """The graph's real inputs (initializers listed as inputs are left out)."""
    inits = {i.name for i in proto.graph.initializer}
    return [InputSpec(v.name, v.type.tensor_type.elem_type, _dims(v))
            for v in proto.graph.input if v.name not in inits]


def check_custom_ops(proto: onnx.ModelProto, *, where: str = "model.path",
                     allowed_domains: Sequence[str] = ()) -> None:
    """Refuse operators from a domain ONNX Runtime cannot run here, naming the first node.

    ``onnx.checker`` accepts unknown domains, and ONNX Runtime fails only when a session
    opens; this says which node it is before any work.
    """
    ok = STANDARD_DOMAINS | set(allowed_domains)
    for graph_node in (n for g in all_graphs(proto.graph) for n in g.node):
        if graph_node.domain not in ok:
            raise ModelError("the model uses an operator from a custom domain that ONNX Runtime "
                             "cannot run without its library",
                             where=f"{where} (node {graph_node.name or '<unnamed>'})",
                             value=f"{graph_node.domain}::{graph_node.op_type}",
                             fix="export the model with standard ONNX operators (opset 13-19), or "
                                 "replace the custom op before quantizing; quantkit.cli.lint_cmd and "
                                 "onnx.checker accept custom domains, ONNX Runtime does not")


def check_class_count(proto: onnx.ModelProto, output: str, n_classes: int) -> None:
    """The logits output's static last dim must equal the number of label names."""
    out = next((o for o in proto.graph.output if o.name == output), None)
    if out is None or n_classes <= 0:
        return
    dims = _dims(out)
    if not dims or not isinstance(dims[-1], int):
        return  # dynamic: checked on the first real batch (run/stages/model.py: probe_output)
    check_class_width(output, dims[-1], n_classes)


def check_class_width(output: str, model_classes: int, n_classes: int) -> None:
    """One DataError when the logits' width differs from the number of label names."""
    if n_classes <= 0 or model_classes == n_classes:
        return
    raise DataError("the model's output has a different number of classes than the data",
                    where=f"model.output ({output})",
                    value={"model_classes": model_classes, "data_classes": n_classes},
                    fix=f"give data with exactly {model_classes} classes (text: the labels in "
                        "data.label_column / data.label_names; an image folder: one subfolder "
                        "per class under data.path), or leave the labels out for a label-free "
                        "sign-off on agreement with FP32 (data.label_column=null), or select "
                        "the model's logits output with model.output.name=<name>")


def fixed_batch(specs: Sequence[InputSpec]) -> int | None:
    """The batch dimension the model's inputs fix (detectors are often exported with 1), or
    None when it is dynamic."""
    fixed = [s.dims[0] for s in specs if s.dims and isinstance(s.dims[0], int)]
    return fixed[0] if fixed else None


def check_fixed_batch(specs: Sequence[InputSpec], batch_sizes: Mapping[str, int | Sequence[int]]
                      ) -> None:
    """A fixed batch dimension above 1 must equal every batch size of the run (name the
    settings). A fixed batch of 1 needs no setting: the run feeds one example at a time
    (``Feeds.fixed_batch``) and times batch 1 only."""
    fixed = {s.name: s.dims[0] for s in specs if s.dims and isinstance(s.dims[0], int)}
    if not fixed or set(fixed.values()) == {1}:
        return
    name, batch = next(iter(fixed.items()))
    wrong = {}
    for key, value in batch_sizes.items():
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        bad = [v for v in values if v != batch]
        if bad:
            wrong[key] = bad if isinstance(value, (list, tuple)) else bad[0]
    if wrong:
        overrides = " ".join(f"{k}={[batch] if isinstance(batch_sizes[k], (list, tuple)) else batch}"
                             for k in wrong)
        raise ConfigError(f"the model's input {name} has a fixed batch of {batch}, but the run "
                          "uses other batch sizes", where=", ".join(wrong), value=wrong,
                          fix=f"run with {overrides}, or re-export the model with a dynamic "
                              "batch dimension")


# ---------------------------------------------------------------------------------------
# which output is compared (model.output.*) and the text inputs' names (model.inputs.*)


@dataclass(frozen=True)
class OutputSpec:
    """The output every stage compares: its name, what it is, and how it is pooled.

    ``kind``: "logits" ([batch, classes]) or "embedding" ([batch, dims], or token-level
    [batch, tokens, dims] pooled by ``pooling``: "mean" over attention-mask positions or
    "cls", the first token); ``rank`` as declared by the graph (None: not declared).
    """

    name: str
    kind: str
    pooling: str  # "none" for outputs that need no pooling
    rank: int | None


def output_names(proto: onnx.ModelProto) -> list[str]:
    return [o.name for o in proto.graph.output]


#: element types a compared output may have (logits or an embedding)
FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                         onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16})


def _describe(info: onnx.ValueInfoProto) -> str:
    tt = info.type.tensor_type
    dtype = onnx.TensorProto.DataType.Name(tt.elem_type).lower() if tt.elem_type else "?"
    dims = ", ".join("?" if d is None else str(d) for d in _dims(info))
    return f"{info.name}: {dtype}[{dims}]"


def _is_float(info: onnx.ValueInfoProto) -> bool:
    return info.type.tensor_type.elem_type in FLOAT_TYPES


def _input_dim_params(proto: onnx.ModelProto) -> set[str]:
    """Symbolic non-batch dims of the graph inputs (a token dimension such as ``seq``)."""
    return {d for spec in input_specs(proto) for d in spec.dims[1:] if isinstance(d, str)}


def resolve_output(proto: onnx.ModelProto, cfg, *, has_labels: bool) -> OutputSpec:
    """``model.output`` (name, kind, pooling) checked against the graph's outputs.

    ``cfg``: the settings' ``OutputConfig``. Unnamed: the first *float* output (an int64
    output such as ``input_ids`` echoed back is skipped, with a warning). auto: a rank-3
    output (token states) is an embedding, any other a classifier's logits (labeled or
    label-free: agreement, KL); an embedding with a rank-2 output needs
    ``model.output.kind=embedding``. One ModelError before any inference, naming the output,
    its type and shape and ``model.output.name``: a name that is not an output, an output that
    is not a float tensor, a logits output whose width is a token dimension of the inputs
    (it would change with every batch's length).
    """
    names = output_names(proto)
    by_name = {o.name: o for o in proto.graph.output}
    floats = [o.name for o in proto.graph.output if _is_float(o)]
    if cfg.name is not None and cfg.name not in names:
        raise ModelError("model.output.name is not an output of the model",
                         where="model.output.name", value=cfg.name,
                         fix=f"set model.output.name to one of the model's outputs {names}")
    if cfg.name is not None and not _is_float(by_name[cfg.name]):
        raise ModelError("model.output.name is not a float tensor: it cannot be compared as "
                         "logits or an embedding", where="model.output.name",
                         value=_describe(by_name[cfg.name]),
                         fix=f"set model.output.name to one of the float outputs {floats}"
                         if floats else "export the model with its logits or embedding as "
                                        "an output")
    if cfg.name is None and not floats:
        raise ModelError("the model has no float output to compare",
                         where="model.output.name",
                         value=[_describe(by_name[n]) for n in names],
                         fix="export the model with its logits or embedding as an output")
    name = cfg.name or floats[0]
    info = by_name[name]
    if cfg.name is None and names and name != names[0]:
        log.warning("model.output.name not set: comparing %s, the first float output (%s "
                    "is not a float tensor); set model.output.name to choose another",
                    _describe(info), _describe(by_name[names[0]]))
    rank = len(info.type.tensor_type.shape.dim) if info.type.tensor_type.HasField("shape") \
        else None
    kind = cfg.kind
    if kind == "auto":
        kind = "embedding" if rank == 3 else "logits"
    if kind == "logits" and rank not in (None, 2):
        raise ModelError(f"a logits output must be [batch, classes], this one has rank {rank}",
                         where=f"model.output ({name})", value=_describe(info),
                         fix="set model.output.kind=embedding (token states are pooled by "
                             "model.output.pooling), or select the logits output with "
                             f"model.output.name=<one of {names}>")
    if kind == "logits" and rank == 2 and _dims(info)[1] in _input_dim_params(proto):
        raise ModelError("the output's width is a token dimension of the inputs: as logits "
                         "its columns would change with every batch's length",
                         where="model.output.name", value=_describe(info),
                         fix=f"select the logits [batch, classes] or a pooled embedding with "
                             f"model.output.name=<one of {floats}>")
    if kind == "embedding" and rank not in (None, 2, 3):
        raise ModelError(f"an embedding output must be [batch, dims] or [batch, tokens, dims], "
                         f"this one has rank {rank}", where=f"model.output ({name})",
                         value=_describe(info),
                         fix=f"select the pooled or token-level output with "
                             f"model.output.name=<one of {names}>")
    pooling = "none"
    if kind == "embedding" and rank in (None, 3):
        pooling = cfg.pooling
        if rank == 3 and pooling == "none":
            raise ConfigError("a token-level output [batch, tokens, dims] must be pooled",
                              where="model.output.pooling", value="none",
                              fix="set model.output.pooling=mean (attention-masked) or cls, or "
                                  "select a pooled output with model.output.name")
    del has_labels  # labels decide the metric (run/verdicts.py), not the output's kind
    return OutputSpec(name=name, kind=kind, pooling=pooling, rank=rank)


