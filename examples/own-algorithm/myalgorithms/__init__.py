"""A user's own algorithm, outside fedselect (docs/architecture.md, "Adding an algorithm")."""
