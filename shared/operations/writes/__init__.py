"""The write path below the use cases: the task unit of work (`repository.py`: read, decide, write on the ETag),
the messages put beside a write (`messages.py`) and those one change puts before it, once across its tries
(`guards.py`), the dependency edges, the group rows, the
live logs sealed by a resolution, the claim waiters, block staging for uploads, and the stores every operation
shares (`stores.py`). Nothing here imports a use case (pyproject.toml's import contract)."""
