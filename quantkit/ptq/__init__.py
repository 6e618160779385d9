"""Post-training techniques that make INT8 agree with FP32 (issue 16).

Each technique is one module with one entry function that takes a graph (and the data it
needs) and returns ``(edited model or choice, StepRecord)``; the StepRecord says what it
changed, so the run can record it next to the Plan. Run order (see each module):

1. ``smoothquant.smooth_activations``  FP32 graph, before calibration (changes the tensors
   that are calibrated; FP32 function unchanged)
2. ``equalization.equalize_pairs``      FP32 graph, before calibration (FP32 unchanged)
3. calibration (one streaming pass), build_plan
4. ``range_search.search_ranges``       after calibration, before Q/DQ: new amax per tensor
5. ``weight_rounding.round_weights``    after the Plan, before Q/DQ: GPTQ on the INT8 grid
   (``sequential.sequential_round``: layer by layer on the partially INT8 network)
6. ``bias_correction.correct_bias``     after the Plan, before Q/DQ (edits biases of INT8
   nodes of the graph that is quantized; the FP32 reference stays the original model)
7. ``qdq.insert.insert_qdq(..., int8_weights=True)``
"""

from quantkit.ptq.step_record import StepRecord

__all__ = ["StepRecord"]
