"""quantkit.verdict."""
