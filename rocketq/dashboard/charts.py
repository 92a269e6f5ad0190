"""Line charts as inline SVG, drawn on the server: the pages need no script to show them.

A chart is a few polylines over a time axis, with the highest value and the first and last
times (UTC, as everywhere on the dashboard) written on it and a legend of colored names
below. Every name written into the SVG is escaped, as a template would.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

from markupsafe import Markup, escape

#: Line colors, in the order series are drawn (a palette that stays apart for the common
#: kinds of color blindness); the legend's swatches are the style sheet's ``c0`` to ``c9``,
#: since the pages' Content-Security-Policy allows no inline style.
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
#: Most series drawn in one chart; the ones past it are left out (and the legend says so).
MAX_SERIES = len(COLORS)


def line_chart(series: Mapping[str, Sequence[tuple[float, float]]], *, title: str,
               unit: str = "", width: int = 880, height: int = 200) -> Markup:
    """An SVG chart of ``name -> [(time in s since the epoch, value), ...]``.

    With fewer than two points in all there is nothing to draw, and the chart says it is
    waiting for samples."""
    pad_left, pad_right, pad_top, pad_bottom = 56, 12, 22, 22
    inner_w, inner_h = width - pad_left - pad_right, height - pad_top - pad_bottom
    names = [n for n in series if series[n]][:MAX_SERIES]
    points = [p for n in names for p in series[n]]
    parts = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{escape(title)}</title>",
             f'<text x="{pad_left}" y="14" class="chart-title">{escape(title)}</text>',
             f'<rect x="{pad_left}" y="{pad_top}" width="{inner_w}" height="{inner_h}" '
             'class="chart-area"/>']
    if len(points) < 2:
        parts.append(f'<text x="{pad_left + inner_w / 2}" y="{pad_top + inner_h / 2}" '
                     'text-anchor="middle" class="chart-empty">waiting for samples</text>')
        parts.append("</svg>")
        return Markup("".join(parts))
    t0 = min(t for t, _ in points)
    t1 = max(t for t, _ in points)
    top = _nice_ceiling(max(v for _, v in points))
    span = max(t1 - t0, 1e-9)

    def x(t: float) -> float:
        return pad_left + (t - t0) / span * inner_w

    def y(v: float) -> float:
        return pad_top + inner_h - (v / top) * inner_h

    for frac in (0.5, 1.0):
        gy = y(top * frac)
        parts.append(f'<line x1="{pad_left}" y1="{gy:.1f}" x2="{pad_left + inner_w}" '
                     f'y2="{gy:.1f}" class="chart-grid"/>')
        parts.append(f'<text x="{pad_left - 4}" y="{gy + 4:.1f}" text-anchor="end" '
                     f'class="chart-label">{escape(_number(top * frac))}</text>')
    parts.append(f'<text x="{pad_left - 4}" y="{pad_top + inner_h + 4}" text-anchor="end" '
                 f'class="chart-label">0</text>')
    parts.append(f'<text x="{pad_left}" y="{height - 6}" class="chart-label">'
                 f"{_clock(t0)}</text>")
    parts.append(f'<text x="{pad_left + inner_w}" y="{height - 6}" text-anchor="end" '
                 f'class="chart-label">{_clock(t1)} UTC</text>')
    if unit:
        parts.append(f'<text x="{pad_left + inner_w / 2}" y="{height - 6}" '
                     f'text-anchor="middle" class="chart-label">{escape(unit)}</text>')
    for i, name in enumerate(names):
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in series[name])
        parts.append(f'<polyline fill="none" stroke="{COLORS[i]}" stroke-width="2" '
                     f'points="{coords}"><title>{escape(name)}</title></polyline>')
    parts.append("</svg>")
    legend = "".join(f'<li><span class="swatch c{i}"></span>'
                     f"{escape(name)}</li>" for i, name in enumerate(names))
    left_out = len([n for n in series if series[n]]) - len(names)
    if left_out > 0:
        legend += f"<li>and {left_out} more not drawn</li>"
    return Markup("".join(parts) + f'<ul class="legend">{legend}</ul>')


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten at or above ``value`` (at least 1)."""
    if value <= 1:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(value))
    return next(step * magnitude for step in (1, 2, 5, 10) if step * magnitude >= value)


def _number(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if value >= 1_000:
        return f"{value / 1_000:g}k"
    return f"{value:g}"


def _clock(at: float) -> str:
    """A time of day in UTC."""
    return time.strftime("%H:%M:%S", time.gmtime(at))
