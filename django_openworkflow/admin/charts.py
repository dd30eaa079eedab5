"""The dashboard's charts: bars of runs finished by outcome, p50 and p95 durations per workflow.

No JavaScript. The shapes are inline SVG stretched to the box they are given
(``preserveAspectRatio="none"``, lines drawn with a non-scaling stroke); every
word and number is HTML beside them, so text keeps the page's font size at
any width instead of shrinking with the drawing (a 720-unit-wide SVG drawn
at 350 px on a phone would write 11-unit text at 5 px). The y axis counts
in round steps (0, 2, 4, 6, 8; 0, 5, 10, 15), chosen by :func:`nice_ticks`.
Colours are the status colours of ``admin.css``, text uses the admin's own
variables, so light and dark themes carry over.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import ngettext

from .. import formatting as fmt
from ..store.dashboard import OUTCOMES, Bucket, Durations

BAR_UNITS = 10
"""Each bar's slot in the drawing's own units (the bar takes 9, a gap of 1)."""
MAX_TICKS = 5


def nice_ticks(top: int) -> list[int]:
    """Round, evenly spaced integer ticks from 0 up to at least ``top``: 1, 2 or 5 times a power of ten apart.

    ``nice_ticks(7) == [0, 2, 4, 6, 8]``, ``nice_ticks(11) == [0, 5, 10, 15]``, ``nice_ticks(1) == [0, 1]``.
    """
    if top <= 0:
        return [0, 1]
    rough = top / (MAX_TICKS - 1)
    magnitude = 10 ** max(0, math.floor(math.log10(rough))) if rough >= 1 else 1
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= rough)
    return list(range(0, math.ceil(top / step) * step + 1, step))


def _n(value: float) -> str:
    """A coordinate: at most three decimals (format_html escapes its arguments to text first)."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _clock(moment: datetime, with_day: bool) -> str:
    return timezone.localtime(moment).strftime("%m-%d %H:%M" if with_day else "%H:%M")


def outcome_label(outcome: str) -> str:
    return str(fmt.STATUS_LABELS[outcome])


def finished_chart(buckets: list[Bucket], until: datetime, link: Callable[[Bucket], str] | None = None) -> SafeString:
    """Stacked bars, one per bucket, completed at the bottom; each bar links to its runs when ``link`` is given.

    Empty when nothing finished. The y axis's labels, the time axis's and the
    tooltips (each bar's ``<title>``) are the only text, and only the
    tooltips are inside the SVG.
    """
    if not any(bucket.total for bucket in buckets):
        return mark_safe("")
    ticks = nice_ticks(max(bucket.total for bucket in buckets))
    top = ticks[-1]
    width = len(buckets) * BAR_UNITS
    with_day = until - buckets[0].start > timedelta(hours=24)
    grid = format_html_join(
        "",
        '<line class="owf-chart-grid" x1="0" x2="{}" y1="{}" y2="{}" vector-effect="non-scaling-stroke"/>',
        ((width, _n(100 - t / top * 100), _n(100 - t / top * 100)) for t in ticks),
    )
    bars = []
    for i, bucket in enumerate(buckets):
        if not bucket.total:
            continue
        tip = ", ".join(f"{bucket.counts[o]} {outcome_label(o)}" for o in OUTCOMES if bucket.counts[o])
        y = 100.0
        rects = []
        for outcome in OUTCOMES:
            count = bucket.counts[outcome]
            if not count:
                continue
            h = count / top * 100
            y -= h
            rects.append(
                format_html(
                    '<rect class="owf-chart-{}" x="{}" y="{}" width="{}" height="{}"><title>{}: {}</title></rect>',
                    outcome,
                    i * BAR_UNITS,
                    _n(y),
                    BAR_UNITS - 1,
                    _n(h),
                    _clock(bucket.start, with_day),
                    tip,
                )
            )
        stack = mark_safe("".join(rects))
        bars.append(format_html('<a href="{}">{}</a>', link(bucket), stack) if link else stack)
    y_labels = format_html_join("", '<span style="bottom: {}%">{}</span>', ((_n(t / top * 100), t) for t in ticks))
    span = buckets[-1].start - buckets[0].start
    x_labels = format_html_join(
        "", "<span>{}</span>", ((_clock(buckets[0].start + span * f, with_day),) for f in (0.0, 0.5, 1.0))
    )
    title = ngettext(
        "Runs finished by outcome, %(start)s to %(end)s, %(minutes)d minute per bar",
        "Runs finished by outcome, %(start)s to %(end)s, %(minutes)d minutes per bar",
        buckets[0].minutes,
    ) % {"minutes": buckets[0].minutes, "start": _clock(buckets[0].start, with_day), "end": _clock(until, with_day)}
    return format_html(
        '<figure class="owf-barchart" aria-label="{}">'
        '<div class="owf-barchart-y" aria-hidden="true">{}</div>'
        '<div class="owf-barchart-plot"><svg class="owf-chart" viewBox="0 0 {} 100" preserveAspectRatio="none"'
        ' role="img" aria-label="{}">{}{}</svg></div>'
        '<div class="owf-barchart-x" aria-hidden="true">{}</div>'
        "</figure>",
        title,
        y_labels,
        width,
        title,
        grid,
        mark_safe("".join(bars)),
        x_labels,
    )


def duration_chart(durations: list[Durations], link: Callable[[str], str] | None = None) -> SafeString:
    """One row per workflow: its name (a link when ``link`` is given), a p95 bar with the p50 bar over it, the figures.

    On a wide screen name, bar and figures share a line; on a phone the bar
    takes a line of its own under them (CSS).
    """
    if not durations:
        return mark_safe("")
    longest = max(d.p95 for d in durations) or timedelta(microseconds=1)
    rows = []
    for d in durations:
        name = format_html('<a href="{}">{}</a>', link(d.workflow_name), d.workflow_name) if link else d.workflow_name
        rows.append(
            format_html(
                '<div class="owf-duration-row"><span class="owf-duration-name">{}</span>'
                '<svg class="owf-duration-bar" viewBox="0 0 100 10" preserveAspectRatio="none" aria-hidden="true">'
                '<rect class="owf-chart-p95" x="0" y="0" width="{}" height="10"><title>p95 {}</title></rect>'
                '<rect class="owf-chart-p50" x="0" y="0" width="{}" height="10"><title>p50 {}</title></rect></svg>'
                '<span class="owf-duration-text">p50 {} · p95 {} · {}</span></div>',
                name,
                _n(max(d.p95 / longest * 100, 0.5)),
                fmt.format_duration(d.p95),
                _n(max(d.p50 / longest * 100, 0.5)),
                fmt.format_duration(d.p50),
                fmt.format_duration(d.p50),
                fmt.format_duration(d.p95),
                ngettext("%(n)d run", "%(n)d runs", d.runs) % {"n": d.runs},
            )
        )
    return format_html('<div class="owf-durations">{}</div>', mark_safe("".join(rows)))
