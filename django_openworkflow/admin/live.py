"""Live pages: the run page, the run list and the dashboard refresh themselves in the browser.

``static/django_openworkflow/live.js`` fetches the page's own URL again
every ``OPENWORKFLOW["ADMIN_LIVE_SECONDS"]`` seconds and swaps the parts
marked ``data-owf-live-region``. It polls rather than holding a
server-sent-events stream open: a stream keeps a worker thread (and often a
database connection) per open tab, which a WSGI server with sync workers
cannot afford, and some proxies buffer or cut long responses. A poll is an
ordinary page view, under the admin's own login and permissions, on every
database.

A poll renders the page as a reload would (the relative times, "wakes in
3 min" and the timeline's "now", change without any row changing, so there
is no cheaper "has anything changed" answer to give), but it must not
consume the user's messages: those belong to the next page they open.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from ..conf import owf_settings

POLL_HEADER = "X-OpenWorkflow-Live"
"""The header live.js sends with each poll (value ``1``)."""


def live_seconds() -> int:
    """The refresh interval in seconds; 0 when live pages are off or the setting is bad (check E005 says so)."""
    try:
        return owf_settings.admin_live_seconds
    except ValueError:
        return 0


def live_context(*, finished: bool = False) -> dict[str, Any]:
    """What ``django_openworkflow/live.html`` needs: the interval, and whether the page has stopped changing."""
    return {"live_seconds": live_seconds(), "live_finished": finished}


def is_poll(request: HttpRequest) -> bool:
    """Whether ``request`` is live.js refreshing a page the user already has open."""
    return request.headers.get(POLL_HEADER) == "1"


def keep_messages(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """On a poll, leave the messages the page rendered for the next page the user opens.

    Rendering a page reads the messages (the admin's base template lists
    them) and reading marks them used, so a poll that lands between an
    action's redirect and the page it redirects to (another tab, say) would
    eat the action's report. Marked unused again after rendering, they stay
    stored, unchanged.
    """
    storage = getattr(request, "_messages", None)
    add_callback = getattr(response, "add_post_render_callback", None)
    if storage is not None and add_callback is not None and is_poll(request):

        def unread(rendered: HttpResponse) -> None:
            storage.used = False

        add_callback(unread)
    return response
