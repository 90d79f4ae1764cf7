"""Trigger adapters: each parses its input, calls one queue operation and reports the outcome."""
