"""Authentication (Hawk, temporary credentials) and the client store."""
