"""sim (see docs/architecture.md)."""
