"""The queue's code: everything the HTTP API and the trigger functions share."""

__version__ = "0.1.0"  # as pyproject.toml's (a test checks); named in the storage calls' User-Agent
