"""Prometheus metrics: counters from real runs, gauges from the database, /metrics's rules, a real Prometheus."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from django_openworkflow import metrics, send_signal
from django_openworkflow.checks import check_settings, check_telemetry
from django_openworkflow.metrics import labels
from django_openworkflow.store import get_backend
from tests.conftest import CEILING, wait_until
from tests.fixtures.telemetry_workflows import (
    telemetry_dynamic,
    telemetry_fails,
    telemetry_parent,
    telemetry_retried,
    telemetry_steps,
)
from tests.fixtures.testapp.workflows import three_steps

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/workflows/metrics"
ON = {"POLL_INTERVAL": "20ms", "METRICS": True}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(autouse=True)
def fresh_label_caps() -> Iterator[None]:
    """Each test starts with caps that have seen no value (they are first come, first kept, per process)."""
    saved = [(cap, cap.kept) for cap in labels.CAPS]
    for cap in labels.CAPS:
        cap.reset()
    yield
    for cap, kept in saved:
        cap.kept = kept
        cap.reset()


@pytest.fixture
def metrics_on() -> Iterator[None]:
    with override_settings(OPENWORKFLOW=ON):
        metrics.enable()
        try:
            yield
        finally:
            metrics.disable()


def parse(text: str) -> Samples:
    """Every sample of an exposition, by (name, labels), read by prometheus-client's own parser."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(client: Any, **headers: str) -> Samples:
    response = client.get(URL, headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return parse(response.content.decode())


def finished(*handles: Any) -> bool:
    """Every run has ended (a burst worker could stop while a step's retry is not due yet)."""
    return all(handle.status() in ("completed", "failed") for handle in handles)


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_counters_and_histograms_count_real_runs(client, metrics_on, run_worker):
    before = scrape(client)
    steps, fails, retried = telemetry_steps.run(), telemetry_fails.run(), telemetry_retried.run()
    run_worker(until=lambda: finished(steps, fails, retried), queues=("telemetry",))
    assert (steps.status(), fails.status(), retried.status()) == ("completed", "failed", "completed")
    after = scrape(client)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    for name in ("telemetry-steps", "telemetry-fails", "telemetry-retried"):
        assert delta("workflow_runs_started_total", workflow=name, queue="telemetry") == 1
    assert delta("workflow_runs_finished_total", workflow="telemetry-steps", queue="telemetry", status="completed") == 1
    assert delta("workflow_runs_finished_total", workflow="telemetry-fails", queue="telemetry", status="failed") == 1
    assert delta("workflow_runs_finished_total", workflow="telemetry-steps", queue="telemetry", status="failed") == 0
    # The workflow-level retry; a step's retry is not one.
    assert delta("workflow_runs_retried_total", workflow="telemetry-retried", queue="telemetry") == 1
    assert delta("workflow_runs_retried_total", workflow="telemetry-steps", queue="telemetry") == 0
    assert delta("workflow_run_duration_seconds_count", workflow="telemetry-steps", status="completed") == 1
    assert delta("workflow_run_duration_seconds_count", workflow="telemetry-fails", status="failed") == 1
    # "send" and "send:1" are one series; "flaky" ran twice, its second attempt a retry.
    assert delta("workflow_step_duration_seconds_count", workflow="telemetry-steps", step="send") == 2
    assert delta("workflow_step_duration_seconds_count", workflow="telemetry-steps", step="flaky") == 2
    assert delta("workflow_step_retries_total", workflow="telemetry-steps", step="flaky") == 1
    assert delta("workflow_step_failures_total", workflow="telemetry-steps", step="flaky") == 1
    assert delta("workflow_step_failures_total", workflow="telemetry-fails", step="boom") == 1
    assert not any(dict(labels).get("step") == "send:1" for _, labels in after)
    text = client.get(URL).content.decode()
    assert str(steps.id) not in text  # no run id in any label


def test_signals_are_counted_by_workflow_and_name(client, metrics_on, run_worker):
    before = scrape(client)
    handle = telemetry_parent.run()
    run_worker(until=lambda: handle.fetch().is_parked, queues=("telemetry",))
    assert send_signal(handle.id, "go", {"ok": True}) is True
    assert send_signal(handle.id, "unheard") is False  # buffered: still counted as sent
    after = scrape(client)
    for name in ("go", "unheard"):
        assert (
            value(after, "workflow_signals_total", workflow="telemetry-parent", signal=name)
            - value(before, "workflow_signals_total", workflow="telemetry-parent", signal=name)
            == 1
        )


def test_step_names_built_from_data_are_capped_per_workflow(client, metrics_on, run_worker):
    labels.STEPS.kept = 3
    handle = telemetry_dynamic.run({"items": list(range(6))})
    run_worker(until=lambda: finished(handle), queues=("telemetry",))
    samples = scrape(client)
    steps = {
        dict(labels)["step"]
        for name, labels in samples
        if name == "workflow_step_duration_seconds_count" and dict(labels).get("workflow") == "telemetry-dynamic"
    }
    assert steps == {"fetch-0", "fetch-1", "fetch-2", labels.OTHER}
    assert value(samples, "workflow_step_duration_seconds_count", workflow="telemetry-dynamic", step="_other") == 3


def series(samples: Samples, name: str, **labels: str) -> list[dict[str, str]]:
    """The label sets of ``name``'s samples that have ``labels``."""
    return [
        dict(found) for sample, found in samples if sample == name and set(labels.items()) <= set(dict(found).items())
    ]


def counted(before: Samples, after: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """What ``name`` counted between two scrapes, per label set that has ``labels`` (the registry is the process's:
    earlier tests left series in it)."""
    found = {frozenset(each.items()) for each in series(after, name, **labels)}
    deltas = {each: after.get((name, each), 0.0) - before.get((name, each), 0.0) for each in found}
    return {each: delta for each, delta in deltas.items() if delta}


def test_signal_names_chosen_by_senders_make_a_bounded_number_of_series(client, metrics_on):
    """Anyone allowed to send a signal picks its name: past the cap, new names share one series."""
    before = scrape(client)
    handle = telemetry_parent.run()
    sent = labels.SIGNAL_LABELS_KEPT + 150
    for n in range(sent):
        send_signal(handle.id, f"junk-{n}")
    after = scrape(client)
    signals = counted(before, after, "workflow_signals_total", workflow="telemetry-parent")
    assert len(signals) == labels.SIGNAL_LABELS_KEPT + 1
    assert len(series(after, "workflow_signals_total")) - len(series(before, "workflow_signals_total")) <= len(signals)
    assert signals[frozenset({"workflow": "telemetry-parent", "signal": "junk-0"}.items())] == 1
    assert signals[frozenset({"workflow": "telemetry-parent", "signal": labels.OTHER}.items())] == 150
    assert sum(signals.values()) == sent
    # Another workflow's signals have a cap of their own.
    other = telemetry_steps.run()
    send_signal(other.id, "go")
    assert counted(after, scrape(client), "workflow_signals_total", workflow="telemetry-steps") == {
        frozenset({"workflow": "telemetry-steps", "signal": "go"}.items()): 1
    }


def test_queue_and_workflow_labels_are_capped_beyond_what_the_code_declares(client, metrics_on):
    from django_openworkflow import hooks

    labels.QUEUES.kept = 2
    labels.WORKFLOWS.kept = 2
    before = scrape(client)
    # Runs started on queues a caller named (the HTTP API's start takes any queue name).
    for n in range(5):
        telemetry_steps.run(queue=f"picked-{n}")
        hooks.send(hooks.run_started, "telemetry-steps", run_id=None, queue=f"picked-{n}")
    # Runs of workflows this process does not register (code since removed), as a worker reports them.
    for n in range(5):
        hooks.send(hooks.run_started, f"removed-{n}", run_id=None, queue="telemetry")
    after = scrape(client)

    started = counted(before, after, "workflow_runs_started_total", workflow="telemetry-steps")
    assert {dict(each)["queue"]: n for each, n in started.items()} == {"picked-0": 1, "picked-1": 1, labels.OTHER: 3}
    due = {found["queue"]: value(after, "workflow_runs_due", **found) for found in series(after, "workflow_runs_due")}
    # Queues the registered workflows declare keep theirs; the backlog of the others is summed.
    assert {"default", "telemetry"} <= set(due)
    assert {queue for queue in due if queue.startswith("picked-")} == {"picked-0", "picked-1"}
    assert (due[labels.OTHER], due["picked-0"]) == (3, 1)

    started = counted(before, after, "workflow_runs_started_total", queue="telemetry")
    by_workflow = {dict(each)["workflow"]: n for each, n in started.items()}
    assert by_workflow == {"removed-0": 1, "removed-1": 1, labels.OTHER: 3}
    # A registered workflow is never counted under "_other", however many others came first.
    hooks.send(hooks.run_started, "telemetry-fails", run_id=None, queue="telemetry")
    assert value(scrape(client), "workflow_runs_started_total", workflow="telemetry-fails", queue="telemetry") == (
        value(after, "workflow_runs_started_total", workflow="telemetry-fails", queue="telemetry") + 1
    )


def test_gauges_are_read_from_the_database(client, metrics_on):
    store = get_backend()
    late = store.now() - timedelta(minutes=5)
    for _ in range(3):
        telemetry_steps.run()
    telemetry_steps.run(available_at=late)  # due for five minutes
    telemetry_steps.run(available_at=timedelta(hours=1))  # not due yet
    samples = scrape(client)
    assert value(samples, "workflow_runs_due", queue="telemetry") == 4
    assert value(samples, "workflow_runs_due", queue="default") == 0  # a declared queue with nothing due
    age = value(samples, "workflow_oldest_due_run_age_seconds", queue="telemetry")
    assert 300 <= age < 3600
    assert value(samples, "workflow_oldest_due_run_age_seconds", queue="default") == 0
    assert value(samples, "workflow_runs_in_flight", workflow="telemetry-steps") == 0

    # A worker holds two of them: in flight, no longer due.
    claimed = store.claim("metrics-test-worker", 2, timedelta(minutes=1), ("telemetry",))
    assert len(claimed) == 2
    samples = scrape(client)
    assert value(samples, "workflow_runs_due", queue="telemetry") == 2
    assert value(samples, "workflow_runs_in_flight", workflow="telemetry-steps") == 2
    assert value(samples, "workflow_runs_in_flight", workflow="telemetry-fails") == 0


def test_overdue_tasks_are_a_gauge_by_workflow(client, metrics_on, run_worker):
    from django_openworkflow.models import Approval
    from django_openworkflow.testing import advance
    from tests.conftest import is_parked
    from tests.fixtures.testapp.workflows import refund

    handles = [refund.run({"amount": n, "timeout": "1d", "due": "1h"}) for n in (1, 2)]
    run_worker(until=lambda: Approval.objects.count() == 2 and all(is_parked(handle) for handle in handles))
    assert value(scrape(client), "workflow_overdue_tasks", workflow="refund") == 0
    advance("2h")
    assert value(scrape(client), "workflow_overdue_tasks", workflow="refund") == 2


def test_metrics_off_is_a_404_that_says_how_to_turn_them_on(client):
    response = client.get(URL)
    assert response.status_code == 404
    assert "OPENWORKFLOW['METRICS'] = True" in response.content.decode()


def test_without_prometheus_client_metrics_answer_501_naming_the_extra(client, monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # what `import prometheus_client` sees uninstalled
    with override_settings(OPENWORKFLOW=ON):
        response = client.get(URL)
        messages = check_telemetry()
    assert response.status_code == 501
    assert "pip install 'django-openworkflow[prometheus]'" in response.content.decode()
    assert [m.id for m in messages] == ["openworkflow.E070"]
    with pytest.raises(ImportError, match=r"django-openworkflow\[prometheus\]"):
        metrics.enable()


def test_a_token_guards_the_metrics(client, metrics_on):
    with override_settings(OPENWORKFLOW={**ON, "METRICS_TOKEN": "s3cret"}):
        denied = client.get(URL)
        assert denied.status_code == 401
        assert denied["WWW-Authenticate"].startswith("Bearer")
        assert client.get(URL, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get(URL, headers={"Authorization": "Basic s3cret"}).status_code == 401
        assert "workflow_runs_due" in client.get(URL, headers={"Authorization": "Bearer s3cret"}).content.decode()
        user = get_user_model().objects.create_user("someone", password="x")
        client.force_login(user)
        assert client.get(URL).status_code == 401
        user.is_staff = True
        user.save()
        assert client.get(URL).status_code == 200  # a staff session may look too


@pytest.mark.parametrize("token", ["", 123])
def test_a_token_that_is_not_a_string_is_a_check_error(token):
    with override_settings(OPENWORKFLOW={**ON, "METRICS_TOKEN": token}):
        assert [m.id for m in check_telemetry()] == ["openworkflow.E072"]
        assert [m.id for m in check_settings() if m.id == "openworkflow.E001"] == []  # the keys are known


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str, **headers: str) -> str:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=CEILING) as response:
        return str(response.read().decode())


def test_worker_processes_report_through_the_multiprocess_directory_and_their_own_port(
    client, metrics_on, workers, tmp_path, monkeypatch
):
    """Two real `runworkflows` processes share PROMETHEUS_MULTIPROC_DIR: /metrics sums them; --metrics-port serves."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setenv("OWF_TEST_METRICS", "1")
    port = free_port()
    workers.start("--concurrency", "2", "--metrics-port", f"127.0.0.1:{port}")  # the default queue
    workers.start("--concurrency", "2", "--queue", "second")
    handles = [three_steps.run({"start": n}, queue=queue) for n in range(3) for queue in ("default", "second")]
    wait_until(lambda: all(h.status() == "completed" for h in handles), timeout=CEILING)

    # The view (this process, multiprocess mode) sums what both workers wrote in the directory.
    samples = scrape(client)
    for queue in ("default", "second"):  # each queue's runs were executed by one of the workers
        labels = {"workflow": "three-steps", "queue": queue}
        assert value(samples, "workflow_runs_started_total", **labels) == 3
        assert value(samples, "workflow_runs_finished_total", status="completed", **labels) == 3
    assert value(samples, "workflow_step_duration_seconds_count", workflow="three-steps", step="one") == 6
    assert value(samples, "workflow_runs_due", queue="default") == 0

    # The worker's own exporter: the same sums (same host, same directory), and no database gauges.
    # (It listens before its worker claims anything, and that worker ran the default queue's runs.)
    served = parse(http_get(f"http://127.0.0.1:{port}/metrics"))
    for queue in ("default", "second"):
        labels = {"workflow": "three-steps", "queue": queue}
        assert value(served, "workflow_runs_finished_total", status="completed", **labels) == 3
    assert not any(name.startswith(("workflow_runs_due", "workflow_runs_in_flight")) for name, _ in served)


def runworkflows(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    from django.db import connection

    return subprocess.run(
        [sys.executable, "-m", "django", "runworkflows", "--settings=tests.settings", *args],
        capture_output=True,
        text=True,
        timeout=CEILING,
        env={**os.environ, "OWF_TEST_DB_NAME": str(connection.settings_dict["NAME"]), **env},
    )


def test_metrics_port_needs_metrics_on_and_a_port():
    proc = runworkflows("--metrics-port", "9100", OWF_TEST_METRICS="")
    assert proc.returncode != 0
    assert "--metrics-port needs OPENWORKFLOW['METRICS'] = True" in proc.stderr
    proc = runworkflows("--metrics-port", "127.0.0.1:http", OWF_TEST_METRICS="1")
    assert proc.returncode != 0
    assert "expected [ADDR:]PORT with a port from 1 to 65535, got '127.0.0.1:http'" in proc.stderr


def test_metrics_port_in_use_is_a_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = runworkflows("--burst", "--metrics-port", f"127.0.0.1:{port}", OWF_TEST_METRICS="1")
    assert proc.returncode != 0
    assert f"--metrics-port 127.0.0.1:{port}:" in proc.stderr


# -- A real Prometheus server scrapes /metrics --

PROMETHEUS = "/usr/bin/prometheus"


@pytest.fixture
def loopback_server(transactional_db: None) -> Iterator[str]:
    """The app served over HTTP on 127.0.0.1 only, from a thread of this process."""
    import threading
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from django.conf import settings
    from django.core.wsgi import get_wsgi_application

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = make_server("127.0.0.1", 0, get_wsgi_application(), handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with override_settings(ALLOWED_HOSTS=[*settings.ALLOWED_HOSTS, "127.0.0.1"]):
            yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def prometheus_query(base: str, query: str) -> list[dict[str, Any]]:
    body = http_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": query}))
    import json

    answer = json.loads(body)
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


def test_a_real_prometheus_server_scrapes_the_metrics(loopback_server, metrics_on, tmp_path):
    if not os.access(PROMETHEUS, os.X_OK):
        message = f"{PROMETHEUS} is missing (Debian's prometheus package)"
        if os.environ.get("OPENWORKFLOW_REQUIRE_PROMETHEUS"):
            pytest.fail(message)
        pytest.skip(message)
    for _ in range(2):
        telemetry_steps.run()
    port = free_port()
    config = tmp_path / "prometheus.yml"
    target = urllib.parse.urlsplit(loopback_server).netloc
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: workflows\n"
        f"    metrics_path: {URL}\n"
        "    authorization:\n      credentials: prom-token\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    with (
        (tmp_path / "prometheus.log").open("wb") as log,
        override_settings(OPENWORKFLOW={**ON, "METRICS_TOKEN": "prom-token"}),
    ):
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            found: list[dict[str, Any]] = []

            def scraped() -> bool:
                nonlocal found
                if proc.poll() is not None:
                    raise AssertionError(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()[-2000:]}")
                try:
                    found = prometheus_query(base, 'workflow_runs_due{queue="telemetry"}')
                except OSError:
                    return False  # not listening yet
                return bool(found)

            wait_until(scraped, timeout=CEILING, interval=0.5)
            assert found[0]["metric"]["job"] == "workflows"
            assert float(found[0]["value"][1]) == 2
            up = prometheus_query(base, 'up{job="workflows"}')
            assert float(up[0]["value"][1]) == 1  # scraped with the bearer token
        finally:
            proc.terminate()
            proc.wait(30)
    shutil.rmtree(tmp_path / "data", ignore_errors=True)


def test_a_cancel_and_retention_s_deletions_are_counted(client, metrics_on):
    from django_openworkflow import hooks

    before = scrape(client)
    assert telemetry_steps.run().cancel() is True  # in this (web) process: no worker involved
    hooks.send(hooks.runs_pruned, "telemetry-steps", count=3)  # as retention reports a sweep
    after = scrape(client)
    canceled = {"workflow": "telemetry-steps", "queue": "telemetry", "status": "canceled"}
    assert (
        value(after, "workflow_runs_finished_total", **canceled)
        - value(before, "workflow_runs_finished_total", **canceled)
        == 1
    )
    swept = {"workflow": "telemetry-steps"}
    assert (
        value(after, "workflow_retention_swept_total", **swept)
        - value(before, "workflow_retention_swept_total", **swept)
        == 3
    )
