"""Benchmarks for django-openworkflow (not tests). See bench/README.md."""
