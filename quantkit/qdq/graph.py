"""Moved to :mod:`quantkit.graph.facts` (the bottom layer precision/ and qdq/ both read);
this name stays so existing imports keep working."""

from quantkit.graph.facts import (FLOAT, FLOAT16, MIN_QDQ_OPSET, QuantSlots, TensorInfo,  # noqa: F401
                                  attr, constant_arrays, constant_tensors, consumers,
                                  ensure_node_names, node_names, opset_version, producers,
                                  quant_slots, require_qdq_opset, subgraph_captures,
                                  tensor_infos, unique_name, with_value_info)

__all__ = ["FLOAT", "FLOAT16", "MIN_QDQ_OPSET", "QuantSlots", "TensorInfo", "attr", "constant_arrays", "constant_tensors", "consumers", "ensure_node_names", "node_names", "opset_version", "producers", "quant_slots", "require_qdq_opset", "subgraph_captures", "tensor_infos", "unique_name", "with_value_info"]
