"""Every SQL the engine, client and admin need. Never imports the engine."""
