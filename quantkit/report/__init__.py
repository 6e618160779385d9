"""quantkit.report."""
