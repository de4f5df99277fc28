"""Geometry of the dashboard's two small SVG charts (drawn by templates/_macros.html).

Computed on the server so the charts read without JavaScript; the browser only swaps in a
freshly rendered panel. Coordinates are in a fixed viewBox that CSS scales to the screen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WIDTH, HEIGHT = 400, 180  # line chart; labels stay legible when a phone scales it down
LEFT, RIGHT, TOP, BOTTOM = 40, 14, 12, 26  # room for the axis labels
BAR_WIDTH, ROW, LABEL = 360, 22, 96  # bar chart: one row per bar, its label left of it


@dataclass
class Bar:
    x: float
    y: float
    w: float
    h: float
    label: str
    value: int
    cls: str


@dataclass
class Line:
    name: str
    cls: str
    points: str  # "x,y x,y ..." for <polyline points=...>
    last: float  # the newest value (legend)


def nice_max(value: float) -> float:
    """The smallest of 1, 2 or 5 x 10^n that is >= value, and at least 5: a round top for an axis
    of counts (every tick an integer)."""
    if value <= 5:
        return 5
    exp = 10 ** math.floor(math.log10(value))
    return next(m * exp for m in (1, 2, 5, 10) if m * exp >= value)


def ticks(top: float) -> list[tuple[float, str]]:
    """(y, label) of the horizontal grid lines from 0 to ``top`` (4 steps for 2 x 10^n, else 5)."""
    n = 4 if str(int(top))[0] == "2" else 5
    plot = HEIGHT - TOP - BOTTOM
    out = []
    for i in range(n + 1):
        value = top * i / n
        out.append((HEIGHT - BOTTOM - plot * i / n, f"{value:g}" if value < 1000 else f"{value / 1000:g}k"))
    return out


def bars(items: list[tuple[str, int, str]]) -> dict:
    """A horizontal bar per (label, value, css class), top to bottom, on a linear scale from 0 to
    the largest value (each bar's number is written at its end)."""
    top = max([v for _, v, _ in items] or [0]) or 1
    plot = BAR_WIDTH - LABEL - 48  # room for the number after the longest bar
    out = []
    for i, (label, value, cls) in enumerate(items):
        w = plot * value / top
        if value and w < 1.5:
            w = 1.5  # a non-zero count never disappears
        out.append(Bar(x=LABEL, y=4 + i * ROW, w=w, h=ROW - 7, label=label, value=value, cls=cls))
    return {"bars": out, "width": BAR_WIDTH, "height": 4 + len(items) * ROW}


def lines(x_labels: list[str], series: list[tuple[str, str, list[float]]]) -> dict:
    """One polyline per (name, css class, values); ``values`` align with ``x_labels``."""
    top = nice_max(max([v for _, _, vs in series for v in vs] or [0]))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(len(x_labels) - 1, 1)
    out = []
    for name, cls, values in series:
        pts = " ".join(f"{LEFT + i * step:.1f},{HEIGHT - BOTTOM - plot_h * v / top:.1f}" for i, v in enumerate(values))
        out.append(Line(name=name, cls=cls, points=pts, last=values[-1] if values else 0))
    every = max(1, len(x_labels) // 6)  # at most ~7 labels on a phone-sized axis
    last = len(x_labels) - 1
    labels = [
        (LEFT + i * step, text)
        for i, text in enumerate(x_labels)
        if i == last or (i % every == 0 and last - i >= every)
    ]  # the newest always, none crowding it
    return {
        "lines": out,
        "ticks": ticks(top),
        "labels": labels,
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "right": WIDTH - RIGHT,
        "bottom": HEIGHT - BOTTOM,
    }
