"""URLs: the admin, /start/, which starts a workflow run from a view (for signed-in users), and i18n/.

i18n/ is Django's ``set_language`` view, which django-admin-interface's language chooser posts to;
/favicon.ico, the example's icon.
"""

from django.contrib import admin
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect
from django.template import engines
from django.templatetags.static import static
from django.urls import include, path, reverse
from django.views.decorators.http import require_http_methods
from django.views.generic import RedirectView

from django_openworkflow.durations import parse_duration
from example_project.demo.workflows import onboard_user

START_FORM = engines["django"].from_string(
    '<form method="post">{% csrf_token %}'
    '<input name="email" value="ada@example.com"> <input name="delay" value="2s"> '
    "<button>Start onboard-user</button></form>"
)


# Signed-in users only: every POST starts a run. The example has no login page of its own: the admin's.
@login_required(login_url="admin:login")
@require_http_methods(["GET", "POST"])
def start(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return HttpResponse(START_FORM.render(request=request))
    delay = request.POST.get("delay", "2s")
    try:
        parse_duration(delay)  # the workflow sleeps this long: refuse a bad one now, not in the worker
        # The run is inserted in this transaction: if the view fails, no run exists.
        with transaction.atomic():
            handle = onboard_user.run(
                {"user_id": 42, "email": request.POST.get("email", "ada@example.com"), "delay": delay}
            )
    except ValueError as exc:  # PayloadError (the input cannot be stored) or a bad delay
        return HttpResponseBadRequest(f"Not started: {exc}\n", content_type="text/plain; charset=utf-8")
    return redirect(reverse("admin:django_openworkflow_workflowrun_change", args=[handle.id]))


urlpatterns = [
    path("admin/", admin.site.urls),
    path("start/", start, name="start"),
    path("i18n/", include("django.conf.urls.i18n")),
    # Browsers ask every site for one: an icon instead of a 404 (and a warning) on each page.
    path("favicon.ico", RedirectView.as_view(url=static("demo/favicon.svg"))),
]
