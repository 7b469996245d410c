"""topology (see docs/architecture.md)."""
