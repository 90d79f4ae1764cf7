"""Storage interfaces and their adapters (Azure SDK, in-memory)."""
