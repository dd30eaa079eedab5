"""The dashboard page: what finished over the last hours, how long runs took, what waits now.

Charts are inline SVG drawn here, with no JavaScript: stacked bars of runs
finished per minute by outcome (each bar's ``<title>`` gives its counts on
hover), bars of p50 and p95 run duration per workflow. Colours are the
status colours of ``admin.css``; text and axes use the admin's own
variables, so light and dark themes carry over.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext, ngettext

from .. import formatting as fmt
from ..states import DisplayStatus
from ..store import dashboard, get_backend
from ..store.dashboard import OUTCOMES, Bucket, Durations

RANGES = {1: 1, 3: 1, 6: 2, 24: 10}
"""Hours the page can show -> minutes per bar (at most about 180 bars)."""
DEFAULT_HOURS = 3
WIDTH, HEIGHT, LEFT, BOTTOM = 720, 180, 40, 22


def outcome_label(outcome: str) -> str:
    return str(fmt.STATUS_LABELS[outcome])


def dashboard_context(hours_param: str | None) -> dict[str, Any]:
    """What the template shows, for ``?hours=`` (1, 3, 6 or 24; anything else shows the default)."""
    hours = int(hours_param) if hours_param in {str(h) for h in RANGES} else DEFAULT_HOURS
    data = dashboard.read(get_backend().now(), hours, RANGES[hours])
    rate = data.failure_rate
    return {
        "hours": hours,
        "ranges": [(h, h == hours) for h in RANGES],
        "data": data,
        "total_finished": sum(data.finished.values()),
        "finished": [(outcome, outcome_label(outcome), data.finished[outcome]) for outcome in OUTCOMES],
        "failure_rate": "-" if rate is None else f"{rate * 100:.1f} %",
        "per_minute_chart": per_minute_chart(data.buckets, data.now),
        "duration_chart": duration_chart(data.durations),
        "queues": [
            (queue.queue, queue.due, fmt.format_duration(data.now - queue.oldest_due_at) if queue.oldest_due_at else "")
            for queue in data.queues
        ],
        "due_total": sum(queue.due for queue in data.queues),
        "retrying_now": data.parked.get(DisplayStatus.RETRYING, 0),
        "waiting_now": data.parked.get(DisplayStatus.WAITING, 0),
    }


def _n(value: float) -> str:
    """A coordinate for SVG: one decimal (format_html escapes its arguments to text first)."""
    return f"{value:.1f}"


def _local(moment: datetime) -> str:
    return timezone.localtime(moment).strftime("%H:%M")


def per_minute_chart(buckets: list[Bucket], now: datetime) -> SafeString:
    """Stacked bars, one per bucket, completed at the bottom; y axis from 0 to the busiest bucket."""
    if not any(bucket.total for bucket in buckets):
        return mark_safe("")
    top = max(bucket.total for bucket in buckets)
    plot_w, plot_h = WIDTH - LEFT, HEIGHT - BOTTOM
    bar_w = plot_w / len(buckets)
    bars = []
    for i, bucket in enumerate(buckets):
        y = float(plot_h)
        x = LEFT + i * bar_w
        tip = ", ".join(f"{bucket.counts[o]} {outcome_label(o)}" for o in OUTCOMES if bucket.counts[o])
        for outcome in OUTCOMES:
            count = bucket.counts[outcome]
            if not count:
                continue
            h = count / top * (plot_h - 4)
            y -= h
            bars.append(
                format_html(
                    '<rect class="owf-chart-{}" x="{}" y="{}" width="{}" height="{}"><title>{}: {}</title></rect>',
                    outcome,
                    _n(x),
                    _n(y),
                    _n(max(bar_w - 1, 0.8)),
                    _n(h),
                    _local(bucket.start),
                    tip,
                )
            )
    ticks = [
        format_html(
            '<text class="owf-chart-axis" x="{}" y="{}" text-anchor="end">{}</text>'
            '<line class="owf-chart-grid" x1="{}" x2="{}" y1="{}" y2="{}"/>',
            LEFT - 6,
            _n(plot_h - value / top * (plot_h - 4) + 4),
            value,
            LEFT,
            WIDTH,
            _n(plot_h - value / top * (plot_h - 4)),
            _n(plot_h - value / top * (plot_h - 4)),
        )
        for value in sorted({0, top // 2, top})
    ]
    labels = [
        format_html(
            '<text class="owf-chart-axis" x="{}" y="{}" text-anchor="{}">{}</text>',
            _n(LEFT + plot_w * fraction),
            HEIGHT - 4,
            anchor,
            _local(buckets[0].start + (buckets[-1].start - buckets[0].start) * fraction),
        )
        for fraction, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end"))
    ]
    title = gettext("Runs finished by outcome, %(start)s to %(end)s, %(minutes)d min per bar") % {
        "minutes": buckets[0].minutes,
        "start": _local(buckets[0].start),
        "end": _local(now),
    }
    return format_html(
        '<svg class="owf-chart" viewBox="0 0 {} {}" role="img" aria-label="{}">{}{}{}</svg>',
        WIDTH,
        HEIGHT,
        title,
        mark_safe("".join(ticks)),
        mark_safe("".join(bars)),
        mark_safe("".join(labels)),
    )


def duration_chart(durations: list[Durations]) -> SafeString:
    """One row per workflow: a p95 bar with the p50 bar over it, both labelled."""
    if not durations:
        return mark_safe("")
    longest = max(d.p95 for d in durations) or timedelta(microseconds=1)
    name_w, row_h, plot_w = 200, 26, WIDTH - 200 - 150
    rows = []
    for i, d in enumerate(durations):
        y = i * row_h
        p95_w = max(d.p95 / longest * plot_w, 1.0)
        p50_w = max(d.p50 / longest * plot_w, 1.0)
        rows.append(
            format_html(
                '<text class="owf-chart-label" x="0" y="{}">{}</text>'
                '<rect class="owf-chart-p95" x="{}" y="{}" width="{}" height="16"><title>p95 {}</title></rect>'
                '<rect class="owf-chart-p50" x="{}" y="{}" width="{}" height="16"><title>p50 {}</title></rect>'
                '<text class="owf-chart-axis" x="{}" y="{}">p50 {} · p95 {} · {}</text>',
                y + 13,
                d.workflow_name[:28],
                name_w,
                y,
                _n(p95_w),
                fmt.format_duration(d.p95),
                name_w,
                y,
                _n(p50_w),
                fmt.format_duration(d.p50),
                _n(name_w + p95_w + 6),
                y + 13,
                fmt.format_duration(d.p50),
                fmt.format_duration(d.p95),
                ngettext("%(n)d run", "%(n)d runs", d.runs) % {"n": d.runs},
            )
        )
    return format_html(
        '<svg class="owf-chart" viewBox="0 0 {} {}" role="img" aria-label="{}">{}</svg>',
        WIDTH,
        len(durations) * row_h,
        gettext("Run duration per workflow, p50 and p95"),
        format_html_join("", "{}", ((row,) for row in rows)),
    )
