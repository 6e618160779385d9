"""quantkit.calibrate."""
