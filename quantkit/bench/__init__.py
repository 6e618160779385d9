"""quantkit.bench."""
