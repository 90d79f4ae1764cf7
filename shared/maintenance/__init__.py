"""Maintenance: the reconciler that repairs what lost messages leave, and the audit of the invariants."""
