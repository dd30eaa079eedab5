"""URLs: the admin, and /start/, which starts a workflow run from a view."""

from django.contrib import admin
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template import engines
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods

from example_project.demo.workflows import onboard_user

START_FORM = engines["django"].from_string(
    '<form method="post">{% csrf_token %}'
    '<input name="email" value="ada@example.com"> <input name="delay" value="2s"> '
    "<button>Start onboard-user</button></form>"
)


@require_http_methods(["GET", "POST"])
def start(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return HttpResponse(START_FORM.render(request=request))
    # The run is inserted in this transaction: if the view fails, no run exists.
    with transaction.atomic():
        handle = onboard_user.run(
            {
                "user_id": 42,
                "email": request.POST.get("email", "ada@example.com"),
                "delay": request.POST.get("delay", "2s"),
            }
        )
    return redirect(reverse("admin:django_openworkflow_workflowrun_change", args=[handle.id]))


urlpatterns = [
    path("admin/", admin.site.urls),
    path("start/", start, name="start"),
]
