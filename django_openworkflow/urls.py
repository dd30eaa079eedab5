"""The package's URLs: the JSON HTTP API and the Prometheus ``/metrics`` view.

Mount them under a prefix of your choice::

    path("workflows/", include("django_openworkflow.urls")),
"""

from django.urls import path

from .api.urls import urlpatterns as api_urlpatterns
from .metrics.views import metrics_view

app_name = "django_openworkflow"

urlpatterns = [
    path("metrics", metrics_view, name="metrics"),
    *api_urlpatterns,
]
