"""Does this model fit this data and these settings? Checked before any inference (issue 18).

Each check reads only the ONNX graph's declared inputs, outputs and nodes, so a mismatch is
one clear error naming the setting to change, before FP32 inference, calibration or export
work is spent:

- custom-domain operators that ONNX Runtime cannot run (named by node, op and domain);
- the class count (the logits output's static last dimension vs the data's labels);
- a fixed batch dimension vs every batch-size setting of the run;
- the output compared (``model.output.name / kind / pooling``: :func:`resolve_output`);
- a text model's input names vs the tokenizer's fields (``model.inputs.*``:
  :func:`check_text_inputs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx

from quantkit.errors import ConfigError, DataError, ModelError

__all__ = ["InputSpec", "OutputSpec", "input_specs", "check_custom_ops", "check_class_count",
           "check_fixed_batch", "check_text_inputs", "output_names", "resolve_output",
           "text_input_map", "STANDARD_DOMAINS", "TEXT_FIELDS"]

#: Operator domains ONNX Runtime's CPU build runs without a custom-op library.
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "ai.onnx.preview.training"})



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
    for graph_node in _all_nodes(proto.graph):
        if graph_node.domain not in ok:
            raise ModelError("the model uses an operator from a custom domain that ONNX Runtime "
                             "cannot run without its library",
                             where=f"{where} (node {graph_node.name or '<unnamed>'})",
                             value=f"{graph_node.domain}::{graph_node.op_type}",
                             fix="export the model with standard ONNX operators (opset 13-19), or "
                                 "replace the custom op before quantizing; quantkit.lint and "
                                 "onnx.checker accept custom domains, ONNX Runtime does not")


def _all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _all_nodes(g)


def check_class_count(proto: onnx.ModelProto, output: str, n_classes: int) -> None:
    """The logits output's static last dim must equal the number of label names."""
    out = next((o for o in proto.graph.output if o.name == output), None)
    if out is None or n_classes <= 0:
        return
    dims = _dims(out)
    if not dims or not isinstance(dims[-1], int):
        return
    if dims[-1] != n_classes:
        raise DataError("the model's output has a different number of classes than the data",
                        where=f"model.output ({output})",
                        value={"model_classes": dims[-1], "data_classes": n_classes},
                        fix=f"give data with exactly {dims[-1]} classes (text: the labels in "
                            "data.label_column / data.label_names; an image folder: one subfolder "
                            "per class under data.path), or leave the labels out for a label-free "
                            "sign-off on agreement with FP32 (data.label_column=null), or select "
                            "the model's logits output with model.output.name=<name>")


def check_fixed_batch(specs: Sequence[InputSpec], batch_sizes: Mapping[str, int | Sequence[int]]
                      ) -> None:
    """A fixed batch dimension must equal every batch size of the run (name the settings)."""
    fixed = {s.name: s.dims[0] for s in specs if s.dims and isinstance(s.dims[0], int)}
    if not fixed:
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

#: tokenizer fields a text model may take, in the order model.inputs lists them
TEXT_FIELDS = ("input_ids", "attention_mask", "token_type_ids")


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


def resolve_output(proto: onnx.ModelProto, cfg, *, has_labels: bool) -> OutputSpec:
    """``model.output`` (name, kind, pooling) checked against the graph's outputs.

    ``cfg``: the settings' ``OutputConfig``. auto: a rank-3 output (token states) is an
    embedding, any other a classifier's logits (labeled or label-free: agreement, KL);
    an embedding with a rank-2 output needs ``model.output.kind=embedding``. A name that is
    not an output is one ModelError naming the outputs there are.
    """
    names = output_names(proto)
    name = cfg.name or (names[0] if names else None)
    if name not in names:
        raise ModelError("model.output.name is not an output of the model",
                         where="model.output.name", value=name,
                         fix=f"set model.output.name to one of the model's outputs {names}")
    info = next(o for o in proto.graph.output if o.name == name)
    rank = len(info.type.tensor_type.shape.dim) if info.type.tensor_type.HasField("shape") \
        else None
    kind = cfg.kind
    if kind == "auto":
        kind = "embedding" if rank == 3 else "logits"
    if kind == "logits" and rank not in (None, 2):
        raise ModelError(f"a logits output must be [batch, classes], this one has rank {rank}",
                         where=f"model.output ({name})", value=_dims(info),
                         fix="set model.output.kind=embedding (token states are pooled by "
                             "model.output.pooling), or select the logits output with "
                             f"model.output.name=<one of {names}>")
    if kind == "embedding" and rank not in (None, 2, 3):
        raise ModelError(f"an embedding output must be [batch, dims] or [batch, tokens, dims], "
                         f"this one has rank {rank}", where=f"model.output ({name})",
                         value=_dims(info),
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
    del has_labels  # labels decide nothing here: a label-free classifier still has logits
    return OutputSpec(name=name, kind=kind, pooling=pooling, rank=rank)


def text_input_map(inputs_cfg) -> dict[str, str]:
    """tokenizer field -> the model input name it feeds (``model.inputs``; default: itself)."""
    return {f: (getattr(inputs_cfg, f, None) or f) for f in TEXT_FIELDS}


def check_text_inputs(model_inputs: Sequence[str], inputs_cfg) -> dict[str, str]:
    """The tokenizer fields this model takes, mapped to its input names ({field: name}).

    One DataError before any inference when a model input cannot be fed from the tokenizer,
    when the model has no token-id input, or when ``model.inputs.<field>`` names an input the
    model does not have; the error names the model's actual inputs and the setting to set.
    ``token_type_ids`` under its default name is fed only when the model has it.
    """
    names = list(model_inputs)
    mapping = text_input_map(inputs_cfg)
    given = {f for f in TEXT_FIELDS if getattr(inputs_cfg, f, None)}
    example = " ".join(f"model.inputs.{f}=<name>" for f in TEXT_FIELDS[:2])
    for f in sorted(given):
        if mapping[f] not in names:
            raise DataError(f"model.inputs.{f} names an input the model does not have",
                            where=f"model.inputs.{f}", value=mapping[f],
                            fix=f"the model's inputs are {names}; set model.inputs.{f} to one "
                                "of them")
    fed = {mapping[f]: f for f in TEXT_FIELDS if mapping[f] in names}
    unknown = [n for n in names if n not in fed]
    if unknown:
        raise DataError("a model input cannot be fed from the tokenizer",
                        where="model.inputs", value=unknown[0],
                        fix=f"the model's inputs are {names}; map the tokenizer's fields to "
                            f"them with {example} (token_type_ids: model.inputs."
                            "token_type_ids=<name>)")
    if mapping["input_ids"] not in names:
        raise DataError("the model has no token-id input the tokenizer can feed",
                        where="model.inputs.input_ids", value=names,
                        fix=f"the model's inputs are {names}; set model.inputs.input_ids=<the "
                            "token-id input>")
    return {f: n for n, f in fed.items()}
