"""quantkit.qdq."""
