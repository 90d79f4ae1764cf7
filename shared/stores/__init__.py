"""The stores: a class per kind of row that reads and writes it (tables, queues), over shared/storage's connector.

Where a new table goes: its rows (the record, its keys and encoding, the table's name, the pure decisions about
them) in `shared/domain/<kind>.py`; the class that reads and writes them in `shared/stores/<kind>.py`; a write that
must commit with a task's change, or whose events are published, through the unit of work in
`shared/operations/writes/` (`Stores` gathers every store an operation uses). A store imports records, never a use
case; nothing in `shared/domain/` calls a store (an import-linter contract holds both).
"""
