"""The JSON HTTP API (views in views.py, routes in urls.py)."""
