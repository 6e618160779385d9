"""quantkit.models."""
