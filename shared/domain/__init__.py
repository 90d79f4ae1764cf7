"""Domain records: rows, their keys and encodings, the queues' messages, Taskcluster's events, and pure decisions
about them (no store call: shared/stores/ reads and writes them)."""
