"""telemetry (see docs/architecture.md)."""
