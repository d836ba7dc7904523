"""The HTML reports (`evalpack score --html`, `evalpack report`, the Dagster certificate asset) as a browser shows
them: headless Chromium opens each page, its charts are drawn (a shape of non-zero size, pixels of the series'
colours where each chart is) and the page makes no network request at all; hostile text stays text.

Chromium is Debian's `chromium` package, which .ci/run installs; the test starts and kills it itself.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from dagster import DagsterInstance, FilesystemIOManager, instance_for_test, materialize
from dagster_duckdb import DuckDBResource
from PIL import Image

from assets import ALL_ASSETS, ALL_CHECKS, EvalpackResource
from evalpack.core.scoring import check_integrity
from evalpack.pack.report import COLOURS, pack_facts, pack_html, report_path_beside, score_html
from tests.browser import MISSING, Browser, chromium, open_page

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "specs" / "cohorts.yaml"  # a small spec: builds in seconds
WIDTH = 1200
HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'

# what the page tells the test about itself: every chart's box (page coordinates) and drawn shapes
LOOK = """(() => {
  const box = e => { const r = e.getBoundingClientRect();
    return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; };
  return {
    charts: [...document.querySelectorAll('svg.chart')].map(svg => ({...box(svg),
      marks: [...svg.querySelectorAll('.mark')].map(box).filter(b => b.width > 0 && b.height > 0).length})),
    scripts: document.scripts.length,
    fetching: document.querySelectorAll('img, link, iframe, object, embed, video, audio, source, [src]').length,
    wrong: document.querySelectorAll('#wrong > table > tbody > tr').length,
    text: document.body.innerText,
  };
})()"""


def evalpack(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalpack.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def candidates_for(records: list[dict]) -> list[dict]:
    """Gold SQL for most questions, `SELECT 1` for every fifth, a decline for every seventh; SQL for some of the
    questions to decline; confidences on most answers (high on the gold, low on the wrong ones)."""
    out = []
    for i, r in enumerate(records):
        if i % 7 == 3:
            out.append({"id": r["id"], "declined": True})
        elif i % 5 == 1 or r.get("answerable", True) is False:
            out.append({"id": r["id"], "sql": "SELECT 1", "confidence": 0.25})
        elif i % 4:
            out.append({"id": r["id"], "sql": r["gold_sql"], "confidence": round(0.5 + (i * 37 % 11) / 22, 3)})
        else:
            out.append({"id": r["id"], "sql": r["gold_sql"]})  # an answer without a confidence counts as 1
    return out


def chart_count_of_score(report: dict) -> int:
    """The charts a score page has: the three-way bar, one per grouping the report has, the risk-coverage curve
    when confidences were given."""
    summary = report["summary"]
    groups = sum(1 for name in ("by_kind", "by_difficulty", "by_skill") if summary.get(name))
    curve = 1 if (summary.get("risk_coverage") or {}).get("points") else 0
    return 1 + groups + curve


def chart_count_of_pack(pack: Path) -> int:
    """The charts a pack page has: questions by kind, by difficulty and by skill (when the records have them), and
    the near-miss study by operator (when the manifest has one)."""
    records = [json.loads(line) for line in (pack / "questions.jsonl").read_text().splitlines() if line.strip()]
    manifest = json.loads((pack / "manifest.json").read_text())
    return (1 + any(r.get("difficulty") for r in records) + any(r.get("skills") for r in records)
            + bool(manifest.get("near_miss_study", {}).get("operators")))


class Markup(HTMLParser):
    """The tags, attributes and style text of a page that could fetch or run anything."""

    FETCHING_TAGS = {"script", "img", "link", "iframe", "object", "embed", "video", "audio", "source", "image",
                     "use", "base", "form"}

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.in_style = tag == "style"
        if tag in self.FETCHING_TAGS:
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            if name in {"src", "href", "xlink:href", "srcset", "action"} or name.startswith("on"):
                self.found.append(f"{tag} {name}")
            if name == "style" and "url(" in (value or ""):
                self.found.append(f"{tag} style url(")

    def handle_data(self, data: str) -> None:
        if self.in_style and ("url(" in data or "@import" in data):
            self.found.append("<style> url( or @import")

    def handle_endtag(self, tag: str) -> None:
        self.in_style = False


def fetching_markup(page: str) -> list[str]:
    parser = Markup()
    parser.feed(page)
    parser.close()
    return parser.found


def look_at(browser: Browser, path: Path) -> dict:
    """Open a page: what it shows (:data:`LOOK`), its screenshot and every request it made."""
    assert fetching_markup(path.read_text(encoding="utf-8")) == []
    page = open_page(browser, path.as_uri(), WIDTH)
    png = page.screenshot(WIDTH)
    seen = page.evaluate(LOOK)  # after the viewport took the page's height: boxes in screenshot pixels
    return {**seen, "png": png, "requests": page.requests(), "url": path.as_uri()}


def assert_drawn_offline(seen: dict, charts: int) -> None:
    """``charts`` charts, each with a box, drawn shapes and pixels of a series colour; no request but the page."""
    assert len(seen["charts"]) == charts, [c for c in seen["charts"]]
    shot = Image.open(io.BytesIO(seen["png"])).convert("RGB")
    assert shot.width == WIDTH
    series = {tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in COLOURS.values()}
    for chart in seen["charts"]:
        assert chart["width"] > 0 and chart["height"] > 0, chart
        assert chart["marks"] > 0, f"no shape of non-zero size drawn in {chart}"
        crop = shot.crop((int(chart["x"]), int(chart["y"]), int(chart["x"] + chart["width"]),
                          int(chart["y"] + chart["height"])))
        colours = {colour for _, colour in crop.getcolors(crop.width * crop.height)}
        assert len(colours) > 1, f"the chart at {chart} is one colour"
        assert colours & series, f"no pixel of a series colour in the chart at {chart}"
    assert seen["requests"] == [seen["url"]], seen["requests"]
    assert seen["scripts"] == 0 and seen["fetching"] == 0


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "cohorts"
    done = evalpack("build", str(SPEC), "-o", str(out), "--force")
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def candidates(pack: Path) -> Path:
    records = [json.loads(line) for line in (pack / "questions.jsonl").read_text().splitlines() if line.strip()]
    path = pack.parent / "candidates.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in candidates_for(records)))
    return path


@pytest.fixture(scope="module")
def scored(pack: Path, candidates: Path) -> dict:
    """`evalpack score` twice, with and without --html (and --json, to know the report the page shows)."""
    page, report = pack.parent / "score.html", pack.parent / "score.json"
    plain = evalpack("score", str(pack), "--candidates", str(candidates))
    with_html = evalpack("score", str(pack), "--candidates", str(candidates), "--html", str(page),
                         "--json", str(report))
    return {"plain": plain, "html": with_html, "page": page, "report": json.loads(report.read_text())}


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if shutil.which("chromium") is None:
        pytest.fail(MISSING)
    with chromium(tmp_path_factory.mktemp("chromium") / "profile") as running:
        yield running


# --------------------------------------------------------------------------- pages in the browser


def test_the_score_page_draws_its_charts_offline(scored, browser):
    assert scored["html"].returncode == scored["plain"].returncode == 1  # some answers are wrong
    assert scored["html"].stdout == scored["plain"].stdout  # the page is an extra file: the text is the same
    assert scored["html"].stderr == scored["plain"].stderr == ""
    report = scored["report"]
    seen = look_at(browser, scored["page"])
    assert_drawn_offline(seen, chart_count_of_score(report))
    wrong = [q for q in report["questions"] if q["status"] == "wrong"]
    assert wrong and seen["wrong"] == len(wrong)
    assert all(q["id"] in seen["text"] for q in wrong)
    if any(q.get("answerable", True) is False for q in wrong):
        assert "should have been declined" in seen["text"]


def test_the_pack_page_draws_its_charts_offline(pack, browser):
    page = report_path_beside(pack)
    done = evalpack("report", str(pack), "--html", str(page))
    assert done.returncode == 0 and done.stderr == "", done.stdout + done.stderr
    assert page.parent == pack.parent and page.name == "cohorts.report.html"
    check_integrity(pack)  # beside the pack, not in it: the attestation still matches
    seen = look_at(browser, page)
    assert_drawn_offline(seen, chart_count_of_pack(pack))
    manifest = json.loads((pack / "manifest.json").read_text())
    for operator in manifest["near_miss_study"]["operators"]:
        assert operator in seen["text"]
    for survivor in manifest["near_miss_study"]["survivors"]:
        assert survivor["question"] in seen["text"]
    assert "unsigned" in seen["text"]  # the attestation's status


def test_hostile_text_is_shown_as_text_and_fetches_nothing(tmp_path, browser):
    page = tmp_path / "hostile.html"
    page.write_text(score_html(fake_report(HOSTILE)), encoding="utf-8")
    seen = look_at(browser, page)
    assert_drawn_offline(seen, 5)
    assert HOSTILE in seen["text"]  # shown, not run: no script, no image, no request


# --------------------------------------------------------------------------- the pages as text


def fake_report(text: str) -> dict:
    """A score report with every field the scorer may give, ``text`` in every string a candidate or a pack sets."""
    def bucket(n: int, correct: int, wrong: int) -> dict:
        return {"n": n, "correct": correct, "wrong": wrong, "declined": n - correct - wrong, "answerable": n - 1,
                "unanswerable": 1, "declined_unanswerable": 0, "accuracy": correct / n, "wrong_rate": wrong / n,
                "declined_rate": (n - correct - wrong) / n, "decline_precision": None, "decline_recall": 0.0,
                "penalty": {"0": correct / n, "10": (correct - 10 * wrong) / n, "N": (correct - 3 * wrong) / n}}

    answered = {"match": False, "seconds": 0.01, "error": text}
    return {
        "pack": f"/packs/{text}", "rule": "spider", "rotations": ["seed_1", text], "limits": {},
        "integrity": {"status": text, "files": 3, "message": text}, "candidates": {"file": text, "form": "jsonl"},
        "summary": {"overall": bucket(3, 1, 2), "by_kind": {text: bucket(3, 1, 2)},
                    "by_split": {"dev": bucket(3, 1, 2)}, "by_difficulty": {"simple": bucket(3, 1, 2)},
                    "by_skill": {text: bucket(3, 1, 2)}, "penalty_costs": {"0": 0, "10": 10, "N": 3},
                    "risk_coverage": {"points": [{"coverage": 1 / 3, "accuracy": 1.0, "answered": 1, "confidence": 0.9},
                                                 {"coverage": 2 / 3, "accuracy": 0.5, "answered": 2,
                                                  "confidence": 0.4}], "without_confidence": 0}},
        "unknown_ids": [], "not_scored": [text], "holdout_not_scored": [], "unscored_candidates": [],
        "questions": [
            {"id": text, "kind": text, "split": "dev", "status": "wrong", "answerable": True, "difficulty": "simple",
             "skills": [text], "confidence": 0.9, "question": text, "answer_type": "rows",
             "expected": {"seed_1": [[text]], text: [[1]]},
             "rotations": {"seed_1": {"match": False, "seconds": 0.01, "observed": [[text]]}, text: answered}},
            {"id": "q2", "kind": "k", "split": "dev", "status": "wrong", "answerable": False, "difficulty": "simple",
             "skills": ["decline"], "confidence": 0.4, "question": "why?", "unanswerable_reason": text,
             "expected": None, "rotations": {}},
            {"id": "q3", "kind": "k", "split": "dev", "status": "correct", "answerable": True, "expected": 1,
             "rotations": {}},
        ],
        "timing": {},
    }


def test_every_text_from_candidates_or_a_pack_is_escaped():
    page = score_html(fake_report(HOSTILE))
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    assert page.count('<svg class="chart"') == 5
    assert "should have been declined" in page


def test_a_report_of_the_scorer_before_difficulty_skills_and_penalties_renders():
    """The report's shape before the penalty scores: no difficulty, skill, confidence or decline fields."""
    bucket = {"n": 2, "correct": 1, "wrong": 1, "declined": 0, "accuracy": 0.5, "wrong_rate": 0.5, "declined_rate": 0}
    report = {"pack": "p", "rule": "bird", "rotations": ["seed_1"], "limits": {}, "integrity": None,
              "summary": {"overall": bucket, "by_kind": {"k": bucket}, "by_split": {"dev": bucket}},
              "unknown_ids": [], "not_scored": [], "holdout_not_scored": [], "unscored_candidates": [],
              "questions": [{"id": "q1", "kind": "k", "split": "dev", "status": "wrong", "answer_type": "integer",
                             "expected": 5, "rotations": {"seed_1": {"match": False, "seconds": 0.0, "observed": 4}}},
                            {"id": "q2", "kind": "k", "split": "dev", "status": "correct", "answer_type": "integer",
                             "expected": 5, "rotations": {"seed_1": {"match": True, "seconds": 0.0, "observed": 5}}}],
              "timing": {}}
    page = score_html(report)
    assert page.count('<svg class="chart"') == chart_count_of_score(report) == 2
    assert "penalty" not in page and "decline precision" not in page and "q1" in page


def test_a_pack_page_renders_from_the_facts_given(pack):
    facts = pack_facts(pack, findings=[{"question": HOSTILE, "kind": "drift", "rotation": "seed_11",
                                        "message": HOSTILE, "action": "rebuild"}],
                       attestation={"status": "pending", "files": 0, "message": "not yet"})
    page = pack_html(facts)
    assert "<script" not in page.lower() and "Audit (1 findings)" in page and "pending" in page
    assert page.count('<svg class="chart"') == chart_count_of_pack(pack)


def test_report_path_is_a_sibling_of_the_pack_folder(tmp_path):
    assert report_path_beside(tmp_path / "packs" / "retail") == tmp_path / "packs" / "retail.report.html"
    assert report_path_beside(f"{tmp_path}/packs/retail/") == tmp_path / "packs" / "retail.report.html"


# --------------------------------------------------------------------------- input errors


def test_an_html_path_that_cannot_be_written_is_refused_before_scoring(pack, candidates, tmp_path):
    missing = tmp_path / "no" / "such" / "folder" / "score.html"
    done = evalpack("score", str(pack), "--candidates", str(candidates), "--html", str(missing))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and str(missing) in done.stderr and "--html" in done.stderr
    inside = evalpack("score", str(pack), "--candidates", str(candidates), "--html", str(pack / "score.html"))
    assert inside.returncode == 2 and inside.stdout == "" and "attested" in inside.stderr
    assert not (pack / "score.html").exists()


def test_report_of_a_folder_that_is_not_a_pack_is_one_line(tmp_path):
    done = evalpack("report", str(tmp_path), "--html", str(tmp_path.parent / "x.html"))
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1
    assert "manifest.json" in done.stderr and "Traceback" not in done.stderr
    folder = evalpack("report", str(tmp_path), "--html", str(tmp_path))
    assert folder.returncode == 2 and "is a folder" in folder.stderr


# --------------------------------------------------------------------------- Dagster


@pytest.fixture
def instance():
    with instance_for_test() as inst:
        yield inst


def test_the_certificate_asset_writes_the_pack_page_beside_the_pack(instance: DagsterInstance, tmp_path, browser):
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    shutil.copyfile(SPEC, schemas / "cohorts.yaml")
    instance.add_dynamic_partitions("packs", ["cohorts"])
    resources = {"evalpack": EvalpackResource(schemas_dir=str(schemas), packs_dir=str(tmp_path / "packs")),
                 "duckdb": DuckDBResource(database=":memory:"),
                 "io_manager": FilesystemIOManager(base_dir=str(tmp_path / "io"))}
    result = materialize([*ALL_ASSETS, *ALL_CHECKS], instance=instance, partition_key="cohorts",
                         resources=resources, raise_on_error=False)
    assert result.success
    metadata = {e.asset_key.to_user_string(): e.event_specific_data.materialization.metadata
                for e in result.get_asset_materialization_events()}
    page = tmp_path / "packs" / "cohorts.report.html"
    assert metadata["certificate"]["report"].value == str(page)
    assert metadata["certificate"]["report_url"].value == page.as_uri()
    assert metadata["verification"]["report"].value == str(page)
    check_integrity(tmp_path / "packs" / "cohorts")  # the finished pack's attestation does not list the page
    seen = look_at(browser, page)
    assert_drawn_offline(seen, chart_count_of_pack(tmp_path / "packs" / "cohorts"))
    assert "pending" in seen["text"]


# --------------------------------------------------------------------------- what a reader misread (issue 55 point 7)


def few_answered_report() -> dict:
    """A score report of 189 questions of which 9 were answered with a confidence, one of them wrong with long
    numbers in its expected and observed rows."""
    wide = [[f"2025-{m:02d}", 123456789.12 + m, 987654321.98 - m, 55555555.55] for m in range(1, 13)]
    results = [{"id": f"q{i:03d}", "status": "correct" if i < 8 else "wrong" if i == 8 else "not_answered",
                "answered": i <= 8, "confidence": 0.9 - i / 100 if i <= 8 else None, "answerable": True,
                "kind": "period_rows", "expected": wide,
                "question": "For each month of 2025, what were the revenue, the gross amount and the refunds, in EUR to "
                            "the cent, with the month written as YYYY-MM and the months in calendar order?",
                "rotations": {"seed_1": {"match": i != 8, "observed": [r[:1] + [r[1] + 1] + r[2:] for r in wide]}}}
               for i in range(189)]
    from evalpack.core.scoring import risk_coverage
    curve = risk_coverage(results)
    assert curve["points"][-1]["coverage"] == pytest.approx(9 / 189)
    return {"pack": "/packs/few", "rule": "spider", "rotations": ["seed_1"], "questions": results,
            "summary": {"overall": {"n": 189, "correct": 8, "wrong": 1, "declined": 0, "not_answered": 180,
                                    "accuracy": 8 / 189, "coverage": 9 / 189, "wrong_rate": 1 / 189,
                                    "penalty": {"0": 8 / 189, "10": -2 / 189, "N": -181 / 189}},
                        "risk_coverage": curve}}


# where the risk-coverage line ends against its x axis, and every number of the wrong-answers table that is drawn
# over two lines (a Range around it has more than one box)
GEOMETRY = """(() => {
  const svg = [...document.querySelectorAll('svg.chart')].find(s => s.querySelector('polyline'));
  const axis = [...svg.querySelectorAll('line.axis')].map(l => l.getBoundingClientRect()).find(r => r.height < 2);
  const line = svg.querySelector('polyline').getBoundingClientRect();
  const wrapped = [];
  for (const pre of document.querySelectorAll('#wrong pre')) {
    const node = pre.firstChild; if (!node) continue;
    for (const m of node.textContent.matchAll(/-?[0-9][0-9.-]*/g)) {
      const range = document.createRange(); range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
      if (range.getClientRects().length > 1) wrapped.push(m[0]);
    }
  }
  return {axis_left: axis.left, axis_right: axis.right, line_left: line.left, line_right: line.right, wrapped};
})()"""


def test_the_risk_coverage_axis_ends_at_what_was_answered_and_numbers_do_not_wrap(tmp_path, browser):
    page = tmp_path / "few.html"
    page.write_text(score_html(few_answered_report()), encoding="utf-8")
    seen = open_page(browser, page.as_uri(), WIDTH).evaluate(GEOMETRY)
    plot = seen["axis_right"] - seen["axis_left"]
    # 9 answers of 189: the line spans the plot (it filled its left 5% when the axis ran to 100%)
    assert seen["line_right"] - seen["line_left"] > 0.8 * plot, seen
    assert seen["wrapped"] == []


def test_near_miss_bars_are_the_survival_rate_not_the_mutant_count():
    from evalpack.pack.report import near_miss_section

    study = {"operators": {"many": {"mutants": 2000, "match_first": 10, "match_all": 10},
                           "few": {"mutants": 20, "match_first": 0, "match_all": 0},
                           "half": {"mutants": 40, "match_first": 2, "match_all": 2}},
             "mutants_run": 2060, "match_first_rate": 12 / 2060, "match_all_rate": 12 / 2060, "threshold": 0.01}
    html = near_miss_section({"manifest": {"near_miss_study": study}})
    widths = {name: width for width, name in
              ((float(w), n) for w, n in re.findall(r'<rect class="mark survived"[^>]* width="([0-9.]+)"[^>]*>'
                                                    r'<title>([^<:]+):', html))}
    # 10 of 2,000 (0.5%) against 2 of 40 (5%): the bar of the smaller operator is ten times as long
    assert set(widths) == {"many", "half"} and widths["half"] == pytest.approx(10 * widths["many"], rel=1e-3)
    assert "the full width is 5.0%" in html
