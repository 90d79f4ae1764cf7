"""The event outbox: events recorded with the changes they describe, and published after, at least once, in
order per stream (log.py, the interface the rest of the service uses; its roles a module each)."""
