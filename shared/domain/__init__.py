"""Domain records and indexes: what the queue stores and how (tasks, groups, dependencies, messages, events)."""
