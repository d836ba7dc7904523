"""The dataset card: the pack's README.md, with a YAML header the Hub indexes and a body a person reads.

The card is written by ``evalpack build`` (``build.write_pack_files``) after ``questions.jsonl``,
``certificate.json`` and ``manifest.json`` and before the audit and the attestation, so it is one of
the attested files, and ``publish`` uploads it to the Hub unchanged: a downloaded snapshot of the
published repo is the pack as built and passes ``evalpack verify``. It is a pure function of those
three files (no dates, no repo id, never the attestation), so the same spec and seed give the same bytes.

Header: ``license``, ``pretty_name``, ``language``, ``task_categories`` (table-question-answering),
``tags`` (text-to-sql, evaluation, synthetic, evalpack), ``size_categories`` from the total rows that
``load_dataset`` can return (every table on every rotation plus the question rows of every questions
split), and ``configs`` as ``hub_configs`` lays them out: ``questions`` first and default, then one
config per table with one split per rotation. ``hub_configs`` is the one place that layout is decided;
``publish.layout`` uploads exactly the files it names.

Body: what the pack is, how to load it pinned to the version tag (the repo id is the placeholder
``REPO_PLACEHOLDER``: a pack does not know where it will be published), how to score with verify.py,
the pass rule across rotations, the tables with row counts, the question counts by kind, the near-miss
table, how to verify the attestation (signed or not), and a citation block.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

from evalpack.kinds import KINDS
from evalpack.layout import CARD, PackLayout, table_path

QUESTIONS_CONFIG = "questions"
SHARED_SPLIT = "test"
DATA_DIR = "data"
REPO_PLACEHOLDER = "<owner>/<name>"
TAGS = ("text-to-sql", "evaluation", "synthetic", "evalpack")

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


# --------------------------------------------------------------------------- the Hub layout of a pack


@dataclass(frozen=True)
class Split:
    """One split of a Hub config: its name, the repo path of its Parquet file and its row count."""

    name: str
    path: str
    rows: int


@dataclass(frozen=True)
class Config:
    """One Hub config (``load_dataset(repo, name)``): the questions, or one table over every rotation."""

    name: str
    splits: tuple[Split, ...]
    default: bool = False

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.splits)


def data_path(config: str, split: str) -> str:
    """The repo path of one split's Parquet file: ``data/<config>/<split>.parquet``."""
    return f"{DATA_DIR}/{config}/{split}.parquet"


def rotated_answers(manifest: dict) -> bool:
    """True when each rotation has its own expected answers (the questions config then has a split per rotation)."""
    return manifest.get("answers") == "rotated"


def hub_configs(manifest: dict) -> tuple[Config, ...]:
    """The Hub configs of a pack, from its manifest alone: ``questions`` (default) first, then one per table,
    every one on the pack's own files (the pack folder is the repo: :mod:`evalpack.hubfiles`).

    Questions: one split ``test`` with shared answers, one split per rotation with rotated answers
    (``data/questions/<split>.parquet``). Tables: one split per rotation, the rotation's own
    ``rotations/seed_<n>/tables/<table>.parquet``.
    """
    rotations = [str(r) for r in manifest["rotations"]]
    shipped = int((manifest.get("questions") or {}).get("shipped", 0))
    names = rotations if rotated_answers(manifest) else [SHARED_SPLIT]
    configs = [Config(QUESTIONS_CONFIG, tuple(Split(s, data_path(QUESTIONS_CONFIG, s), shipped) for s in names),
                      default=True)]
    for table, info in manifest["tables"].items():
        rows = (info or {}).get("rows") or {}
        configs.append(Config(table, tuple(Split(r, table_path(r, table), int(rows.get(r, 0))) for r in rotations)))
    return tuple(configs)


def configs_metadata(configs: tuple[Config, ...]) -> list[dict]:
    """The card header's ``configs`` block (what makes ``load_dataset`` read these files and no others)."""
    out = []
    for config in configs:
        entry: dict = {"config_name": config.name}
        if config.default:
            entry["default"] = True
        entry["data_files"] = [{"split": s.name, "path": s.path} for s in config.splits]
        out.append(entry)
    return out


def size_category(rows: int) -> str:
    """The Hub ``size_categories`` value for a row count (``n<1K`` below 1,000; ``1K<n<10K`` from 1,000 ...)."""
    if rows < 0:
        raise ValueError("a row count cannot be negative")
    for bound, label in SIZE_CATEGORIES:
        if rows < bound:
            return label
    return "n>1T"


def total_rows(configs: tuple[Config, ...]) -> int:
    """Rows across every config and split that ``load_dataset`` can return (tables + questions)."""
    return sum(c.rows for c in configs)


def card_metadata(manifest: dict) -> dict:
    """The YAML header as a dict (key order kept)."""
    configs = hub_configs(manifest)
    return {
        "license": manifest.get("license") or "unknown",
        "pretty_name": f"{manifest['pack']} evalpack",
        "language": ["en"],
        "task_categories": ["table-question-answering"],
        "tags": [t for t in TAGS if t != "synthetic" or not manifest.get("source")],  # imported: real data
        "size_categories": [size_category(total_rows(configs))],
        "configs": configs_metadata(configs),
    }


def read_card_metadata(text: str) -> dict:
    """The YAML header of a card (``{}`` when it has none)."""
    if not text.startswith("---\n"):
        return {}
    header = text[4:].split("\n---\n", 1)[0]
    data = yaml.safe_load(header)
    return data if isinstance(data, dict) else {}


# --------------------------------------------------------------------------- the body


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
    from evalpack.nearmiss import study_markdown

    try:
        return study_markdown(study)
    except (KeyError, TypeError, ValueError):  # a study of another shape: show the columns it has
        pass
    keys = [k for k in ("mutants", "equivalent", "errored", "match_first", "match_any", "match_all")
            if any(k in row for row in operators.values())]
    labels = {"match_first": "match on the first database", "match_any": "match on one database", "match_all": "match on all databases"}
    return _table(["operator", *[labels.get(k, k) for k in keys]],
                  [[op, *[row.get(k, "") for k in keys]] for op, row in operators.items()])


def _fmt(n: int) -> str:
    return f"{n:,}"


def render_card(pack_dir: Path) -> str:
    """The dataset card of the pack in ``pack_dir``, from its manifest.json, questions.jsonl and certificate.json.

    Never reads the attestation (the card is written before it) and never names a Hub repo.
    """
    layout = PackLayout(pack_dir)
    manifest = layout.read_manifest()
    questions = layout.read_records() if layout.questions.is_file() else []
    cert = layout.read_certificate() if layout.certificate.is_file() else {}

    name, version = manifest["pack"], str(manifest["version"])
    tag = f"v{version}"
    rotations = [str(r) for r in manifest["rotations"]]
    configs = hub_configs(manifest)
    questions_cfg, tables = configs[0], configs[1:]
    rotated = rotated_answers(manifest)
    qinfo = manifest.get("questions") or {}
    shipped = len(questions) if questions else int(qinfo.get("shipped", 0))
    # an imported record may lack any of these (criteria-only items have no answer type)
    by_kind = dict(Counter(q.get("kind") or "unknown" for q in questions)) if questions \
        else dict(qinfo.get("shipped_by_kind") or {})
    by_split = dict(Counter(q.get("split") or "unknown" for q in questions)) if questions \
        else dict(qinfo.get("by_split") or {})
    by_type = dict(Counter(q.get("answer_type") or "unknown" for q in questions))
    tool = (manifest.get("tool") or {}).get("version", "")
    duckdb_version = cert.get("duckdb_version") or (manifest.get("tool") or {}).get("duckdb", "")
    built_with = f"evalpack{' ' + tool if tool else ''}"
    first_table = tables[0].name if tables else "TABLE"
    local = f"{name}-{tag}"
    header = yaml.safe_dump(card_metadata(manifest), sort_keys=False, allow_unicode=True, width=1000)

    answers = ("rotated (each rotation has its own expected answers; the questions config has one split per "
               "rotation)" if rotated else "shared (the same on every rotation)")
    out = [f"---\n{header}---\n"]
    out.append(f"# {name} evalpack ({tag})\n")
    if manifest.get("description"):
        out.append(f"{manifest['description'].strip()}\n")
    source = manifest.get("source") or {}
    if source:
        status = dict(Counter(q.get("status") for q in questions))
        received = (source.get("questions") or {}).get("file") or "a questions file"
        data = (source.get("data") or {}).get("name") or "a database"
        out.append(
            f"An evaluation set for text-to-SQL systems and data agents, imported with {built_with} from "
            f"`{received}` (kept byte for byte under `as-received/`) over `{data}`, which is the one rotation "
            f"{', '.join(f'`{r}`' for r in rotations)}. Nothing was edited, invented or dropped: each of the "
            f"{_fmt(shipped)} questions carries a `status` ({', '.join(f'{k} {v}' for k, v in sorted(status.items()))})"
            f" that says whether its answer key can be scored yet, and `manifest.json` says what would make a "
            f"provisional one scorable. Every gold SQL that arrived was run with DuckDB"
            f"{' ' + duckdb_version if duckdb_version else ''}, as untrusted SQL, and its result recorded in "
            f"`certificate.json`.\n")
    else:
        out.append(
            f"An evaluation database for text-to-SQL systems and data agents, built with {built_with}. Its answers "
            f"were fixed **before a single row existed**: the spec declares facts (totals, rates, shares, keys), the "
            f"questions and their expected answers are derived from those declarations alone, and then "
            f"{len(rotations)} seeded databases (*rotations*: {', '.join(f'`{r}`' for r in rotations)}) were "
            f"generated so that every one of them holds those facts exactly. Every gold SQL was run with DuckDB"
            f"{' ' + duckdb_version if duckdb_version else ''} on every rotation; only the questions that matched "
            f"everywhere ship ({_fmt(shipped)} here). A system that memorised one database does not pass the "
            f"others.\n")
    out.append(
        f"- **Configs**: `questions` (default, `{DATA_DIR}/{QUESTIONS_CONFIG}/<split>.parquet`) and one per table "
        f"({', '.join(f'`{t.name}`' for t in tables)}), each table with one split per rotation, read from the "
        f"rotation's own `rotations/<split>/tables/<table>.parquet`. The pack folder is this repo: "
        f"`load_dataset(PACK_DIR, \"{first_table}\")` works on a local copy too.\n"
        f"- **Answers**: {answers}.\n"
        f"- **Files**: this card (`{CARD}`), `questions.jsonl`, `manifest.json` (how the pack was made, what was "
        f"dropped and why), `certificate.json` (every question's observed value on every rotation; a holdout "
        f"question's value is not published), `verify.py` and `attestation.intoto.json`; `rotations/` holds "
        f"the Parquet and CSV tables.\n")

    out.append("## How to load\n")
    out.append("Pin the version tag: a tag is never moved once published. Set `REPO` to the id this dataset has "
               "on the Hub (the id in its address, `OWNER/NAME`); the pack itself does not know where it was "
               "published.\n")
    questions_splits = ", ".join(s.name for s in questions_cfg.splits)
    out.append("```python\nfrom datasets import load_dataset\n\n"
               f'REPO = "{REPO_PLACEHOLDER}"  # this dataset\'s id on the Hub\n\n'
               f'questions = load_dataset(REPO, "{QUESTIONS_CONFIG}", revision="{tag}")'
               f"  # split{'s' if len(questions_cfg.splits) > 1 else ''} {questions_splits}\n"
               + "".join(f'{t.name} = load_dataset(REPO, "{t.name}", revision="{tag}")'
                         f"  # splits {', '.join(s.name for s in t.splits)}\n" for t in tables)
               + f'\nrotation = {first_table}["{rotations[0]}"]  # one database = the same split of every table\n'
               "```\n")
    out.append("Question fields: `id`, `question` (an analyst's words, no identifiers), `evidence` (the "
               "definitions it needs, as in BIRD: which column a measure sums, which dates a month covers, the "
               "literal of a category; run with or without it), `paraphrases` (other phrasings of the same "
               "question), `gold_sql` (DuckDB dialect, reads the tables by name), "
               "`answer_type` (`number` | `integer` | `string`), `round_decimals`, `expected_answer` (the JSON "
               "text of the answer, exactly as in `questions.jsonl`), `expected_number` / `expected_integer` / "
               "`expected_string` (the same answer typed, filled for its own type only), `kind`, `difficulty` "
               "(`simple` | `moderate` | `challenging`, from the gold SQL's components), `skills` (what the gold SQL "
               "exercises: `window`, `cte`, `join`, ...), `split` "
               "(`dev` | `holdout`), `question_sha256` (SHA-256 of the question text), `tags`, `key` (the question's "
               "identity: its family and parameters, the same in every version), `commitment` (holdout questions "
               "only: their gold SQL and answer are withheld from the public pack, and this salted SHA-256 lets the "
               "private answer key be checked when it is revealed).\n")
    out.append("Column types survive the trip: decimal amounts load as `decimal.Decimal`, dates as "
               "`datetime.date`, timestamps as `datetime.datetime`.\n")

    out.append("## How to score\n")
    out.append("Download the tagged snapshot: it is the pack exactly as built (this card included), and it "
               "verifies as it is, in the Hub cache or in a folder of your own. Then run its `verify.py`, which "
               "needs only `duckdb`:\n")
    out.append("```bash\n"
               f'REPO="{REPO_PLACEHOLDER}"   # this dataset\'s id on the Hub\n'
               f'hf download "$REPO" --repo-type dataset --revision {tag} --local-dir {local}\n'
               f"python {local}/verify.py                                  # rerun every gold SQL on every rotation\n"
               f"python {local}/verify.py --candidates answers.jsonl --json report.json\n"
               "```\n")
    out.append('Candidates are JSON Lines of `{"id": "q001", "sql": "..."}`, a JSON list of those, or one JSON '
               'object mapping id to SQL; `{"id": ..., "declined": true}` declines a question. Scoring is three-way '
               "(correct / wrong / declined) and reports the wrong rate beside accuracy. Candidate SQL runs "
               "read-only, one statement per candidate, under a time limit.\n")
    out.append("### The pass rule\n")
    rule = cert.get("comparison")
    if not rule:
        from evalpack.scoring import COMPARISON_RULE

        rule = COMPARISON_RULE
    out.append(f"{rule} A candidate is correct only when it matches on **all {len(rotations)} rotations**; an "
               f"error or a timeout is wrong; a missing id is declined.\n")
    checks = cert.get("golden_checks") or {}
    if checks:
        out.append("Every shipped gold SQL passed these checks on every rotation:\n\n"
                   + "\n".join(f"- `{k}`: {v}" for k, v in checks.items()) + "\n")

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
    out.append(f"{_fmt(total_rows(configs))} rows in all (tables on every rotation plus questions).\n")

    out.append("## Questions\n")
    study = (manifest.get("near_miss_study") or {}).get("families") or {}

    def caught(kind: str) -> str:
        f = study.get(kind)
        return f"{f['mutants'] - f['match_all']} of {f['mutants']}" if f and f.get("mutants") else ""

    out.append(_table(["kind", "asks", "questions", "near-miss mutants caught"],
                      [[f"`{k}`", KINDS.get(k, ""), v, caught(k)] for k, v in sorted(by_kind.items())]
                      + [["**all**", "", f"**{shipped}**", ""]]) + "\n")
    selection = qinfo.get("selection")
    if selection:
        mix = selection.get("mix")
        how = (f"the difficulty mix {', '.join(f'{k} {v:g}' for k, v in mix.items())}" if isinstance(mix, dict)
               else "no difficulty mix")
        out.append(f"The declarations give {selection.get('pool_size')} questions; {how} "
                   f"{'chose' if selection.get('mix_applied') else 'was not applied, and chose'} "
                   f"{sum((selection.get('chosen') or {}).values())} of them"
                   + (f" ({selection['note']})" if selection.get("note") else "") + " (`manifest.json` -> "
                   "`questions.selection`).\n")
    if by_type:
        out.append("By answer type: " + ", ".join(f"`{k}` {v}" for k, v in sorted(by_type.items())) + ".\n")
    levels = Counter(q.get("difficulty") for q in questions if q.get("difficulty"))
    if levels:
        skills = Counter(s for q in questions for s in q.get("skills") or [])
        out.append("By difficulty (BIRD's three levels, from each gold SQL's components; the rule is in "
                   "`manifest.json`): " + ", ".join(f"`{k}` {levels[k]}" for k in ("simple", "moderate", "challenging"))
                   + ". By skill: " + ", ".join(f"`{k}` {v}" for k, v in sorted(skills.items())) + ".\n")
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
    out.append("`attestation.intoto.json` is a DSSE envelope around an in-toto Statement v1 with one SHA-256 "
               "subject per file of the pack (every file but itself, this card included). Verify the folder "
               "downloaded above (pack files only) with the evalpack tool:\n")
    out.append("```bash\n"
               f"evalpack verify {local}                                    # re-hashes every file, reruns the "
               "gold SQL\n"
               f"evalpack verify {local} --public-key PUBLISHER_KEY.pem     # a signed pack: also checks the "
               "signature\n"
               "```\n")
    out.append("It demands that the files on disk are exactly the attested ones (none missing, none extra, none "
               "changed). If `evalpack verify` reports **UNSIGNED**, the attestation carries no signature: it "
               "proves integrity only, since anyone could have rewritten it together with the files. If it reports "
               "`signature NOT CHECKED`, the pack is signed: run it again with `--public-key` and the publisher's "
               "public key to know who built it.\n")

    out.append("## Citation\n")
    key = "".join(ch if ch.isalnum() else "_" for ch in f"{name}_evalpack_{tag}")
    owner = REPO_PLACEHOLDER.split("/")[0]
    out.append("```bibtex\n"
               f"@misc{{{key},\n"
               f"  title        = {{{{{name}}} evalpack, {tag}: an evaluation database with answers fixed in "
               "advance},\n"
               f"  author       = {{{owner}}},\n"
               f"  howpublished = {{\\url{{https://huggingface.co/datasets/{REPO_PLACEHOLDER}/tree/{tag}}}}},\n"
               f"  note         = {{Built with {built_with}; {len(rotations)} rotations, {shipped} questions}}\n"
               "}\n```\n")
    out.append(f"Replace `{REPO_PLACEHOLDER}` with this dataset's id on the Hub.\n")
    return "\n".join(out)


def write_card(pack_dir: Path) -> Path:
    """Render the card of ``pack_dir`` and write it as its README.md (UTF-8, ``\\n`` line ends)."""
    path = PackLayout(pack_dir).card
    path.write_bytes(render_card(pack_dir).encode("utf-8"))
    return path


__all__ = ["CARD", "QUESTIONS_CONFIG", "REPO_PLACEHOLDER", "SHARED_SPLIT", "Config", "Split", "card_metadata",
           "configs_metadata", "data_path", "hub_configs", "read_card_metadata", "render_card", "rotated_answers",
           "size_category", "total_rows", "write_card"]
