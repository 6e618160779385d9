"""quantkit.backends."""
