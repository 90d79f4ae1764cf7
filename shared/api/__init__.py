"""The HTTP API of the queue."""
