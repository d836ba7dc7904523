"""The dataset card (README.md on the Hub): a YAML header the Hub indexes and a body a person reads.

Header: ``license``, ``pretty_name``, ``language``, ``task_categories`` (table-question-answering),
``tags`` (text-to-sql, evaluation, synthetic, evalpack), ``size_categories`` from the total rows that
``load_dataset`` can return (every table on every rotation plus the question rows), and ``configs``
with ``questions`` as the default config and one config per table, one split per rotation.

Body: what the pack is, how to load it pinned to the version tag, the question fields, how to score
with verify.py, the pass rule across rotations, the tables with row counts, the question counts by
kind, the near-miss table, how to verify the attestation, and a citation block. The card is a pure
function of the pack, the repo and the endpoint (no dates), so publishing the same pack twice gives
the same bytes.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING

import yaml

from evalpack.scoring import COMPARISON_RULE

if TYPE_CHECKING:
    from publish.layout import HubLayout

# The Hub's size_categories values and their upper bounds (n < bound).
SIZE_CATEGORIES = (
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
    (100_000_000, "10M<n<100M"),
    (1_000_000_000, "100M<n<1B"),
    (10_000_000_000, "1B<n<10B"),
    (100_000_000_000, "10B<n<100B"),
    (1_000_000_000_000, "100B<n<1T"),
)
TAGS = ["text-to-sql", "evaluation", "synthetic", "evalpack"]
HUB_IGNORE = ["data/*", "README.md", ".gitattributes"]


def size_category(rows: int) -> str:
    """The Hub ``size_categories`` value for a row count (``n<1K`` below 1,000; ``1K<n<10K`` from 1,000 ...)."""
    if rows < 0:
        raise ValueError("a row count cannot be negative")
    for bound, label in SIZE_CATEGORIES:
        if rows < bound:
            return label
    return "n>1T"


def card_metadata(layout: HubLayout) -> dict:
    """The YAML header as a dict (key order kept)."""
    manifest = layout.manifest
    configs = []
    for config in layout.configs:
        entry: dict = {"config_name": config.name}
        if config.default:
            entry["default"] = True
        entry["data_files"] = [{"split": s.name, "path": s.path} for s in config.splits]
        configs.append(entry)
    return {
        "license": manifest.get("license") or "unknown",
        "pretty_name": f"{layout.name} evalpack",
        "language": ["en"],
        "task_categories": ["table-question-answering"],
        "tags": list(TAGS),
        "size_categories": [size_category(layout.total_rows)],
        "configs": configs,
    }


def _attestation(layout: HubLayout) -> dict | None:
    path = layout.pack / "attestation.intoto.json"
    if not path.is_file():
        return None
    try:
        envelope = json.loads(path.read_text(encoding="utf-8"))
        statement = json.loads(base64.b64decode(envelope.get("payload", "")))
        return {"signed": bool(envelope.get("signatures")), "subjects": len(statement.get("subject", []))}
    except (ValueError, TypeError):
        return {"signed": False, "subjects": 0}


def _table(header: list[str], rows: list[list], align: str | None = None) -> str:
    align = align or "l" + "r" * (len(header) - 1)
    marks = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def near_miss_markdown(study: dict | None) -> str:
    """The near-miss study as a Markdown table (or a sentence saying why there is none)."""
    if not study:
        return "The near-miss study was not run for this pack."
    operators = study.get("operators") or {}
    if not operators:
        return "The near-miss study produced no mutants for this pack's gold SQL."
    try:
        from evalpack.nearmiss import study_markdown

        return study_markdown(study)
    except (ImportError, KeyError, TypeError, ValueError):
        pass
    keys = [k for k in ("mutants", "equivalent", "errored", "match_any", "match_all")
            if any(k in row for row in operators.values())]
    labels = {"match_any": "match on one database", "match_all": "match on all databases"}
    return _table(["operator", *[labels.get(k, k) for k in keys]],
                  [[op, *[row.get(k, "") for k in keys]] for op, row in operators.items()])


def _fmt(n: int) -> str:
    return f"{n:,}"


def render_card(layout: HubLayout) -> str:
    """The README.md of the published repo."""
    manifest = layout.manifest
    repo, tag, name = layout.repo_id, layout.tag, layout.name
    rotations = layout.rotations
    header = yaml.safe_dump(card_metadata(layout), sort_keys=False, allow_unicode=True, width=1000)
    questions_cfg = next(c for c in layout.configs if c.default)
    tables = [c for c in layout.configs if not c.default]
    qinfo = manifest.get("questions") or {}
    shipped = qinfo.get("shipped", len(layout.questions))
    by_kind = qinfo.get("shipped_by_kind") or {}
    by_split = qinfo.get("by_split") or {}
    rotated = questions_cfg.splits[0].name != "test"
    tool = (manifest.get("tool") or {}).get("version", "")
    first_table = tables[0].name if tables else "TABLE"
    att = _attestation(layout)
    local = f"{name}-{tag}"
    download = (f"hf download {repo} --repo-type dataset --revision {tag} --local-dir {local} "
                + " ".join(f'--exclude "{p}"' for p in HUB_IGNORE)
                + f"\nrm -rf {local}/.cache   # the download tool's bookkeeping, not part of the pack")

    answers = ("rotated (each rotation has its own expected answers; the questions config has one split per "
               "rotation)" if rotated else "shared (the same on every rotation)")
    out = [f"---\n{header}---\n"]
    out.append(f"# {name} evalpack ({tag})\n")
    if manifest.get("description"):
        out.append(f"{manifest['description']}\n")
    out.append(
        f"An evaluation database for text-to-SQL systems and data agents, built with "
        f"evalpack{' ' + tool if tool else ''}. Its answers were fixed "
        f"**before a single row existed**: the spec declares facts (totals, rates, shares, keys), the questions "
        f"and their expected answers are derived from those declarations alone, and then {len(rotations)} "
        f"seeded databases (*rotations*: {', '.join(f'`{r}`' for r in rotations)}) were generated so that every "
        f"one of them holds those facts exactly. Every gold SQL was run with DuckDB on every rotation; only the "
        f"questions that matched everywhere ship ({_fmt(shipped)} here). A system that memorised one database "
        f"does not pass the others.\n")
    out.append(
        f"- **Configs**: `questions` (default) and one per table ({', '.join(f'`{t.name}`' for t in tables)}), "
        f"each table with one split per rotation.\n"
        f"- **Answers**: {answers}.\n"
        f"- **Files**: `questions.jsonl`, `manifest.json` (how the pack was made, what was dropped and why), "
        f"`certificate.json` (every question's observed value on every rotation), `verify.py` and "
        f"{'`attestation.intoto.json`' if att else 'the rotations'} sit beside `data/` unchanged; "
        f"`rotations/` holds the pack's own Parquet and CSV tables.\n")

    out.append("## How to load\n")
    out.append("Pin the version tag: a tag is never moved once published.\n")
    out.append("```python\nfrom datasets import load_dataset\n\n"
               f'questions = load_dataset("{repo}", "questions", revision="{tag}")'
               f"  # split{'s ' + ', '.join(rotations) if rotated else ' test'}\n"
               + "".join(f'{t.name} = load_dataset("{repo}", "{t.name}", revision="{tag}")'
                         f"  # splits {', '.join(s.name for s in t.splits)}\n" for t in tables)
               + f'\nrotation = {first_table}["{rotations[0]}"]  # one database = the same split of every table\n'
               "```\n")
    out.append("Question fields: `id`, `question`, `gold_sql` (DuckDB dialect, reads the tables by name), "
               "`answer_type` (`number` | `integer` | `string`), `round_decimals`, `expected_answer` (the JSON "
               "text of the answer, exactly as in `questions.jsonl`), `expected_number` / `expected_integer` / "
               "`expected_string` (the same answer typed, filled for its own type only), `kind`, `split` "
               "(`dev` | `holdout`), `question_sha256` (SHA-256 of the question text), `tags`.\n")
    out.append("Column types survive the trip: decimal amounts load as `decimal.Decimal`, dates as "
               "`datetime.date`, timestamps as `datetime.datetime`.\n")

    out.append("## How to score\n")
    out.append("Download the tagged snapshot without the Hub-only files: what remains is the pack exactly as built. "
               "Then run its `verify.py`, which needs only `duckdb`:\n")
    out.append("```bash\n" + download + "\n"
               f"python {local}/verify.py                                  # rerun every gold SQL on every rotation\n"
               f"python {local}/verify.py --candidates answers.jsonl --json report.json\n"
               "```\n")
    out.append('Candidates are JSON Lines of `{"id": "q001", "sql": "..."}`, a JSON list of those, or one JSON '
               'object mapping id to SQL; `{"id": ..., "declined": true}` declines a question. Scoring is three-way '
               "(correct / wrong / declined) and reports the wrong rate beside accuracy. Candidate SQL runs "
               "read-only, one statement per candidate, under a time limit.\n")
    out.append("### The pass rule\n")
    out.append(f"{COMPARISON_RULE} A candidate is correct only when it matches on **all {len(rotations)} "
               f"rotations**; an error or a timeout is wrong; a missing id is declined.\n")

    out.append("## Tables\n")
    out.append(_table(["table", "columns", *rotations],
                      [[f"`{t.name}`", len((manifest["tables"][t.name] or {}).get("columns") or {}),
                        *[_fmt(s.rows) for s in t.splits]] for t in tables]) + "\n")
    columns = [(t.name, (manifest["tables"][t.name] or {}).get("columns") or {}) for t in tables]
    if any(cols for _, cols in columns):
        out.append("<details><summary>Columns (DuckDB types)</summary>\n")
        for table, cols in columns:
            out.append(f"- `{table}`: " + ", ".join(f"`{c}` {t}" for c, t in cols.items()))
        out.append("\n</details>\n")
    out.append(f"{_fmt(layout.total_rows)} rows in all (tables on every rotation plus questions).\n")

    out.append("## Questions\n")
    out.append(_table(["kind", "questions"], [[f"`{k}`", v] for k, v in sorted(by_kind.items())]
                      + [["**all**", f"**{shipped}**"]]) + "\n")
    if by_split:
        out.append("By split: " + ", ".join(f"`{k}` {v}" for k, v in sorted(by_split.items())) + ". "
                   "The `holdout` questions are for final evaluation; tune on `dev`.\n")
    dropped = qinfo.get("dropped")
    if dropped:
        out.append(f"{dropped} derived questions were dropped because they did not hold on every rotation; "
                   "`manifest.json` lists each with its `drop_reason`.\n")

    out.append("## Near misses\n")
    out.append("Each gold SQL was mutated into plausible wrong queries (an off-by-one date bound, a swapped "
               "aggregate, a dropped filter, ...) and every mutant was rerun on every rotation. A mutant that "
               "still matches on all rotations would let a wrong query pass; the fewer, the sharper the pack.\n")
    out.append(near_miss_markdown(manifest.get("near_miss_study")) + "\n")

    out.append("## Verify the attestation\n")
    if att:
        signed = ("signed" if att["signed"] else
                  "**unsigned** (integrity only: anyone could have rewritten it together with the files)")
        out.append(f"`attestation.intoto.json` is a DSSE envelope around an in-toto Statement v1 with one "
                   f"SHA-256 subject per file of the pack ({att['subjects']} files); it is {signed}. The files "
                   f"under `data/` are byte-for-byte copies of `rotations/<seed>/tables/<table>.parquet` and this "
                   f"README is the Hub's card, so verify the folder downloaded above (pack files only):\n")
        command = (f"evalpack verify {local} --public-key PUBLISHER_KEY.pem   # the publisher's public key: checks "
                   "the signature, re-hashes every file, reruns the gold SQL" if att["signed"] else
                   f"evalpack verify {local}   # re-hashes every file and reruns the gold SQL; says UNSIGNED")
        out.append(f"```bash\n# with the evalpack tool installed\n{command}\n```\n")
    else:
        out.append("This pack carries no attestation. `certificate.json` records the verification run and "
                   "`python verify.py` reruns every gold SQL; `manifest.json` records the spec and its SHA-256.\n")

    out.append("## Citation\n")
    key = "".join(ch if ch.isalnum() else "_" for ch in f"{repo}_{tag}")
    out.append("```bibtex\n"
               f"@misc{{{key},\n"
               f"  title        = {{{{{name}}} evalpack, {tag}: an evaluation database with answers fixed in "
               "advance},\n"
               f"  author       = {{{repo.split('/')[0]}}},\n"
               f"  howpublished = {{\\url{{{layout.repo_url}/tree/{tag}}}}},\n"
               f"  note         = {{Built with evalpack{' ' + tool if tool else ''}; "
               f"{len(rotations)} rotations, {shipped} questions}}\n"
               "}\n```\n")
    return "\n".join(out)
