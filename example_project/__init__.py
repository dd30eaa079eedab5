from importlib.util import find_spec

# Load the Celery app (when Celery is installed) so that web processes send to its broker.
if find_spec("celery") is not None:
    from .celery import app as celery_app

    __all__ = ["celery_app"]
