"""How durations, times, payloads, errors and journals read to people: one wording for the admin, the CLI, the demo.

Stored data is shown, never obeyed: :func:`printable` and :func:`json_text`
write control characters, bidirectional overrides and lone surrogates as
escapes, so a payload can neither drive the operator's terminal nor make a
page impossible to encode as UTF-8 (SQLite keeps ``"\\ud800"`` in JSON).

The phrases are translated (gettext) into the active language: the admin's
(the user's, with Django's LocaleMiddleware), ``LANGUAGE_CODE`` for commands.
Tables for a terminal keep their English headers: scripts read them.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from django.utils.functional import Promise
from django.utils.translation import gettext, gettext_lazy, ngettext, pgettext_lazy

from .definitions.flow import BLOCKED_UNTIL
from .definitions.payload import MAX_DEPTH
from .models import StepAttempt, WorkflowRun
from .states import CLAIMABLE_STATUSES, RunStatus, StepKind, StepStatus

# C0 and C1 controls, DEL, the bidirectional embeddings, overrides and isolates, lone surrogates.
_UNPRINTABLE = "\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
# What json.dumps(ensure_ascii=False) leaves raw: it escapes C0 controls itself.
_JSON_UNPRINTABLE = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
LINES = "\n\t"
"""For :func:`printable`: what a terminal may get of a multi-line text (a carriage return could hide a line)."""
PAGE_TEXT = "\n\r\t"
"""For :func:`printable`: what a web page keeps (a browser sends a textarea's lines as CRLF)."""


@functools.cache
def _unprintable(keep: str) -> re.Pattern[str]:
    return re.compile(f"(?![{re.escape(keep)}])[{_UNPRINTABLE}]" if keep else f"[{_UNPRINTABLE}]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED_ESCAPES.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text: str, keep: str = "") -> str:
    """``text`` with control characters and lone surrogates written as escapes (``\\x1b``, ``\\ud800``).

    ``keep``: whitespace controls to leave alone, :data:`LINES` or :data:`PAGE_TEXT`.
    """
    return _unprintable(keep).sub(_escape, text)


def json_text(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON that is safe to print or serve: non-ASCII text stays readable, controls are escaped."""
    separators = None if indent else (",", ":")
    text = json.dumps(value, indent=indent, separators=separators, ensure_ascii=False, cls=DjangoJSONEncoder)
    # These characters only occur inside JSON strings, where \uXXXX is the same value.
    return _JSON_UNPRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


TOO_DEEP = f"nests deeper than {MAX_DEPTH} levels, the limit"


def read_json(text: str) -> Any:
    """``json.loads(text)``; JSON nested too deep for the parser is a ``ValueError`` saying :data:`TOO_DEEP`.

    A ``json.JSONDecodeError`` (also a ``ValueError``) says where the text breaks.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None


def format_duration(value: timedelta | None) -> str:
    """A short human duration: ``350 ms``, ``4.2 s``, ``4 m 12 s``, ``2 h 5 m``, ``3 d 4 h``."""
    if value is None:
        return ""
    seconds = value.total_seconds()
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 0.001:
        return f"{sign}<1 ms" if seconds else "0 ms"
    if seconds < 1:
        return f"{sign}{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{sign}{seconds:.1f} s"
    if seconds < 60:
        return f"{sign}{seconds:.0f} s"
    whole = int(seconds)
    for unit, size, sub_unit, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if whole >= size:
            major, rest = divmod(whole, size)
            minor = rest // sub_size
            return f"{sign}{major} {unit}" + (f" {minor} {sub_unit}" if minor else "")
    return f"{sign}{whole} s"  # pragma: no cover - the loop always returns


def format_time(value: datetime | None, *, precise: bool = False, day_of: datetime | None = None) -> str:
    """A timestamp in the current time zone.

    ``precise`` adds milliseconds (step attempts take a few). With ``day_of``
    the date is left out when it is that moment's date: a journal's times
    are read against the run's start, and repeating the date only crowds them.
    """
    if value is None:
        return ""
    local = timezone.localtime(value)
    clock = local.strftime("%H:%M:%S.%f")[:-3] if precise else local.strftime("%H:%M:%S")
    if day_of is not None and timezone.localtime(day_of).date() == local.date():
        return clock
    return f"{local:%Y-%m-%d} {clock}"


def compact_time(value: datetime, now: datetime) -> str:
    """For the run list: ``14:03:12`` today, ``Nov 21 14:03`` this year, else ``2024-11-21``."""
    local, today = timezone.localtime(value), timezone.localtime(now)
    if local.date() == today.date():
        return f"{local:%H:%M:%S}"
    if local.year == today.year:
        return f"{local:%b} {local.day} {local:%H:%M}"
    return f"{local:%Y-%m-%d}"


def elapsed(start: datetime | None, end: datetime | None, now: datetime) -> timedelta | None:
    """From ``start`` to ``end``, or to ``now`` while it is still going."""
    if start is None:
        return None
    return (end or now) - start


def pretty_json(value: Any) -> str:
    """Indented JSON text, for a ``<pre>`` (the template escapes it)."""
    return json_text(value, indent=2)


def compact_json(value: Any, width: int = 60) -> str:
    """One line of JSON, cut to ``width`` characters with an ellipsis: for a table cell."""
    text = json_text(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def plural(count: int, word: str = "run") -> str:
    """``1 run``, ``3 runs`` (English only: for logs and the terminal; the admin says :func:`runs_text`)."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def runs_text(count: int) -> str:
    """``1 run``, ``3 runs``, in the active language."""
    return ngettext("%(count)d run", "%(count)d runs", count) % {"count": count}


# What a badge says, lower case: keyed by the stored value, which CSS classes keep in every language.
STATUS_LABELS: dict[str, Promise] = {
    "pending": pgettext_lazy("status", "pending"),
    "running": pgettext_lazy("status", "running"),
    "retrying": pgettext_lazy("status", "retrying"),
    "waiting": pgettext_lazy("status", "waiting"),
    "parked": pgettext_lazy("status", "parked"),
    "completed": pgettext_lazy("status", "completed"),
    "failed": pgettext_lazy("status", "failed"),
    "canceled": pgettext_lazy("status", "canceled"),
    "continued": pgettext_lazy("status", "continued"),
}
KIND_LABELS: dict[str, Promise] = {
    "run": pgettext_lazy("step kind", "run"),
    "sleep": pgettext_lazy("step kind", "sleep"),
    "workflow": pgettext_lazy("step kind", "workflow"),
    "signal": pgettext_lazy("step kind", "signal"),
    "event": pgettext_lazy("step kind", "event"),
    "patch": pgettext_lazy("step kind", "patch"),
}


def status_label(status: str) -> str:
    """A run's or a step's status (``parked`` too) in the active language; an unknown one as stored."""
    label = STATUS_LABELS.get(status)
    return str(label) if label is not None else status


def kind_label(kind: str) -> str:
    """A step kind in the active language; an unknown one as stored."""
    label = KIND_LABELS.get(kind)
    return str(label) if label is not None else kind


def short_id(run_id: Any) -> str:
    """The first 8 hex digits of a run id: what the list shows and the search accepts."""
    return str(run_id)[:8]


WAITING_FOR_PLACE = gettext_lazy("waiting for a concurrency place")
"""What an ``available_at`` of :data:`~.flow.BLOCKED_UNTIL` means; shown instead of the year 9999."""


def is_blocked(run: WorkflowRun) -> bool:
    """Whether ``run`` waits for a place under its concurrency limit (no worker holds it meanwhile)."""
    return run.blocked_at is not None and run.worker_id is None and run.status in CLAIMABLE_STATUSES


def format_available(value: datetime | None, *, precise: bool = False, day_of: datetime | None = None) -> str:
    """An ``available_at`` as :func:`format_time` does, but :data:`WAITING_FOR_PLACE` for a blocked run's."""
    if value is not None and value >= BLOCKED_UNTIL:
        return str(WAITING_FOR_PLACE)
    return format_time(value, precise=precise, day_of=day_of)


_PERIOD_NAMES = {
    1.0: gettext_lazy("second"),
    60.0: gettext_lazy("minute"),
    3600.0: gettext_lazy("hour"),
    86400.0: gettext_lazy("day"),
}


def format_period(seconds: float) -> str:
    """A rate limit's window: ``second``, ``minute``, ``hour``, ``day``, else a duration (``10 s``)."""
    name = _PERIOD_NAMES.get(float(seconds))
    return str(name) if name is not None else format_duration(timedelta(seconds=seconds))


def parked_place(run: WorkflowRun) -> str:
    """What a parked run (sleeping, waiting, backing off) does with its concurrency place."""
    if run.concurrency_counts_parked:
        return gettext("parked runs keep their place")
    return gettext("parked runs give their place up")


def concurrency_text(run: WorkflowRun) -> str:
    """``charge/42: at most 2 at once (parked runs give their place up)``, or empty without a limit."""
    if not run.concurrency_key:
        return ""
    return gettext("%(key)s: at most %(limit)s at once (%(parked)s)") % {
        "key": run.concurrency_key,
        "limit": run.concurrency_limit,
        "parked": parked_place(run),
    }


def rate_text(run: WorkflowRun) -> str:
    """``100 per minute``, ``5 per 10 s``: a run's rate limit without its key; empty without one."""
    if not run.rate_key:
        return ""
    period = format_period(run.rate_period) if run.rate_period is not None else "?"
    return gettext("%(limit)s per %(period)s") % {"limit": run.rate_limit, "period": period}


def rate_limit_text(run: WorkflowRun) -> str:
    """``emails/acme: 100 per minute``, or empty without a rate limit."""
    return f"{run.rate_key}: {rate_text(run)}" if run.rate_key else ""


def blocked_line(run: WorkflowRun, now: datetime) -> str:
    """``Waiting for a place under concurrency key K (limit N) since T (4 m)`` for a blocked run, else empty."""
    if not is_blocked(run):
        return ""
    assert run.blocked_at is not None
    waited = format_duration(now - run.blocked_at)
    return gettext(
        "Waiting for a place under concurrency key %(key)s (limit %(limit)s) since %(since)s (%(waited)s)"
    ) % {
        "key": run.concurrency_key,
        "limit": run.concurrency_limit,
        "since": format_time(run.blocked_at),
        "waited": waited,
    }


def wake_hint(run: WorkflowRun, now: datetime) -> str:
    """``wakes in 4 m`` for a parked run, ``starts in …`` for a scheduled one, ``waiting for a concurrency place``."""
    if run.status not in CLAIMABLE_STATUSES or run.worker_id is not None:
        return ""
    if is_blocked(run) or run.available_at >= BLOCKED_UNTIL:
        return str(WAITING_FOR_PLACE)
    wait = run.available_at - now
    if wait <= timedelta(0):
        return gettext("due now")
    if run.status == RunStatus.PENDING:
        return gettext("starts in %(duration)s") % {"duration": format_duration(wait)}
    return gettext("wakes in %(duration)s") % {"duration": format_duration(wait)}


def executing_hint(run: WorkflowRun, attempts: Iterable[StepAttempt], now: datetime) -> str:
    """``executing step 'charge' for 4 m 12 s`` while a worker holds the run inside a step, else empty.

    Read from the step's open attempt (kind ``run``, status ``running``); a
    held run whose journal has none shows nothing more than its status.
    """
    if run.status != RunStatus.RUNNING or run.worker_id is None:
        return ""
    open_steps = [a for a in attempts if a.kind == StepKind.RUN and a.status == StepStatus.RUNNING]
    if not open_steps:
        return ""
    step = open_steps[-1]
    return gettext("executing step %(step)s for %(duration)s") % {
        "step": repr(step.step_name),
        "duration": format_duration(now - (step.started_at or step.created_at)),
    }


ERROR_CHARS = 140
"""How much of an error a list cell or a status line shows."""


def shorten(text: str, limit: int = ERROR_CHARS) -> str:
    """``text`` on one printable line of at most ``limit`` characters (``…`` where cut)."""
    line = printable(" ".join(text.split()))
    return line if len(line) <= limit else line[: limit - 1] + "…"


def error_cell(error: dict[str, Any] | None) -> tuple[str, str]:
    """What an error list column shows: (``Type: message``, the step), the innermost cause first.

    A run failed by a child shows the child's error; a step that failed for
    good shows its own (the ``step 'x' failed:`` of ``StepFailed`` is the step column).
    """
    if not error:
        return "", ""
    step = str(error.get("step") or "")
    child = error.get("child_error")
    if isinstance(child, dict) and (child.get("type") or child.get("message")):
        return error_cell(child)[0], step
    message = str(error.get("message") or "")
    prefix = f"step {step!r} failed: "
    if error.get("type") == "StepFailed" and step and message.startswith(prefix):
        return shorten(message[len(prefix) :]), step
    return shorten(_headline(error)), step


def _in(at: datetime, now: datetime) -> str:
    wait = at - now
    if wait <= timedelta(0):
        return gettext("due now")
    return gettext("in %(duration)s") % {"duration": format_duration(wait)}


def retry_line(error: dict[str, Any] | None, available_at: datetime, now: datetime) -> str:
    """``step 'charge' · attempt 6 of 10 failed · next in 28 s · last error ValueError: boom`` for a retrying run."""
    note = error or {}
    retry: dict[str, Any] = note["retry"] if isinstance(note.get("retry"), dict) else {}
    parts = []
    if note.get("step"):
        parts.append(gettext("step %(step)s") % {"step": repr(note["step"])})
    elif retry.get("scope") == "workflow":
        parts.append(gettext("the workflow"))
    failures, maximum = retry.get("failures"), retry.get("max_attempts")
    if failures and maximum:
        parts.append(gettext("attempt %(n)s of %(max)s failed") % {"n": failures, "max": maximum})
    elif failures:
        parts.append(gettext("attempt %(n)s failed") % {"n": failures})
    parts.append(gettext("next %(when)s") % {"when": _in(available_at, now)} if available_at < BLOCKED_UNTIL else "")
    headline = _headline(note) if note else ""
    if headline:
        parts.append(gettext("last error %(error)s") % {"error": shorten(headline)})
    return " · ".join(part for part in parts if part)


def wait_line(wait: StepAttempt, now: datetime) -> str:
    """``waiting for signal 'shipped' · times out in 2 h`` (an event, a child run likewise) for a waiting run."""
    context = wait.context if isinstance(wait.context, dict) else {}
    if wait.kind == StepKind.SIGNAL and "form" in context:
        text = gettext("waiting for input %(name)s") % {"name": repr(str(context.get("approval")))}
    elif wait.kind == StepKind.SIGNAL and "approval" in context:
        text = gettext("waiting for approval %(name)s") % {"name": repr(str(context["approval"]))}
    elif wait.kind == StepKind.SIGNAL:
        text = gettext("waiting for signal %(name)s") % {"name": repr(str(context.get("signal") or wait.step_name))}
    elif wait.kind == StepKind.EVENT:
        text = gettext("waiting for event %(name)s") % {"name": repr(str(context.get("event") or wait.step_name))}
    else:
        name = str(context.get("workflow") or wait.step_name)
        if wait.child_workflow_run_id:
            child = short_id(wait.child_workflow_run_id)
            text = gettext("waiting for child run %(id)s (%(workflow)s)") % {"id": child, "workflow": name}
        else:
            text = gettext("waiting for a child run of %(workflow)s") % {"workflow": repr(name)}
    timeout_at = _datetime(context.get("timeout_at"))
    if timeout_at is not None and timeout_at < BLOCKED_UNTIL:
        text += " · " + gettext("times out %(when)s") % {"when": _in(timeout_at, now)}
    return printable(text)


def _datetime(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


def state_hint(
    status: str, run: WorkflowRun, error: dict[str, Any] | None, wait: StepAttempt | None, now: datetime
) -> str:
    """The line that goes with a display status: why a run retries, what it waits for, when it wakes."""
    if status == "retrying":
        return retry_line(error, run.available_at, now)
    if status == "waiting" and wait is not None:
        return wait_line(wait, now)
    return wake_hint(run, now)


def workflow_attempts(run: WorkflowRun) -> int:
    """The workflow-level attempts the run made, the one in progress included (``attempts`` counts the failed ones).

    A failed run's last attempt is one of its failures; a run never started
    made none; any other run is on the attempt after its failures.
    """
    if run.status == RunStatus.FAILED:
        return max(run.attempts, 1)
    if run.started_at is None:
        return run.attempts
    return run.attempts + 1


def _headline(error: dict[str, Any]) -> str:
    return ": ".join(str(part) for part in (error.get("type"), error.get("message")) if part)


def split_error(error: Any, hide: tuple[str, ...] = ()) -> tuple[str, str, str]:
    """An error dict as (``Type: message`` headline, traceback, the other keys as JSON but ``hide``)."""
    if not isinstance(error, dict):
        return "", "", pretty_json(error) if error is not None else ""
    rest = {k: v for k, v in error.items() if k not in ("type", "message", "traceback", *hide)}
    return _headline(error), str(error.get("traceback") or ""), pretty_json(rest) if rest else ""


def error_line(error: Any) -> str:
    """An error on one printable line: ``Type: message`` for an error dict, compact JSON otherwise."""
    if isinstance(error, dict):
        return printable(_headline(error))
    return compact_json(error)


# -- journals and tables, for a terminal ------------------------------------------


def numbered(attempts: Iterable[StepAttempt]) -> list[tuple[StepAttempt, int]]:
    """The journal in write order, each attempt with its number within its durable key (from 1)."""
    seen: dict[str, int] = {}
    rows = []
    for attempt in attempts:
        seen[attempt.step_name] = number = seen.get(attempt.step_name, 0) + 1
        rows.append((attempt, number))
    return rows


def attempt_result(attempt: StepAttempt) -> str:
    """What a journal table shows of an attempt on one line: its error, or its output once completed."""
    if attempt.error:
        return error_line(attempt.error)
    if attempt.status == StepStatus.COMPLETED and attempt.kind != StepKind.SLEEP:
        return compact_json(attempt.output)
    return ""


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns two spaces apart, headers in capitals; columns of numbers are right-aligned; cells printable."""
    numeric = [bool(rows) and all(isinstance(row[i], int) for row in rows) for i in range(len(headers))]
    cells = [[str(h).upper() for h in headers]] + [
        ["" if c is None else printable(str(c)) for c in row] for row in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        padded = (c.rjust(w) if right else c.ljust(w) for c, w, right in zip(row, widths, numeric, strict=True))
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)
