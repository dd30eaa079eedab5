"""The server-sent events of a run's progress (api/stream.py): resuming from Last-Event-ID, ending, refusing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from django_openworkflow.api import stream
from django_openworkflow.testing import drain
from tests.api.test_views import API, make_user
from tests.fixtures.progress_workflows import progress_chunks, progress_steps

pytestmark = pytest.mark.django_db(transaction=True)


def events(response: Any) -> list[dict[str, Any]]:
    """The response's events as dicts (id, event, data decoded), comments as {"comment": ...}."""
    text = b"".join(response.streaming_content).decode()
    parsed = []
    for block in text.split("\n\n"):
        if not block:
            continue
        event: dict[str, Any] = {}
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "data":
                value = json.loads(value)
            elif field == "id":
                value = int(value)
            event[field or "comment"] = value
        parsed.append(event)
    return parsed


@pytest.fixture
def viewer(django_user_model: Any) -> Client:
    client = Client()
    client.force_login(make_user(django_user_model, "view", name="viewer"))
    return client


def test_the_events_resume_after_last_event_id_and_end_with_the_run(viewer):
    handle = progress_chunks.run({"chunks": 25, "every": 10})
    drain()
    response = viewer.get(f"{API}/runs/{handle.id}/events?stream=out")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    first = events(response)
    assert first[0] == {"retry": "1000"}
    assert first[1] == {"event": "progress", "data": {"status": "done", "written": 20}}
    chunks = [event for event in first if event.get("event") == "chunk"]
    assert [(event["id"], event["data"]) for event in chunks] == [(i, {"i": i}) for i in range(25)]
    assert first[-1] == {"event": "end", "data": {"status": "completed"}}
    # A browser that had up to chunk 17 reconnects: it gets 18 on, once each.
    again = events(viewer.get(f"{API}/runs/{handle.id}/events?stream=out", headers={"Last-Event-ID": "17"}))
    assert [event["id"] for event in again if event.get("event") == "chunk"] == list(range(18, 25))
    # ?offset= starts a first connection elsewhere; without a stream, only the values and the end.
    assert [
        e["id"] for e in events(viewer.get(f"{API}/runs/{handle.id}/events?stream=out&offset=23")) if "id" in e
    ] == [
        23,
        24,
    ]
    assert [e.get("event") for e in events(viewer.get(f"{API}/runs/{handle.id}/events"))] == [None, "progress", "end"]


def test_a_connection_to_an_unfinished_run_ends_after_its_time_with_heartbeats(viewer, monkeypatch):
    monkeypatch.setattr(stream, "CONNECTION_SECONDS", 0.3)
    monkeypatch.setattr(stream, "HEARTBEAT_SECONDS", 0.05)
    handle = progress_steps.run()  # never executed: no worker here
    got = events(viewer.get(f"{API}/runs/{handle.id}/events?stream=log"))
    assert got[1] == {"event": "progress", "data": {}}
    assert {"comment": "keep-alive"} in got
    assert not any(e.get("event") == "end" for e in got)  # the client reconnects


@pytest.mark.parametrize(
    ("who", "status"),
    [("anonymous", 401), ("no-permission", 403)],
)
def test_refused_without_the_view_permission(django_user_model, who, status):
    handle = progress_steps.run()
    client = Client()
    if who == "no-permission":
        client.force_login(make_user(django_user_model, name="nobody"))
    response = client.get(f"{API}/runs/{handle.id}/events?stream=log")
    assert response.status_code == status
    assert not response.streaming


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("runs/00000000-0000-4000-8000-000000000000/events", 404, "not_found"),
        ("runs/not-a-run/events", 404, "not_found"),
        ("runs/{run}/events?offset=-3", 400, "invalid"),
        ("runs/{run}/events?stream=" + "x" * 300, 400, "invalid"),
        ("runs/{run}/events?strem=log", 400, "unknown_parameter"),  # a typo is told, not ignored
    ],
)
def test_bad_requests_are_answered_before_the_stream_starts(viewer, path, status, code):
    handle = progress_steps.run()
    response = viewer.get(f"{API}/" + path.replace("{run}", str(handle.id)))
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


@pytest.mark.parametrize("last", ["-1", "x", "1.5"])
def test_a_bad_last_event_id_is_refused_even_with_an_offset(viewer, last):
    handle = progress_steps.run()
    response = viewer.get(f"{API}/runs/{handle.id}/events?offset=2", headers={"Last-Event-ID": last})
    status, code = 400, "invalid"
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


def test_under_asgi_the_events_come_from_an_asynchronous_iterator(django_user_model):
    # An ASGI server would drain a plain iterator in one go (sync_to_async(list)): nothing would stream.
    from asgiref.sync import async_to_sync, sync_to_async
    from django.test import AsyncClient

    handle = progress_chunks.run({"chunks": 3, "every": 2})
    drain()
    user = make_user(django_user_model, "view", name="asgi-viewer")

    async def read() -> tuple[bool, str]:
        client = AsyncClient()
        await sync_to_async(client.force_login)(user)
        response = await client.get(f"{API}/runs/{handle.id}/events?stream=out")
        return response.is_async, "".join([part.decode() async for part in response.streaming_content])

    is_async, text = async_to_sync(read)()
    assert is_async
    assert text.startswith("retry: 1000\n\n") and text.endswith('event: end\ndata: {"status":"completed"}\n\n')
    assert [line for line in text.split("\n") if line.startswith("id: ")] == ["id: 0", "id: 1", "id: 2"]
