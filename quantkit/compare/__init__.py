"""quantkit.compare."""
