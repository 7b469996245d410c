"""conductor (see docs/architecture.md)."""
