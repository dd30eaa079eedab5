"""The JSON HTTP API's routes, under ``api/`` of the package's URLs (see ``views.py``)."""

from django.urls import URLPattern, path, re_path

from . import approvals, erasure, filter_actions, schedules, stream, views, workers

urlpatterns: list[URLPattern] = [
    path("api/runs", views.runs, name="api-runs"),
    # Before "api/runs/<run_id>/...", which "actions" would otherwise match as a run id.
    *(path(f"api/runs/actions/{name}", view, name=f"api-runs-{name}") for name, view in filter_actions.VIEWS.items()),
    path("api/runs/<str:run_id>", views.run_detail, name="api-run"),
    path("api/runs/<str:run_id>/steps", views.run_steps, name="api-run-steps"),
    path("api/runs/<str:run_id>/cancel", views.run_cancel, name="api-run-cancel"),
    path("api/runs/<str:run_id>/retry", views.run_retry, name="api-run-retry"),
    path("api/runs/<str:run_id>/retry-now", views.run_retry_now, name="api-run-retry-now"),
    path("api/runs/<str:run_id>/rerun", views.run_rerun, name="api-run-rerun"),
    path("api/runs/<str:run_id>/signals", views.run_signal, name="api-run-signals"),
    path("api/runs/<str:run_id>/events", stream.run_events, name="api-run-events"),
    path("api/events", views.events, name="api-events"),
    path("api/forget", erasure.forget_subject, name="api-forget"),
    path("api/workflows", views.workflows, name="api-workflows"),
    path("api/workers", workers.worker_list, name="api-workers"),
    path("api/queues", workers.queue_list, name="api-queues"),
    path("api/queues/<str:name>/pause", workers.queue_pause, name="api-queue-pause"),
    path("api/queues/<str:name>/resume", workers.queue_resume, name="api-queue-resume"),
    path("api/schedules", schedules.schedule_list, name="api-schedules"),
    path("api/schedules/<str:name>/trigger", schedules.schedule_trigger, name="api-schedule-trigger"),
    path("api/schedules/<str:name>/backfill", schedules.schedule_backfill, name="api-schedule-backfill"),
    path("api/approvals", approvals.approval_list, name="api-approvals"),
    path("api/approvals/<str:approval_id>/decide", approvals.approval_decide, name="api-approval-decide"),
    path("api/approvals/<str:approval_id>/submit", approvals.approval_submit, name="api-approval-submit"),
    path("api/approvals/<str:approval_id>/claim", approvals.approval_claim, name="api-approval-claim"),
    path("api/approvals/<str:approval_id>/release", approvals.approval_release, name="api-approval-release"),
    path("api/approvals/<str:approval_id>/reassign", approvals.approval_reassign, name="api-approval-reassign"),
    path("api/openapi.json", views.openapi, name="api-openapi"),
    re_path(r"^api/(?P<rest>.*)$", views.not_found),
]
