"""Reports to look at: one self-contained HTML page for a scored run (:func:`score_html`) and one for a pack
(:func:`pack_html`).

A page is a single file: an inline style sheet, charts drawn here as inline SVG, no script, no font, no image
and no link to anything, so it opens offline and makes no network request. Every text that comes from a pack or
from candidates (ids, questions, SQL, error messages, values) is untrusted and passes through :func:`esc`, which
also shows its control characters as escapes (no raw ANSI escape or newline from a pack reaches the page).
The renderers are pure functions from the report dicts to strings; :func:`pack_facts` gathers a pack's dict and
:func:`evalpack.core.scoring.write_report` writes a page atomically.
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpack.checks.nearmiss.gate import gate_sentence
from evalpack.core.scoring import check_pack_entries, printable, report_beside, write_report
from evalpack.spec.kinds import LEVELS  # in that order on the page

VALUE_WIDTH = 400  # characters of a value or SQL shown before it is cut

# colours of the series, by CSS class (the same class colours a legend's key and a bar's segment)
COLOURS = {
    "correct": "#2e7d32", "wrong": "#c62828", "declined": "#9e9e9e", "not_answered": "#e0e0e0",
    "answerable": "#1565c0", "decline": "#8e24aa", "dropped": "#ef6c00",
    "survived": "#c62828", "first": "#f9a825", "caught": "#2e7d32",
}

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1d2330;
 margin:0;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px 28px 48px;background:#fff;min-height:100vh}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 8px;border-bottom:1px solid #dde1e7;
 padding-bottom:4px}h3{font-size:15px;margin:20px 0 6px}
.meta{color:#555;margin:0 0 4px}.note{color:#555;font-size:13px}
table{border-collapse:collapse;margin:8px 0 12px;font-size:13px}
th,td{border:1px solid #dde1e7;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tr:nth-child(even) td{background:#fafbfc}
code,pre{font:12px/1.4 ui-monospace,"DejaVu Sans Mono",monospace}
pre{margin:0;white-space:pre-wrap;overflow-wrap:break-word;max-width:560px}
td.num{white-space:nowrap}
table.inner{margin:0}table.inner td,table.inner th{border-color:#e8eaee}
.status{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-weight:600}
.status.good{background:#2e7d32}.status.bad{background:#c62828}.status.plain{background:#607d8b}
svg.chart{display:block;width:100%;max-width:760px;height:auto;margin:6px 0 4px}
svg.chart text{font:12px system-ui,sans-serif;fill:#1d2330}svg.chart .axis{stroke:#8a93a3}
svg.chart .grid{stroke:#e3e6eb}svg.chart .track{fill:#f0f2f5}
svg.chart .line{fill:none;stroke:#1565c0;stroke-width:2}svg.chart circle.mark{fill:#1565c0}
details{margin:4px 0 12px}summary{cursor:pointer;color:#1565c0}
""" + "".join(f".{name}{{fill:{colour};background:{colour}}}" for name, colour in COLOURS.items())


# --------------------------------------------------------------------------- text


def esc(value: Any, newlines: bool = False) -> str:
    """``value`` as HTML text (quotes included, so that it is also safe in an attribute), its control characters (a
    newline, an ANSI escape, a C1 code), bidirectional overrides and lone surrogates shown as escapes, as on a terminal
    (:func:`evalpack.core.scoring.printable`); with ``newlines`` its line breaks are kept (text shown in lines)."""
    text = value if isinstance(value, str) else str(value)
    return html.escape("\n".join(map(printable, text.split("\n"))) if newlines else printable(text), quote=True)


def shown(value: Any, width: int = VALUE_WIDTH) -> str:
    """A value as the page shows it (in <pre>): JSON, cut at ``width`` characters, escaped (its lines kept)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > width:
        text = text[:width - 1] + f"… ({len(text):,} characters)"
    return esc(text, newlines=True)


def share(value: Any) -> str:
    """A rate as a percentage, or a dash when there is none."""
    return f"{value:.1%}" if _is_number(value) else "–"


def score(value: Any) -> str:
    return f"{value:.3f}" if _is_number(value) else "–"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _number(value: Any) -> float:
    return float(value) if _is_number(value) else 0.0


def _mapping(value: Any) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> list:
    return list(value) if isinstance(value, list | tuple) else []


# --------------------------------------------------------------------------- page parts


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: Iterable[int] = (),
          css: str = "") -> str:
    """An HTML table; ``headers`` are plain text (escaped here), the cells already HTML. ``numeric``: the
    indexes of right-aligned columns."""
    right = set(numeric)

    def cell(tag: str, i: int, content: str) -> str:
        return f'<{tag} class="num">{content}</{tag}>' if i in right else f"<{tag}>{content}</{tag}>"

    head = "".join(cell("th", i, esc(h)) for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>" for row in rows)
    klass = f' class="{css}"' if css else ""
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def section(title: str, *parts: str, anchor: str = "") -> str:
    """A titled part of the page; ``anchor`` is its id (a fragment to link to)."""
    name = f' id="{esc(anchor)}"' if anchor else ""
    return f"<section{name}><h2>{esc(title)}</h2>{''.join(parts)}</section>"


def paragraph(text_html: str, css: str = "") -> str:
    return f'<p class="{css}">{text_html}</p>' if css else f"<p>{text_html}</p>"


def folded(label: str, content: str) -> str:
    """Content behind a disclosure triangle (no script: the browser's own <details>)."""
    return f"<details><summary>{esc(label)}</summary>{content}</details>"


def page(title: str, header: str, sections: Iterable[str]) -> str:
    """The whole document: one file, its style inline, nothing fetched."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head>"
            f"<body><main><h1>{esc(title)}</h1>{header}{''.join(sections)}</main></body></html>\n")


# --------------------------------------------------------------------------- charts


@dataclass(frozen=True)
class Bar:
    """One row of a bar chart: its label, its segments ((series, value), drawn left to right) and the text
    written after it."""

    label: str
    segments: tuple[tuple[str, float], ...]
    note: str


CHART_WIDTH = 760
ROW = 22
BAR = 14
LABEL_CHARS = 30


def _cut(label: str, chars: int = LABEL_CHARS) -> str:
    return label if len(label) <= chars else label[:chars - 1] + "…"


def _legend(series: Sequence[tuple[str, str]], y: float) -> str:
    out, x = [], 0.0
    for klass, name in series:
        out.append(f'<rect class="{klass}" x="{x:.0f}" y="{y - 10:.0f}" width="10" height="10"></rect>'
                   f'<text x="{x + 14:.0f}" y="{y:.0f}">{esc(name)}</text>')
        x += 24 + 7 * len(name)
    return "".join(out)


def bar_chart(title: str, bars: Sequence[Bar], series: Sequence[tuple[str, str]], *, shares: bool = False,
              full: float | None = None) -> str:
    """Horizontal stacked bars as an inline SVG (``class="chart"``), one row per :class:`Bar`, each labelled
    with its note. ``series``: (CSS class, legend name) of each segment kind. A full bar is the largest row's
    total, or ``full`` when given (and larger), or with ``shares`` each row's own (its segments as shares of it).
    Drawn segments have ``class="mark"``."""
    longest = max((len(_cut(b.label)) for b in bars), default=4)
    label_width = min(8 + 7 * longest, 230)
    note_width = 200
    span = CHART_WIDTH - label_width - note_width
    largest = max([sum(v for _, v in b.segments) for b in bars] + [full or 0])
    names = dict(series)
    top = 22
    height = top + ROW * len(bars) + 4
    rows = []
    for i, b in enumerate(bars):
        y = top + i * ROW
        x = float(label_width)
        full = (sum(v for _, v in b.segments) if shares else largest) or 1
        parts = [f'<text x="{label_width - 8}" y="{y + 12}" text-anchor="end">{esc(_cut(b.label))}'
                 f"<title>{esc(b.label)}</title></text>",
                 f'<rect class="track" x="{label_width}" y="{y}" width="{span}" height="{BAR}"></rect>']
        for klass, value in b.segments:
            width = span * max(value, 0) / full
            if width > 0:
                parts.append(f'<rect class="mark {klass}" x="{x:.2f}" y="{y}" width="{width:.2f}" height="{BAR}">'
                             f"<title>{esc(b.label)}: {esc(names.get(klass, klass))} {value:g}</title></rect>")
                x += width
        parts.append(f'<text x="{label_width + span + 8}" y="{y + 12}">{esc(b.note)}</text>')
        rows.append("".join(parts))
    return (f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {CHART_WIDTH} {height}" '
            f'width="{CHART_WIDTH}" height="{height}" role="img" aria-label="{esc(title)}">'
            f"<title>{esc(title)}</title>{_legend(series, 12)}{''.join(rows)}</svg>")


def _tick(value: float) -> str:
    """An axis label as a percentage, with a decimal where whole percents would repeat (a span of 5%)."""
    return f"{value:.0%}" if round(value * 100, 6) == round(value * 100) or value >= 0.2 else f"{value:.1%}"


def line_chart(title: str, points: Sequence[tuple[float, float]], x_label: str, y_label: str,
               x_span: float = 1.0) -> str:
    """A line over shares (x from 0 to ``x_span``, y from 0 to 1, e.g. coverage and accuracy) as an inline SVG
    (``class="chart"``), with a grid at quarters and a dot per point (``class="mark"``)."""
    x_span = x_span if x_span > 0 else 1.0
    left, right, top, bottom = 56, 20, 16, 44
    width, height = CHART_WIDTH, 320
    plot_w, plot_h = width - left - right, height - top - bottom

    def at(x: float, y: float) -> tuple[float, float]:
        return left + plot_w * min(max(x / x_span, 0), 1), top + plot_h * (1 - min(max(y, 0), 1))

    grid = []
    for q in (0, 0.25, 0.5, 0.75, 1):
        gx, gy = at(q * x_span, q)
        grid.append(f'<line class="grid" x1="{left}" y1="{gy:.1f}" x2="{left + plot_w}" y2="{gy:.1f}"></line>'
                    f'<line class="grid" x1="{gx:.1f}" y1="{top}" x2="{gx:.1f}" y2="{top + plot_h}"></line>'
                    f'<text x="{left - 6}" y="{gy + 4:.1f}" text-anchor="end">{q:.0%}</text>'
                    f'<text x="{gx:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{_tick(q * x_span)}</text>')
    drawn = [at(x, y) for x, y in points]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in drawn)
    step = max(1, len(drawn) // 200)  # at most about 200 dots; the line goes through every point
    dots = "".join(f'<circle class="mark" cx="{x:.1f}" cy="{y:.1f}" r="3"></circle>'
                   for i, (x, y) in enumerate(drawn) if i % step == 0 or i == len(drawn) - 1)
    axes = (f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}"></line>'
            f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"></line>'
            f'<text x="{left + plot_w / 2:.0f}" y="{height - 8}" text-anchor="middle">{esc(x_label)}</text>'
            f'<text x="14" y="{top + plot_h / 2:.0f}" text-anchor="middle" '
            f'transform="rotate(-90 14 {top + plot_h / 2:.0f})">{esc(y_label)}</text>')
    return (f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" aria-label="{esc(title)}"><title>{esc(title)}</title>'
            f'{"".join(grid)}{axes}<polyline class="mark line" points="{line}"></polyline>{dots}</svg>')


def ordered_keys(groups: Mapping, first: Sequence[str] = ()) -> list[str]:
    """The keys of ``groups``: those of ``first`` in that order, then the rest sorted."""
    return [k for k in first if k in groups] + sorted(k for k in groups if k not in first)


# --------------------------------------------------------------------------- the score report


OUTCOMES = (("correct", "correct"), ("wrong", "wrong"), ("declined", "declined"), ("not_answered", "not answered"))
COUNTED = ("n", "correct", "wrong", "declined", "not_answered")
GROUPS = (("by_kind", "family (kind)", ()), ("by_difficulty", "difficulty", LEVELS), ("by_skill", "skill", ()))


def outcome_bar(label: str, bucket: Mapping) -> Bar:
    """A group's row: correct, wrong, declined and not answered side by side, labelled with its accuracy."""
    n = int(_number(bucket.get("n")))
    return Bar(label, tuple((k, _number(bucket.get(k))) for k, _ in OUTCOMES),
               f"{share(bucket.get('accuracy'))} of {n:,}")


def penalty_names(summary: Mapping) -> list[tuple[str, str]]:
    """(key, header) of each penalty score: c = 0, 10 and N with N's value when the report gives it."""
    costs = _mapping(summary.get("penalty_costs"))
    return [(name, f"penalty c={costs.get(name, name)}") for name in ("0", "10", "N")]


def group_rows(groups: Mapping, keys: Sequence[str], penalties: Sequence[tuple[str, str]]) -> list[list[str]]:
    rows = []
    for key in keys:
        b = _mapping(groups[key])
        penalty = _mapping(b.get("penalty"))
        rows.append([esc(key), *(f"{int(_number(b.get(k))):,}" for k in COUNTED),
                     share(b.get("accuracy")), share(b.get("coverage")), share(b.get("wrong_rate")),
                     *(score(penalty.get(name)) for name, _ in penalties)])
    return rows


def group_section(summary: Mapping, name: str, label: str, first: Sequence[str]) -> str:
    """Accuracy by one grouping: the chart, and the table behind a fold. Empty when the report has no such
    grouping (older reports have no difficulty or skill)."""
    groups = _mapping(summary.get(name))
    if not groups:
        return ""
    keys = ordered_keys(groups, first)
    penalties = [p for p in penalty_names(summary) if any("penalty" in _mapping(groups[k]) for k in keys)]
    headers = [label, "n", "correct", "wrong", "declined", "not answered", "accuracy", "coverage", "wrong-rate",
               *(h for _, h in penalties)]
    chart = bar_chart(f"accuracy by {label}", [outcome_bar(k, _mapping(groups[k])) for k in keys], OUTCOMES,
                      shares=True)
    return (f"<h3>Accuracy by {esc(label)}</h3>{chart}"
            + folded(f"table by {label}", table(headers, group_rows(groups, keys, penalties),
                                                numeric=range(1, len(headers)))))


def key_figures(summary: Mapping) -> str:
    """The overall counts and rates, the decline precision and recall and the penalty scores, as a table."""
    o = _mapping(summary.get("overall"))
    penalty = _mapping(o.get("penalty"))
    rows = [("questions", f"{int(_number(o.get('n'))):,}"),
            *((name.replace("_", " "), f"{int(_number(o.get(name))):,}") for name in COUNTED[1:]),
            ("accuracy", share(o.get("accuracy"))), ("coverage", share(o.get("coverage"))),
            ("wrong-rate", share(o.get("wrong_rate"))),
            ("declined-rate", share(o.get("declined_rate")))]
    if "unanswerable" in o:
        rows += [("unanswerable questions", f"{int(_number(o.get('unanswerable'))):,}"),
                 ("decline precision", share(o.get("decline_precision"))),
                 ("decline recall", share(o.get("decline_recall")))]
    rows += [(header, score(penalty.get(name))) for name, header in penalty_names(summary) if name in penalty]
    return table(["measure", "value"], ([esc(a), b] for a, b in rows), numeric=[1])


def risk_coverage_section(summary: Mapping) -> str:
    """The risk-coverage curve when candidates gave confidences; empty otherwise."""
    curve = _mapping(summary.get("risk_coverage"))
    points = [_mapping(p) for p in _items(curve.get("points"))]
    if not points:
        return ""
    drawn = [(_number(p.get("coverage")), _number(p.get("accuracy"))) for p in points]
    # the axis ends at the coverage of every answer: 9 answers of 189 would otherwise fill the left 5%
    chart = line_chart("accuracy at each coverage", drawn, "coverage (answered, most confident first)", "accuracy",
                       x_span=max(x for x, _ in drawn))
    missing = int(_number(curve.get("without_confidence")))
    note = (f"{len(points):,} answered questions ranked by confidence, highest first; the point at coverage k/n is "
            f"the accuracy of the first k. {missing:,} answers without a confidence count as 1.")
    return f"<h3>Risk-coverage</h3>{chart}" + paragraph(esc(note), "note")


def rotation_lines(record: Mapping, rotations: Sequence[str]) -> str:
    """A wrong answer's expected and observed value (or error) on each rotation, as an inner table."""
    expected = record.get("expected")
    runs = _mapping(record.get("rotations"))
    rows = []
    for rotation in [r for r in rotations if r in runs] + [r for r in runs if r not in rotations]:
        run = _mapping(runs[rotation])
        want = expected.get(rotation) if isinstance(expected, Mapping) else expected
        got = (f"<b>error:</b> <pre>{shown(run['error'])}</pre>" if run.get("error") is not None
               else f"<pre>{shown(run.get('observed'))}</pre>")
        rows.append([esc(rotation), f"<pre>{shown(want)}</pre>", got, "yes" if run.get("match") else "no"])
    if not rows:
        return "<i>not run</i>"
    return table(["rotation", "expected", "observed", "match"], rows, css="inner")


def wrong_row(record: Mapping, rotations: Sequence[str]) -> list[str]:
    if record.get("answerable", True) is False:
        reason = record.get("unanswerable_reason")
        what = "<b>should have been declined</b>" + (f": {esc(reason)}" if reason else "")
    else:
        what = rotation_lines(record, rotations)
    question = record.get("question")
    return [f"<code>{esc(record.get('id', '?'))}</code>", esc(record.get("kind", "?")),
            esc(record.get("difficulty") or ""), esc(question) if question else "<i>(not in the report)</i>", what]


def wrong_section(report: Mapping) -> str:
    rotations = [str(r) for r in _items(report.get("rotations"))]
    wrong = [_mapping(q) for q in _items(report.get("questions")) if _mapping(q).get("status") == "wrong"]
    if not wrong:
        return section("Wrong answers", paragraph("None: no answer was wrong."), anchor="wrong")
    rows = [wrong_row(q, rotations) for q in wrong]
    return section(f"Wrong answers ({len(wrong):,})",
                   table(["id", "kind", "difficulty", "question", "expected and observed"], rows), anchor="wrong")


def unscored_section(report: Mapping) -> str:
    lists = (("not_scored", "questions without gold SQL or an expected answer (not scored)"),
             ("null_answer", "questions whose answer is only NULL, which any query returning NULL would match"),
             ("holdout_not_scored", "holdout questions not scored (no answer key)"),
             ("unscored_candidates", "candidates for questions that are not scored"),
             ("unknown_ids", "candidate ids the pack does not have"))
    items = [f"<li>{esc(label)}: {', '.join(f'<code>{esc(i)}</code>' for i in _items(report.get(key)))}</li>"
             for key, label in lists if _items(report.get(key))]
    return section("Not scored", f"<ul>{''.join(items)}</ul>", anchor="not-scored") if items else ""


def score_header(report: Mapping) -> str:
    candidates = _mapping(report.get("candidates"))
    integrity = _mapping(report.get("integrity"))
    lines = [f"pack <code>{esc(report.get('pack', '?'))}</code>"
             + (f"; candidates <code>{esc(candidates['file'])}</code>" if candidates.get("file") else ""),
             f"rule {esc(report.get('rule', '?'))}; rotations "
             f"{esc(', '.join(str(r) for r in _items(report.get('rotations'))))}"]
    if integrity:
        lines.append(f"integrity: {status_badge(integrity.get('status'))} "
                     f"{esc(integrity.get('message', ''), newlines=True)}")
    return "".join(paragraph(line, "meta") for line in lines)


def score_html(report: Mapping) -> str:
    """The page of a scored run, from the report ``evalpack score --json`` writes: the four outcomes and the
    penalty scores, accuracy by family, difficulty and skill, the risk-coverage curve when confidences were
    given, every wrong answer with its question and its expected and observed result per rotation."""
    summary = _mapping(report.get("summary"))
    overall = _mapping(summary.get("overall"))
    three = bar_chart("correct, wrong, declined and not answered", [outcome_bar("all questions", overall)], OUTCOMES)
    groups = "".join(group_section(summary, name, label, first) for name, label, first in GROUPS)
    curve = risk_coverage_section(summary)
    sections = [section("Score", three, key_figures(summary), anchor="score"),
                section("By family, difficulty and skill", groups, anchor="groups") if groups else "",
                section("Confidence", curve, anchor="confidence") if curve else "",
                wrong_section(report), unscored_section(report)]
    return page(f"Score report: {Path(str(report.get('pack', 'pack'))).name}", score_header(report), sections)


# --------------------------------------------------------------------------- the pack report


GOOD_STATUSES = {"verified"}


def status_badge(status: Any) -> str:
    """The attestation status as a coloured label: green when verified against a public key, red when files do
    not match, grey otherwise (unsigned, signed but not checked, unattested)."""
    klass = "good" if status in GOOD_STATUSES else "bad" if status == "failed" else "plain"
    return f'<span class="status {klass}">{esc(status or "unknown")}</span>'


def report_path_beside(pack_folder: str | Path) -> Path:
    """Where a pack's report goes: ``<pack folder>.report.html``, a sibling of the folder (never inside it,
    where every file is attested)."""
    return report_beside(pack_folder, "html")


def attestation_of(pack: Path, public_key: str | Path | None = None) -> dict:
    """The pack's attestation as the scorer checks it (unattested packs allowed): status, files, message;
    status ``failed`` with the scorer's lines when files do not match."""
    from evalpack.core.scoring import PackIntegrityError, check_integrity

    try:
        found = check_integrity(pack, public_key, allow_unattested=True)
    except PackIntegrityError as exc:
        return {"status": "failed", "files": 0, "message": str(exc)}
    return {"status": found.status, "files": found.files, "message": found.message}


def pack_facts(pack: str | Path, *, findings: Sequence[Mapping] | None = None, attestation: Mapping | None = None,
               public_key: str | Path | None = None) -> dict:
    """What :func:`pack_html` shows, read from a pack folder: its manifest, certificate and question records,
    the audit findings (``findings`` as dicts of :class:`evalpack.checks.audit.Finding`; run here when not given) and
    the attestation (checked here when not given). EvalpackError when the folder is not a pack, PackIntegrityError
    (exit 2) when it holds a symlink or a special file (:func:`evalpack.core.scoring.check_pack_entries`)."""
    from evalpack.core.layout import PackLayout

    pack = Path(pack)
    # a pack from elsewhere may hold a FIFO (reading it would wait forever) or a link to a file outside it: refused,
    # as `evalpack audit` and `evalpack verify` refuse them, before any of its files is opened
    check_pack_entries(pack)
    layout = PackLayout(pack)
    manifest, records = layout.read_manifest(), layout.read_records()
    certificate = layout.read_certificate()
    if findings is None:
        from evalpack.checks.audit import audit_pack

        findings = [f.to_dict() for f in audit_pack(pack)]
    return {"pack": str(pack), "manifest": manifest, "certificate": certificate, "records": records,
            "findings": [dict(f) for f in findings],
            "attestation": dict(attestation) if attestation is not None else attestation_of(pack, public_key)}


def question_counts(records: Sequence[Mapping], field: str) -> dict[str, Counter]:
    """{value of ``field``: Counter of answerable / decline}; for ``skills`` (a list) each skill counts."""
    counts: dict[str, Counter] = {}
    for r in records:
        values = r.get(field)
        for value in (values if isinstance(values, list) else [values] if values else []):
            counts.setdefault(str(value), Counter())["decline" if r.get("answerable", True) is False
                                                     else "answerable"] += 1
    return counts


QUESTION_SERIES = (("answerable", "shipped"), ("decline", "to decline"), ("dropped", "dropped"))


def question_chart(title: str, counts: Mapping[str, Counter], first: Sequence[str] = ()) -> str:
    bars = []
    for key in ordered_keys(counts, first):
        c = counts[key]
        bars.append(Bar(key, tuple((k, float(c[k])) for k, _ in QUESTION_SERIES),
                        ", ".join(f"{c[k]:,} {name}" for k, name in QUESTION_SERIES if c[k]) or "0"))
    return f"<h3>{esc(title)}</h3>" + bar_chart(title, bars, QUESTION_SERIES)


def questions_section(facts: Mapping) -> str:
    """Counts, then charts by family (kind), difficulty and skill."""
    manifest = _mapping(facts.get("manifest"))
    counted = _mapping(manifest.get("questions"))
    records = [_mapping(r) for r in _items(facts.get("records"))]
    by_kind = question_counts(records, "kind")
    for kind, n in _mapping(counted.get("dropped_by_kind")).items():
        by_kind.setdefault(str(kind), Counter())["dropped"] += int(_number(n))
    declines = sum(1 for r in records if r.get("answerable", True) is False)
    splits = ", ".join(f"{esc(k)} {int(_number(v)):,}" for k, v in _mapping(counted.get("by_split")).items())
    rows = [["questions in questions.jsonl", f"{len(records):,}"],
            ["shipped (answerable)", f"{len(records) - declines:,}"], ["to decline (unanswerable)", f"{declines:,}"],
            ["dropped by the golden checks", f"{int(_number(counted.get('dropped'))):,}"]]
    if splits:
        rows.append(["answerable, by split", splits])
    parts = [table(["", "count"], rows, numeric=[1])]
    if by_kind:
        parts.append(question_chart("Questions by family (kind)", by_kind))
    for field, title, first in (("difficulty", "Questions by difficulty", LEVELS), ("skills", "Questions by skill", ()),
                                ("traps", "Questions by the trap they read through", ())):
        counts = question_counts(records, field)
        if counts:
            parts.append(question_chart(title, counts, first))
    return section("Questions", *parts, anchor="questions")


NEAR_MISS_SERIES = (("survived", "match on every rotation"), ("first", "match on the first only"))


def operator_bar(operator: str, row: Mapping) -> Bar:
    """An operator's survival as rates of its mutants: a bar as long as the share that matches on every rotation,
    then the share that matches on the first only (a bar of counts would be its mutant count, survival a sliver)."""
    mutants, first, survived = (int(_number(row.get(k))) for k in ("mutants", "match_first", "match_all"))
    rate = survived / mutants if mutants else None
    return Bar(operator, (("survived", rate or 0.0), ("first", max(first - survived, 0) / mutants if mutants else 0.0)),
               f"{survived:,} of {mutants:,} survive ({share(rate)})")


def near_miss_section(facts: Mapping) -> str:
    """The near-miss study: a chart and a table per operator, the totals against the threshold, the survivors."""
    study = _mapping(_mapping(facts.get("manifest")).get("near_miss_study"))
    operators = {str(k): _mapping(v) for k, v in _mapping(study.get("operators")).items()}
    if not operators:
        return section("Near-miss study", paragraph("The manifest has no near-miss study."), anchor="near-miss")
    keys = ["mutants", "equivalent", "errored", "match_first", "match_all"]
    rows = []
    for op, row in operators.items():
        mutants = _number(row.get("mutants"))
        rows.append([esc(op), *(f"{int(_number(row.get(k))):,}" for k in keys),
                     share(_number(row.get("match_all")) / mutants if mutants else None)])
    rows.append(["<b>all</b>", f"{int(_number(study.get('mutants_run'))):,}", "", "",
                 share(study.get("match_first_rate")), share(study.get("match_all_rate")), ""])
    rate, threshold = study.get("match_all_rate"), study.get("threshold")
    verdict = ""
    if _is_number(rate) and _is_number(threshold):
        verdict = (f"{share(rate)} of the mutants run match on every rotation; the threshold is {share(threshold)}: "
                   + ("within it." if rate <= threshold else "<b>above it</b>."))
    survivors = [_mapping(s) for s in _items(study.get("survivors"))]
    total = int(_number(study.get("survivors_total"))) or len(survivors)
    bars = [operator_bar(op, r) for op, r in operators.items()]
    scale = max([sum(v for _, v in b.segments) for b in bars] + [_number(threshold) if _is_number(threshold) else 0])
    scale = scale or 0.01  # nothing matches and no threshold: empty bars on a 1% scale
    listed = (table(["question", "operator", "SQL"],
                    [[f"<code>{esc(s.get('question', '?'))}</code>", esc(s.get("operator", "?")),
                      f"<pre>{shown(s.get('sql', ''))}</pre>"] for s in survivors])
              if survivors else paragraph("No mutant survived."))
    return section("Near-miss study",
                   paragraph(esc("Plausible wrong versions of each gold SQL (mutants), rerun on every rotation: a "
                                 "survivor matches the expected answer everywhere, so the question cannot tell it "
                                 "from the gold."), "note"),
                   paragraph(esc(f"Bars: the share of each operator's mutants that match; the full width is "
                                 f"{share(scale)}, the largest share or the threshold."), "note"),
                   bar_chart("near-miss survival rate by operator", bars, NEAR_MISS_SERIES, full=scale),
                   table(["operator", *keys, "rate"], rows, numeric=range(1, 7)),
                   paragraph(verdict) if verdict else "",
                   paragraph(esc(gate)) if (gate := gate_sentence(study.get("gate"))) else "",
                   f"<h3>Survivors ({len(survivors):,} listed of {total:,}{withheld_note(study)})</h3>", listed,
                   anchor="near-miss")


def withheld_note(study: Mapping) -> str:
    """Why some survivors are not listed: the holdout's SQL returns their answers."""
    withheld = int(_number(study.get("survivors_withheld")))
    return f"; the holdout's {withheld:,} are counted, not listed: each returns its question's answer" if withheld else ""


def audit_section(facts: Mapping) -> str:
    findings = [_mapping(f) for f in _items(facts.get("findings"))]
    if not findings:
        return section("Audit", paragraph("The audit (<code>evalpack audit</code>) found nothing."), anchor="audit")
    rows = [[f"<code>{esc(f.get('question') or '(pack)')}</code>", esc(f.get("kind", "")), esc(f.get("rotation") or ""),
             esc(f.get("message", "")), esc(f.get("action", ""))] for f in findings]
    return section(f"Audit ({len(findings):,} findings)",
                   table(["question", "finding", "rotation", "what was seen", "what to do"], rows), anchor="audit")


def attestation_section(facts: Mapping) -> str:
    found = _mapping(facts.get("attestation"))
    certificate = _mapping(facts.get("certificate"))
    checks = _mapping(certificate.get("golden_checks"))
    lines = [f"{status_badge(found.get('status'))} {esc(found.get('message', ''), newlines=True)}"]
    if "all_match" in certificate:
        lines.append(f"certificate: {int(_number(certificate.get('shipped'))):,} questions, all match on every "
                     f"rotation: {'yes' if certificate.get('all_match') else '<b>no</b>'}")
    parts = [paragraph(line) for line in lines]
    if checks:
        parts.append(table(["golden check", "meaning"], [[f"<code>{esc(k)}</code>", esc(v)] for k, v in checks.items()]))
    return section("Attestation and certificate", *parts, anchor="attestation")


def dropped_section(facts: Mapping) -> str:
    manifest = _mapping(facts.get("manifest"))
    dropped = [_mapping(d) for d in _items(manifest.get("dropped"))]
    warnings = [str(w) for w in _items(manifest.get("warnings"))]
    parts = []
    if dropped:
        rows = [[f"<code>{esc(d.get('id', '?'))}</code>", esc(d.get("kind", "")), esc(d.get("drop_reason", "")),
                 esc(d.get("question", "")),
                 esc("; ".join(f"{rot}: {', '.join(map(str, _items(c)))}"
                               for rot, c in _mapping(d.get("failed_checks")).items()))] for d in dropped]
        parts.append(table(["id", "kind", "reason", "question", "failed checks"], rows))
    else:
        parts.append(paragraph("No question was dropped."))
    parts.append(f"<h3>Warnings ({len(warnings):,})</h3>")
    parts.append(f"<ul>{''.join(f'<li>{esc(w)}</li>' for w in warnings)}</ul>" if warnings else paragraph("None."))
    return section(f"Dropped questions ({len(dropped):,}) and warnings", *parts, anchor="dropped")


def pack_header(facts: Mapping) -> str:
    manifest = _mapping(facts.get("manifest"))
    tool = _mapping(manifest.get("tool"))
    lines = [f"pack <code>{esc(facts.get('pack', '?'))}</code>; version {esc(manifest.get('version', '?'))}; "
             f"rotations {esc(', '.join(str(r) for r in _items(manifest.get('rotations'))))}",
             f"made by {esc(tool.get('name', '?'))} {esc(tool.get('version', ''))} with DuckDB "
             f"{esc(tool.get('duckdb', '?'))}; spec {esc(_mapping(manifest.get('spec')).get('file', '?'))}"]
    return "".join(paragraph(line, "meta") for line in lines)


def pack_html(facts: Mapping) -> str:
    """The page of a pack, from :func:`pack_facts`: questions by family, difficulty and skill, the near-miss
    study per operator with its survivors, the audit findings, the attestation status, the dropped questions
    and the warnings."""
    name = _mapping(facts.get("manifest")).get("pack") or Path(str(facts.get("pack", "pack"))).name
    return page(f"Pack report: {name}", pack_header(facts),
                [attestation_section(facts), questions_section(facts), near_miss_section(facts),
                 audit_section(facts), dropped_section(facts)])


# --------------------------------------------------------------------------- writing


def write_pack_report(pack: str | Path, path: str | Path, **facts: Any) -> Path:
    """Gather a pack's facts (:func:`pack_facts` takes ``facts``) and write its page to ``path``."""
    return write_report(path, pack_html(pack_facts(pack, **facts)))
