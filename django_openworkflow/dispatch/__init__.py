"""Handing runs to other execution engines (Celery). The database stays the source of truth."""
