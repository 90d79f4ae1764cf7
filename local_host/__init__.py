"""A local stand-in for the Azure Functions host (Core Tools cannot be installed here)."""
