"""The reference worker: `python -m worker` (or `tc-queue-worker`); see worker/runner.py and docs/worker.md."""
