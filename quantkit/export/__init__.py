"""quantkit.export: hand a signed candidate to a serving system (Triton Inference Server)."""
