"""Output kinds that need more than a tensor comparison: how raw outputs become task results,
the task metric, and the per-example evidence a verdict resamples (DESIGN.md, "Tasks: what an
output means"). ``quantkit.tasks.detection``: detectors signed off on COCO mAP."""
