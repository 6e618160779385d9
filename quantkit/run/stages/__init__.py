"""The stages of one run, in the order quantkit/app.py calls them; each module holds the stage
function of its own name (``calibration.calibration(ctx, sources)``) and its result type:

    preflight -> data -> model -> fp32_reference (dev, test) -> fp16_range_check -> ptq
    -> calibration -> artifacts -> evaluate (dev) -> layerwise -> search -> backend_check
    -> signoff (test, once per declared member) -> latency -> recommend -> record -> report
"""
