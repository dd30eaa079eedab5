"""``OPENWORKFLOW["MAIL_ADMINS_ON_FAILURE"]``: the admins hear of failed runs, at most once per workflow per period."""

from __future__ import annotations

import django
import pytest
from django.core import mail
from django.core.cache import cache
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_openworkflow.testing import drain
from tests.fixtures.testapp.workflows import always_fails, fails_in_child, three_steps

pytestmark = pytest.mark.django_db(transaction=True)

# Django 6 takes addresses and deprecates (name, address) pairs; Django 5.2 takes only pairs.
ADMINS = ["ops@example.com"] if django.VERSION >= (6, 0) else [("Ops", "ops@example.com")]


@pytest.fixture
def alerting(settings):
    settings.ADMINS = ADMINS
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.OPENWORKFLOW = {**settings.OPENWORKFLOW, "MAIL_ADMINS_ON_FAILURE": "1h", "SITE_URL": "https://ops.example"}
    cache.clear()  # the period's marks
    mail.outbox.clear()
    yield settings
    cache.clear()


def test_a_failed_run_mails_the_admins_with_its_error_and_a_link(alerting):
    failed = always_fails.run()
    three_steps.run()  # completes: no mail
    drain()
    [message] = mail.outbox
    assert message.to == ["ops@example.com"]
    subject = "Workflow 'always-fails' failed: StepFailed: step 'boom' failed: ValueError: kaboom"
    assert message.subject.endswith(subject)
    assert f"https://ops.example/admin/django_openworkflow/workflowrun/{failed.id}/change/" in message.body
    assert "Step: boom" in message.body


def test_one_mail_per_workflow_per_period(alerting):
    for _ in range(3):
        always_fails.run()
    fails_in_child.run()  # another workflow (and its failing child, of always-fails: no second mail for that)
    drain()
    subjects = sorted(message.subject.split("Workflow ")[1].split(" failed")[0] for message in mail.outbox)
    assert subjects == ["'always-fails'", "'fails-in-child'"]
    assert "at most one mail per workflow every 1:00:00" in mail.outbox[0].body.lower()


def test_no_mail_unless_the_setting_asks(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.ADMINS = ADMINS
    mail.outbox.clear()
    always_fails.run()
    drain()
    assert mail.outbox == []


def test_a_mail_server_that_fails_does_not_fail_the_worker(alerting, caplog):
    alerting.EMAIL_BACKEND = "tests.test_alerts.BrokenBackend"
    handle = always_fails.run()
    drain()
    assert handle.status() == "failed"
    assert f"could not mail the admins about failed run {handle.id}" in caplog.text


class BrokenBackend:
    def __init__(self, **kwargs):
        pass

    def send_messages(self, messages):
        raise ConnectionRefusedError("smtp is down")


@pytest.mark.parametrize("value", ["soon", 0, "-1s"])
def test_a_bad_setting_is_a_system_check_error(settings, value):
    settings.OPENWORKFLOW = {**settings.OPENWORKFLOW, "MAIL_ADMINS_ON_FAILURE": value}
    with pytest.raises(SystemCheckError, match=r"openworkflow.E006.*MAIL_ADMINS_ON_FAILURE"):
        call_command("check")


def test_a_mail_server_that_never_answers_is_given_up_on(monkeypatch, settings):
    # The mails go from a worker's slice: Django's SMTP backend would wait for ever (EMAIL_TIMEOUT None).
    import socket
    import threading

    from django_openworkflow import alerts

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()  # accepts, never says a word
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", server.getsockname()[1], None
    monkeypatch.setattr(alerts, "MAIL_TIMEOUT", 0.3)
    raised: list[BaseException] = []

    def send() -> None:
        try:
            alerts.connection().open()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=send, daemon=True)
    try:
        thread.start()
        thread.join(20)
        assert not thread.is_alive(), "still waiting for the mail server"
        assert len(raised) == 1 and "timed out" in str(raised[0])
    finally:
        server.close()
