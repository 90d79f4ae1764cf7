"""`tc-queue-admin`: clients, roles and scopes of a deployed queue, administered over its Auth API."""
