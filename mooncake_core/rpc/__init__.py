"""rpc (see docs/architecture.md)."""
