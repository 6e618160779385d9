"""quantkit.graph: generic facts about an ONNX graph, the bottom layer under calibrate/,
precision/ and qdq/ (none of which it imports).

- ``weights``: the weighted op types, their weight / bias slots and the weight-axis rule;
- ``facts``: node names, constants, producers / consumers, shape inference (``tensor_infos``);
- ``model_graph``: :class:`ModelGraph`, those facts computed once per FP32 graph;
- ``selection``: what ``precision.include_nodes`` / ``exclude_nodes`` patterns mean.

Submodules import on use (this file imports nothing, so ``quantkit.settings`` can read
``weights`` without importing onnx).
"""
