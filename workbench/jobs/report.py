"""Static sweep summary: an HTML page with one inline-SVG bar chart per numeric column and the results table.

Written without a plotting library so the headless path needs nothing beyond the standard library; open the file
in any browser. One bar per run, labelled with its parameters; runs that did not finish show their status instead
of a bar.
"""
from __future__ import annotations

import html
import math

_SKIP = {"run", "status", "error", "report"}
_BAR_HEIGHT, _GAP, _LABEL_WIDTH, _CHART_WIDTH = 18, 6, 260, 360


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def numeric_columns(rows: list[dict], parameter_names: list[str]) -> list[str]:
    """Columns (not parameters) holding numbers in at least one finished run; ``duration_seconds`` last."""
    columns: list[str] = []
    for row in rows:
        for key, value in row.items():
            if key in _SKIP or key in parameter_names or key in columns:
                continue
            if _is_number(value):
                columns.append(key)
    if "duration_seconds" in columns:
        columns.remove("duration_seconds")
        columns.append("duration_seconds")
    return columns


def bar_chart_svg(title: str, labels: list[str], values: list, notes: list[str]) -> str:
    """Horizontal bars from a zero baseline (negative values extend left); ``notes[i]`` replaces a missing bar."""
    numbers = [v for v in values if _is_number(v)]
    low, high = min(numbers + [0.0]), max(numbers + [0.0])
    span = (high - low) or 1.0
    zero_x = _LABEL_WIDTH + (0 - low) / span * _CHART_WIDTH
    height = 28 + len(labels) * (_BAR_HEIGHT + _GAP)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_LABEL_WIDTH + _CHART_WIDTH + 90}" '
             f'height="{height}" font-family="sans-serif" font-size="12">',
             f'<text x="4" y="16" font-weight="bold">{html.escape(title)}</text>',
             f'<line x1="{zero_x:.1f}" y1="22" x2="{zero_x:.1f}" y2="{height}" stroke="#888"/>']
    for i, (label, value, note) in enumerate(zip(labels, values, notes)):
        y = 26 + i * (_BAR_HEIGHT + _GAP)
        parts.append(f'<text x="4" y="{y + 13}">{html.escape(label)}</text>')
        if _is_number(value):
            x0 = _LABEL_WIDTH + (min(value, 0) - low) / span * _CHART_WIDTH
            width = max(abs(value) / span * _CHART_WIDTH, 1.0)
            parts.append(f'<rect x="{x0:.1f}" y="{y}" width="{width:.1f}" height="{_BAR_HEIGHT}" fill="#4c78a8"/>')
            parts.append(f'<text x="{x0 + width + 4:.1f}" y="{y + 13}">{value:.4g}</text>')
        else:
            parts.append(f'<text x="{zero_x + 4:.1f}" y="{y + 13}" fill="#c0392b">{html.escape(note)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _label(row: dict, parameter_names: list[str]) -> str:
    text = ", ".join(f"{n}={row.get(n)}" for n in parameter_names)
    return f"{row['run']}: {text}" if text else str(row["run"])


def sweep_summary_html(rows: list[dict], *, parameter_names: list[str], title: str) -> str:
    """The whole summary page as one string."""
    labels = [_label(r, parameter_names) for r in rows]
    notes = [r["status"] if r["status"] != "ok" else "no value" for r in rows]
    charts = [bar_chart_svg(col, labels, [r.get(col) for r in rows], notes)
              for col in numeric_columns(rows, parameter_names)]
    columns = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for r in rows:
        cells = []
        for c in columns:
            v = r.get(c)
            if c == "report" and v:
                cells.append(f'<td><a href="{html.escape(str(v))}">html</a></td>')
            else:
                cells.append(f"<td>{'' if v is None else html.escape(str(v))}</td>")
        style = "" if r["status"] == "ok" else ' style="background:#fdecea"'
        body.append(f"<tr{style}>{''.join(cells)}</tr>")
    ok = sum(r["status"] == "ok" for r in rows)
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>body{{font-family:sans-serif}}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px}</style>"
            f"</head><body><h2>{html.escape(title)}</h2><p>{ok} of {len(rows)} runs finished ok.</p>"
            + "".join(f"<div>{c}</div>" for c in charts)
            + f"<table><tr>{head}</tr>{''.join(body)}</table></body></html>")
