"""Authentication (Hawk, temporary credentials), the client and role stores, and role expansion."""
