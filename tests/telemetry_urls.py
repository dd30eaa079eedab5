"""tests/urls.py and a view that starts a run, for the tracing tests (a traced request starts it)."""

from django.http import HttpRequest, JsonResponse
from django.urls import path

from tests.telemetry_workflows import telemetry_parent
from tests.urls import urlpatterns as test_urlpatterns


def start(request: HttpRequest) -> JsonResponse:
    handle = telemetry_parent.run()
    return JsonResponse({"id": str(handle.id)})


urlpatterns = [path("start", start), *test_urlpatterns]
