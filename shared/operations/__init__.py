"""The queue's operations over the domain: lifecycle, claims, checks, groups, artifacts, polling, expiry."""
