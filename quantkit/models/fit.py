"""Does this model fit this data and these settings? Checked before any inference (issue 18).

Each check reads only the ONNX graph's declared inputs, outputs and nodes, so a mismatch is
one clear error naming the setting to change, before FP32 inference, calibration or export
work is spent:

- custom-domain operators that ONNX Runtime cannot run (named by node, op and domain);
- the class count (the logits output's static last dimension vs the data's labels);
- a fixed batch dimension vs every batch-size setting of the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx

from quantkit.errors import ConfigError, DataError, ModelError

__all__ = ["InputSpec", "input_specs", "check_custom_ops", "check_class_count",
           "check_fixed_batch", "STANDARD_DOMAINS"]

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
                        fix="use data whose label column has exactly that many classes "
                            "(data.label_names / data.label_column), or select the model's logits "
                            "output with model.output=<name>")


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
