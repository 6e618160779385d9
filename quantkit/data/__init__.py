"""quantkit.data."""
