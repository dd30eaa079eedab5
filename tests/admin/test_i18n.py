"""The admin in French: every word the package shows is translated, none is left in English.

Each page is rendered twice through Django's LocaleMiddleware, once with
``Accept-Language: en`` and once with ``fr``. A piece of text (a text node,
a title, an aria-label, a button's value) that reads the same in both and
holds a word that is neither data (a workflow or step name, a key, JSON,
an error message) nor a word French shares with English is English left
over: Django's own admin is French already, so it comes from the package.
The shipped catalog is ``django_openworkflow/locale/fr/LC_MESSAGES/django.mo``
(compiled from ``django.po`` and committed, so installing needs no gettext).
"""

from __future__ import annotations

import ast
import gettext
import re
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

import django_openworkflow
from django_openworkflow.definitions.registry import registry
from django_openworkflow.models import Schedule, Signal, StepAttempt, WorkflowRun
from tests.admin.helpers import action_url, make_attempt, make_run, one_of_each, run_url

LIST_URL = reverse("admin:django_openworkflow_workflowrun_changelist")
ADD_URL = reverse("admin:django_openworkflow_workflowrun_add")
SCHEDULES_URL = reverse("admin:django_openworkflow_schedule_changelist")
DASHBOARD_URL = reverse("admin:django_openworkflow_workflowrun_dashboard")
CATALOG = Path(django_openworkflow.__file__).parent / "locale" / "fr" / "LC_MESSAGES"

# Words French writes as English does: not a sign of a missing translation.
SHARED_WORDS = {
    "workflow", "workflows", "journal", "version", "signal", "minute", "cron", "json", "null", "django", "active",
}  # fmt: skip
# Markup whose text is data, shown as stored (names, keys, payloads, times).
DATA_TAGS = {"code", "pre", "time", "script", "style"}
# The data the pages below show outside such markup (with every registered workflow's name and queue
# and every step's name, which the start form and the timeline's titles show).
DATA = {
    "signup", "order-fulfilment", "review-order", "versioned", "kaboom", "ValueError", "admin", "emails",
    "ConnectionError", "SMTP server timed out",
    "nightly-report", "latest", "allow_all", "UTC",  # a schedule's name, missed and overlap policies, zone, as stored
}  # fmt: skip
# Django's own, untranslated in Django itself: the search box's icon (alt="Search"), a boolean's icon.
DJANGO_ENGLISH = {"Search", "True", "False"}


class _Texts(HTMLParser):
    """The texts a user reads or hears on a page, each whitespace-collapsed, those inside DATA_TAGS left out."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: list[str] = []
        self._data_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in DATA_TAGS:
            self._data_depth += 1
        values = dict(attrs)
        for name in ("title", "aria-label", "placeholder", "alt"):
            self._add(values.get(name))
        if tag == "input" and values.get("type") in ("submit", "button"):
            self._add(values.get("value"))

    def handle_endtag(self, tag: str) -> None:
        if tag in DATA_TAGS and self._data_depth:
            self._data_depth -= 1

    def handle_data(self, data: str) -> None:
        if not self._data_depth:
            self._add(data)

    def _add(self, text: str | None) -> None:
        text = " ".join((text or "").split())
        if text:
            self.texts.append(text)


def texts(html: str) -> list[str]:
    parser = _Texts()
    parser.feed(html)
    return parser.texts


def data() -> set[str]:
    """The names the pages show as stored."""
    names = DATA | {spec.name for spec in registry.all()} | {spec.queue for spec in registry.all()}
    names |= set(StepAttempt.objects.values_list("step_name", flat=True))
    return names


def english_words(text: str, stored: set[str]) -> list[str]:
    """The words of ``text`` (three letters or more) that are neither data nor shared by French."""
    if text in DJANGO_ENGLISH:
        return []
    for value in sorted(stored, key=len, reverse=True):
        text = text.replace(value, " ")  # longest first: a name goes before a part of it
    text = re.sub(r"\b[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\b", " ", text)  # whole run ids
    text = re.sub(r"\b[0-9a-f]{8}\b", " ", text)  # short ones
    return [word for word in re.findall(r"[A-Za-z]{3,}", text) if word.lower() not in SHARED_WORDS]


def left_in_english(client: Any, url: str) -> list[str]:
    """The texts of ``url`` that read the same in French as in English and hold an English word."""
    english = client.get(url, HTTP_ACCEPT_LANGUAGE="en")
    french = client.get(url, HTTP_ACCEPT_LANGUAGE="fr")
    assert english.status_code == french.status_code == 200
    assert english["Content-Language"] == "en" and french["Content-Language"] == "fr"
    same = set(texts(english.content.decode())) & set(texts(french.content.decode()))
    stored = data()
    return sorted(text for text in same if english_words(text, stored))


@pytest.fixture
def localized(settings: Any) -> None:
    """LocaleMiddleware, as a multilingual site has it: the language comes from Accept-Language."""
    middleware = list(settings.MIDDLEWARE)
    middleware.insert(middleware.index("django.contrib.sessions.middleware.SessionMiddleware") + 1,
                      "django.middleware.locale.LocaleMiddleware")  # fmt: skip
    settings.MIDDLEWARE = middleware
    settings.LANGUAGE_CODE = "en"


def a_run_with_everything() -> WorkflowRun:
    """A run whose page shows every block: retries, a sleep, a wait, a child, signals, limits, a parent."""
    now = timezone.now()
    parent = make_run(workflow_name="order-fulfilment", status="running", started_at=now)
    spawning = make_attempt(parent, "review", kind="workflow", status="running", finished_at=None)
    run = make_run(
        workflow_name="signup",
        version="v2",
        status="running",
        started_at=now - timedelta(seconds=5),
        available_at=now + timedelta(minutes=3),
        idempotency_key="signup-42",
        concurrency_key="emails",
        concurrency_limit=2,
        rate_key="emails",
        rate_limit=100,
        rate_period=60.0,
        priority=5,
        deadline_at=now + timedelta(days=1),
        parent_step_attempt=spawning,
    )
    start = now - timedelta(seconds=5)
    make_attempt(run, "create-account", started_at=start, output={"user_id": 42})
    make_attempt(
        run,
        "send-welcome-email",
        status="failed",
        started_at=start + timedelta(seconds=1),
        output=None,
        error={"type": "ConnectionError", "message": "SMTP server timed out", "traceback": "Traceback …"},
    )
    make_attempt(run, "send-welcome-email", started_at=start + timedelta(seconds=2), output="<m1@example.com>")
    make_attempt(
        run,
        "welcome-delay",
        kind="sleep",
        started_at=start + timedelta(seconds=3),
        output=None,
        context={"resume_at": (start + timedelta(seconds=4)).isoformat(), "woken_early": True},
    )
    child = make_run(workflow_name="review-order", status="completed", started_at=now, finished_at=now)
    make_attempt(run, "review-order", kind="workflow", child_workflow_run=child, context={"workflow": "review-order"})
    arrived = make_attempt(
        run, "approval", kind="signal", output={"data": {"ok": True}, "signal_id": 1}, context={"signal": "approval"}
    )
    make_attempt(
        run,
        "payment",
        kind="signal",
        status="running",
        finished_at=None,
        context={"signal": "payment", "timeout_at": (now + timedelta(hours=1)).isoformat()},
    )
    Signal.objects.create(workflow_run=run, name="approval", data={"ok": True}, consumed_by=arrived, consumed_at=now)
    Signal.objects.create(workflow_run=run, name="note", data="hello", idempotency_key="note-1")
    return run


def po_entries(path: Path) -> list[dict[str, Any]]:
    """The entries of a .po file (header left out): msgctxt, msgid, msgid_plural and msgstr or msgstr[n]."""
    entries = []
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        entry: dict[str, Any] = {}
        key = ""
        for line in block.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            match = re.match(r"^(msgctxt|msgid_plural|msgid|msgstr(?:\[\d\])?) (\".*\")$", line)
            if match:
                key = match.group(1)
                entry[key] = ast.literal_eval(match.group(2))
            else:
                entry[key] += ast.literal_eval(line)
        if entry.get("msgid"):
            entries.append(entry)
    return entries


def test_the_french_catalog_is_complete_and_compiled() -> None:
    """Every entry of django.po is translated, and django.mo (what Django reads) says the same."""
    entries = po_entries(CATALOG / "django.po")
    assert len(entries) > 150
    with (CATALOG / "django.mo").open("rb") as compiled:
        catalog = gettext.GNUTranslations(compiled)
    stale = []
    for entry in entries:
        context, msgid = entry.get("msgctxt"), entry["msgid"]
        if "msgid_plural" in entry:
            wanted = [entry["msgstr[0]"], entry["msgstr[1]"]]
            plural = entry["msgid_plural"]
            got = [catalog.npgettext(context, msgid, plural, n) if context else catalog.ngettext(msgid, plural, n)
                   for n in (1, 2)]  # fmt: skip
        else:
            wanted = [entry["msgstr"]]
            got = [catalog.pgettext(context, msgid) if context else catalog.gettext(msgid)]
        assert all(wanted), f"untranslated: {msgid!r}"
        if got != wanted:
            stale.append(msgid)
    assert stale == [], "django.mo is older than django.po (run `make messages`): " + ", ".join(stale)


@pytest.mark.django_db
def test_run_list_and_run_pages_in_french_leave_no_english(admin_client: Any, localized: None) -> None:
    runs = one_of_each()
    rich = a_run_with_everything()
    nightly = Schedule.objects.create(name="nightly-report", cron="0 3 * * *", timezone="UTC", input={"format": "pdf"})
    blocked_at = timezone.now() - timedelta(minutes=2)
    blocked = make_run(
        workflow_name="signup", status="pending", concurrency_key="emails", concurrency_limit=1, blocked_at=blocked_at
    )
    pages = [
        LIST_URL,
        f"{LIST_URL}?status=failed",
        f"{LIST_URL}?workflow=signup&version=-",
        run_url(rich),
        run_url(blocked),
        *(run_url(run) for run in runs.values()),
        ADD_URL,
        SCHEDULES_URL,
        reverse("admin:django_openworkflow_schedule_backfill", args=[nightly.pk]),
        DASHBOARD_URL,
        f"{DASHBOARD_URL}?hours=1",
        f"{DASHBOARD_URL}?hours=0",  # a bad range, said
        f"{DASHBOARD_URL}?from=2026-11-20T08:00&to=2026-13-01",
        reverse("admin:django_openworkflow_workflowrun_workflow", args=["signup"]),
        reverse("admin:django_openworkflow_workflowrun_workflow", args=["always-fails"]) + "?hours=48",
        f"{LIST_URL}?created_from=2026-11-20&finished_to=2026-13-01",
    ]
    left = {url: found for url in pages if (found := left_in_english(admin_client, url))}
    assert left == {}, "English text on French pages:\n" + "\n".join(f"{u}: {t}" for u, t in left.items())

    french = admin_client.get(run_url(rich), HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    # Django's word for the breadcrumb, the package's words for its own blocks, the statuses translated.
    assert '<a href="/admin/">Accueil</a>' in french
    for text in ("Chronologie", "Tentatives d’étape sur un axe du temps", "en échec", "Signaux en attente"):
        assert text in french
    listing = admin_client.get(LIST_URL, HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert "Exécutions de workflow" in listing and "Par statut" in listing and "Par status" not in listing


@pytest.mark.django_db
def test_action_pages_and_messages_in_french(admin_client: Any, localized: None) -> None:
    runs = one_of_each()
    confirm = admin_client.post(
        LIST_URL,
        {"action": "cancel_runs", "_selected_action": [str(runs["pending"].id), str(runs["completed"].id)]},
        HTTP_ACCEPT_LANGUAGE="fr",
    )
    html = confirm.content.decode()
    assert "Annuler les 2 exécutions sélectionnées ?" in html
    assert 'value="Oui, annuler"' in html and "Non, revenir à la page précédente" in html
    response = admin_client.post(action_url(runs["pending"], "cancel"), HTTP_ACCEPT_LANGUAGE="fr", follow=True)
    assert [str(m) for m in response.context["messages"]] == ["Annulée : 1 exécution."]
    response = admin_client.post(
        reverse("admin:django_openworkflow_workflowrun_signal", args=[runs["parked"].id]),
        {"name": "go", "json_data": "{"},
        HTTP_ACCEPT_LANGUAGE="fr",
    )
    assert "JSON invalide" in response.content.decode()
