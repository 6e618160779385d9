"""quantkit.precision."""
