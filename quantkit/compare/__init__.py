"""quantkit.compare: evidence that a quantized model matches its FP32 reference.

``metrics``: pure tensor metrics (sqnr_db, cosine_similarity, ...), the streaming
``LayerStats`` accumulator and the per-layer flag table (numpy/scipy only).
``task``: task metrics, agreement and slices (scikit-learn). Import the submodule you need;
this package imports nothing heavy.
"""
