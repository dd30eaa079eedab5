"""django-openworkflow's adapter for the public PostgreSQL job-queue harness (see README.md)."""
