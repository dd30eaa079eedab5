"""The API's erasure by subject: ``POST api/forget`` with ``{"subject": "shop.order:42"}``.

Needs the permission ``forget`` asks of every front door
(``django_openworkflow.delete_workflowrun``); the runs record the caller's
username, and Django's admin log records the erasure under them. Runs of the
subject that have not finished are refused (409, ``refused``, the message
names their ids) unless ``"cancel_live": true``; nothing is erased then.
"""

from __future__ import annotations

from typing import cast

from django.contrib.auth.base_user import AbstractBaseUser
from django.http import HttpRequest, HttpResponse

from ..client.erasure import forget
from ..errors import InvalidArgument
from . import fields
from .fields import ApiError, json_response
from .views import _body, endpoint


@endpoint(POST="delete")
def forget_subject(request: HttpRequest) -> HttpResponse:
    """Erase the payloads of an object's finished runs and their child runs; the runs stay."""
    data = _body(request, {"subject": True, "cancel_live": False})
    subject = fields.subject(data["subject"])
    cancel_live = data.get("cancel_live", False)
    if not isinstance(cancel_live, bool):
        raise ApiError(400, "invalid", "cancel_live must be true or false", "cancel_live")
    try:
        done = forget(subject or "", cancel_live=cancel_live, by=cast(AbstractBaseUser, request.user))
    except InvalidArgument as exc:  # no installed model, or no primary key of it
        raise ApiError(400, "bad_subject", str(exc), "subject") from None
    return json_response(
        {"subject": str(done.subject), "erased": done.erased, "already": done.already, "canceled": done.canceled}
    )
