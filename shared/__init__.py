"""The queue's code: everything the HTTP API and the trigger functions share."""

__version__ = "0.3.0.dev0"  # the one version source: pyproject.toml reads it, /__version__ answers it
