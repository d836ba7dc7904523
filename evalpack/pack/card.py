"""The dataset card: the pack's README.md, with a YAML header the Hub indexes and a body a person reads.

The card is written by ``evalpack build`` (``build.write_pack_files``) after ``questions.jsonl``,
``certificate.json``, ``manifest.json`` and the questions' Parquet, and before the audit and the attestation,
so it is one of the attested files, and ``publish`` uploads it to the Hub unchanged: a downloaded snapshot of
the published repo is the pack as built and passes ``evalpack verify``. It is a pure function of those files
and the first rows of the tables (no dates, never the attestation), so the same spec and seed give the same
bytes. It never shows what a public pack withholds: no holdout question's gold SQL or answer (the examples are
``dev`` questions only), and never the spec's text (the field meanings come from ``manifest.json`` ->
``semantics``, which holds no declared answer).

Header: ``license`` (a Hub license id, checked when the spec is loaded), ``pretty_name``, ``language``,
``task_categories`` (table-question-answering), ``tags`` (text-to-sql, evaluation, synthetic, evalpack),
``size_categories`` from every row ``load_dataset`` can return (questions and tables: the card's
total, so the header and the table of configs agree), ``configs`` as ``hub_configs`` lays them out
(``questions`` first and default, then one config per table with one split per rotation; ``hub_configs`` is
the one place that layout is decided and ``publish.layout`` uploads exactly the files it names), and
``dataset_info`` as ``datasets`` writes it (``DatasetInfosDict.to_dataset_card_data``): per config its
``features`` (the dtype of every column in the pack's Parquet: :data:`DUCKDB_DTYPES` for the manifest's DuckDB
types, ``evalpack.pack.hubfiles.QUESTION_SCHEMA`` for the questions) and its ``splits`` with ``num_examples``.

Body: what the pack is, how to load it pinned to the version tag, how to score with verify.py and the pass
rule, the tables with row counts and each column's type and meaning, example rows of every table and example
``dev`` questions, the question counts by kind, the near-miss table, intended use, limitations, the changelog
against the version the splits continue, how to verify the attestation, and a citation. The repo id is the
spec's ``repo:`` (``manifest.json`` -> ``repo``) when it has one, else the placeholder ``REPO_PLACEHOLDER``
with a note to set it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from evalpack.checks.nearmiss.gate import gate_sentence
from evalpack.core.layout import CARD, DICTIONARY, DICTIONARY_MD, PackLayout, table_path
from evalpack.core.scoring import map_files
from evalpack.pack.hubfiles import QUESTION_SCHEMA
from evalpack.spec.kinds import KINDS
from evalpack.spec.semantics import column_words

QUESTIONS_CONFIG = "questions"
DEV_SPLIT, HOLDOUT_SPLIT = "dev", "holdout"  # the questions config's parts: load_dataset(..., split="holdout")
DATA_DIR = "data"
REPO_PLACEHOLDER = "<owner>/<name>"
TAGS = ("text-to-sql", "evaluation", "synthetic", "evalpack")
EXAMPLE_ROWS = 3
EXAMPLE_QUESTIONS = 3
CHANGELOG_KEYS = 20  # question keys listed per change in the card (manifest.json has them all)
CHANGELOG_DIFF_LINES = 40  # lines of `evalpack diff` the card shows; the manifest keeps them all

# A DuckDB type of manifest.json (tables.<t>.columns) -> the `datasets` dtype of that column in the pack's Parquet,
# as pyarrow reads it and `datasets.Features.from_arrow_schema` names it (tests/pack/test_card.py checks both on built
# packs). DECIMAL(p,s) is decimal128(p, s) (:data:`DECIMAL_TYPE`). An imported pack's types are read from its Parquet.
DUCKDB_DTYPES = {
    "BOOLEAN": "bool", "TINYINT": "int8", "SMALLINT": "int16", "INTEGER": "int32", "BIGINT": "int64",
    "UTINYINT": "uint8", "USMALLINT": "uint16", "UINTEGER": "uint32", "UBIGINT": "uint64", "FLOAT": "float32",
    "DOUBLE": "float64", "VARCHAR": "string", "DATE": "date32", "TIMESTAMP": "timestamp[us]", "BLOB": "binary",
}
DECIMAL_TYPE = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")
# pyarrow's names of its scalar types -> the `datasets` dtype (datasets.features.features._arrow_to_datasets_dtype)
ARROW_DTYPES = {"null": "null", "bool": "bool", "halffloat": "float16", "float": "float32", "double": "float64",
                "string": "string", "large_string": "large_string", "binary": "binary",
                "large_binary": "large_binary", **{f"{s}int{n}": f"{s}int{n}" for s in ("", "u") for n in (8, 16, 32, 64)}}

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
    """One split of a Hub config: its name, the repo path of its Parquet file and its row count; of the questions
    config, which part of the questions it holds (``dev`` or ``holdout``) and whose answers (a rotation's, when
    answers are rotated)."""

    name: str
    path: str
    rows: int
    part: str | None = None
    rotation: str | None = None


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
    every one on the pack's own files (the pack folder is the repo: :mod:`evalpack.pack.hubfiles`).

    Questions (``data/questions/<split>.parquet``): a split per part, ``dev`` and ``holdout`` (when the pack has
    holdout questions; their gold SQL and answers are not in a public pack), so that a part loads on its own; with
    rotated answers the dev questions once per rotation instead, each split named by the rotation whose answers it
    holds. Tables: one split per rotation, the rotation's own ``rotations/seed_<n>/tables/<table>.parquet``.
    """
    rotations = [str(r) for r in manifest["rotations"]]
    parts = questions_by_part(manifest)
    dev = ([Split(r, data_path(QUESTIONS_CONFIG, r), parts[DEV_SPLIT], DEV_SPLIT, r) for r in rotations]
           if rotated_answers(manifest) else
           [Split(DEV_SPLIT, data_path(QUESTIONS_CONFIG, DEV_SPLIT), parts[DEV_SPLIT], DEV_SPLIT)])
    holdout = ([Split(HOLDOUT_SPLIT, data_path(QUESTIONS_CONFIG, HOLDOUT_SPLIT), parts[HOLDOUT_SPLIT], HOLDOUT_SPLIT)]
               if parts[HOLDOUT_SPLIT] else [])
    configs = [Config(QUESTIONS_CONFIG, tuple(dev + holdout), default=True)]
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


def question_count(manifest: dict) -> int:
    """The number of questions the pack ships, answerable and not."""
    return sum(questions_by_part(manifest).values())


def part_of(record: dict) -> str:
    """The part of the questions a record is in (its ``split``; a record without one is dev)."""
    return record.get("split") or DEV_SPLIT


def questions_by_part(manifest: dict) -> dict[str, int]:
    """The questions the pack ships in its dev and holdout parts, answerable and not (a manifest without
    ``by_split``, an imported pack's, has them all in dev)."""
    questions = manifest.get("questions") or {}
    parts = {DEV_SPLIT: 0, HOLDOUT_SPLIT: 0}
    for part, n in (questions.get("by_split") or {DEV_SPLIT: questions.get("shipped", 0)}).items():
        parts[part] = parts.get(part, 0) + int(n)
    unanswerable = manifest.get("unanswerable") or {}
    parts[unanswerable.get("split") or DEV_SPLIT] += int(unanswerable.get("count", 0))
    return parts


def duckdb_dtype(duckdb_type: str) -> str | None:
    """The `datasets` dtype of a column of this DuckDB type in a built pack's Parquet (None: not pinned)."""
    decimal = DECIMAL_TYPE.fullmatch(duckdb_type.strip().upper())
    if decimal:
        return f"decimal128({decimal[1]}, {decimal[2]})"
    return DUCKDB_DTYPES.get(duckdb_type.strip().upper())


def arrow_feature(arrow_type: pa.DataType) -> dict | None:
    """A column's entry in ``dataset_info.features`` (without its name) for an Arrow type: ``{"dtype": ...}``, or
    ``{"list": ...}`` for a list of scalars; None for a type it has no plain form for."""
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        inner = arrow_feature(arrow_type.value_type)
        return {"list": inner["dtype"]} if inner and "dtype" in inner else None
    if pa.types.is_decimal(arrow_type):
        return {"dtype": f"decimal{arrow_type.bit_width}({arrow_type.precision}, {arrow_type.scale})"}
    if pa.types.is_date32(arrow_type) or pa.types.is_date64(arrow_type):
        return {"dtype": "date32" if pa.types.is_date32(arrow_type) else "date64"}
    if pa.types.is_timestamp(arrow_type):
        tz = f", tz={arrow_type.tz}" if arrow_type.tz else ""
        return {"dtype": f"timestamp[{arrow_type.unit}{tz}]"}
    if pa.types.is_time(arrow_type):
        return {"dtype": f"time{arrow_type.bit_width}[{arrow_type.unit}]"}
    dtype = ARROW_DTYPES.get(str(arrow_type))
    return {"dtype": dtype} if dtype else None


def _features(columns: list[tuple[str, dict | None]]) -> list[dict] | None:
    if any(f is None for _, f in columns):
        return None
    return [{"name": name, **feature} for name, feature in columns]


def config_features(manifest: dict, config: Config, pack_dir: Path | None) -> list[dict] | None:
    """``features`` of one config: the questions' from QUESTION_SCHEMA; a table's from the manifest's DuckDB
    types (a built pack) or from its first rotation's Parquet schema (an imported pack, or a type not in
    DUCKDB_DTYPES). None when a column has no plain dtype (``datasets`` then infers the features itself)."""
    if config.name == QUESTIONS_CONFIG and config.default:
        return _features([(f.name, arrow_feature(f.type)) for f in QUESTION_SCHEMA])
    columns = (manifest["tables"].get(config.name) or {}).get("columns") or {}
    pinned = {c: duckdb_dtype(str(t)) for c, t in columns.items()} if not manifest.get("source") else {}
    if columns and all(pinned.get(c) for c in columns):
        return [{"name": c, "dtype": pinned[c]} for c in columns]
    if pack_dir is None or not config.splits or not (Path(pack_dir) / config.splits[0].path).is_file():
        return None
    return _features([(f.name, arrow_feature(f.type)) for f in pq.read_schema(Path(pack_dir) / config.splits[0].path)])


def arrow_bytes(path: Path) -> int:
    """The Arrow size of a Parquet file's rows once loaded (what ``datasets`` records as a split's
    ``num_bytes``), read batch by batch."""
    return sum(batch.nbytes for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536))


def dataset_info(manifest: dict, pack_dir: Path) -> list[dict]:
    """The header's ``dataset_info``: per config (those with plain features) its ``features`` and ``splits``
    (``name``, ``num_bytes``, ``num_examples``), ``download_size`` (the Parquet bytes) and ``dataset_size``."""
    described = []
    for config in hub_configs(manifest):
        features = config_features(manifest, config, pack_dir)
        files = [Path(pack_dir) / s.path for s in config.splits]
        if features is not None and all(f.is_file() for f in files):
            described.append((config, features, files))
    every_file = list(dict.fromkeys(f for _, _, files in described for f in files))
    sizes = dict(zip(every_file, map_files(arrow_bytes, every_file)))  # pyarrow decodes without the GIL
    out = []
    for config, features, files in described:
        splits = [{"name": s.name, "num_bytes": sizes[f], "num_examples": s.rows}
                  for s, f in zip(config.splits, files)]
        out.append({"config_name": config.name, "features": features, "splits": splits,
                    "download_size": sum(f.stat().st_size for f in files),
                    "dataset_size": sum(s["num_bytes"] for s in splits)})
    return out


def card_metadata(manifest: dict, pack_dir: Path | None = None) -> dict:
    """The YAML header as a dict (key order kept); ``dataset_info`` only with the pack's folder (its sizes)."""
    configs = hub_configs(manifest)
    header = {
        "license": manifest.get("license") or "unknown",
        "pretty_name": f"{manifest['pack']} evalpack",
        "language": ["en"],
        "task_categories": ["table-question-answering"],
        "tags": [t for t in TAGS if t != "synthetic" or not manifest.get("source")],  # imported: real data
        "size_categories": [size_category(total_rows(configs))],
        "configs": configs_metadata(configs),
    }
    info = dataset_info(manifest, pack_dir) if pack_dir is not None else []
    if info:
        header["dataset_info"] = info
    return header


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
    from evalpack.checks.nearmiss.study import study_markdown

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


def _cell(value: Any, limit: int = 60) -> str:
    """One value in a Markdown table cell: NULL spelled out, no pipes or line breaks, long text clipped."""
    if value is None:
        return "*NULL*"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ")
    elif isinstance(value, (dt.date, dt.time)):
        text = value.isoformat()
    else:
        text = str(value)
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def example_rows(pack_dir: Path, rotation: str, table: str, n: int = EXAMPLE_ROWS) -> tuple[list[str], list[list]]:
    """The column names and first ``n`` rows of ``table`` on ``rotation``, read from the pack's Parquet."""
    path = Path(pack_dir) / table_path(rotation, table)
    if not path.is_file():
        return [], []
    parquet = pq.ParquetFile(path)
    names = list(parquet.schema_arrow.names)
    batch = next(parquet.iter_batches(batch_size=n), None)
    rows = batch.to_pylist()[:n] if batch is not None else []
    return names, [[row[c] for c in names] for row in rows]


def example_questions(questions: list[dict], n: int = EXAMPLE_QUESTIONS) -> list[dict]:
    """Up to ``n`` ``dev`` questions with a gold SQL and an answer, of different kinds first, in file order.
    Never a holdout question, even one whose fields a private pack would carry."""
    shown = [q for q in questions if q.get("split") == "dev" and q.get("gold_sql") and q.get("expected_answer") is not None
             and not q.get("commitment")]
    picked: list[dict] = []
    for q in shown:
        if len(picked) < n and q.get("kind") not in {p.get("kind") for p in picked}:
            picked.append(q)
    for q in shown:
        if len(picked) < n and q not in picked:
            picked.append(q)
    return sorted(picked, key=questions.index)


def _answer_text(q: dict, rotations: list[str]) -> str:
    value = q.get("expected_answer")
    if isinstance(value, dict) and rotations and rotations[0] in value:
        return (f"`{json.dumps(value[rotations[0]], ensure_ascii=False)}` on `{rotations[0]}` (each rotation has its "
                "own answer)")
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def column_meanings(manifest: dict, table: str) -> dict[str, str]:
    """What each column of ``table`` means: ``manifest.json`` -> ``semantics`` (the data dictionary's meanings, no
    declared answer), else the words of its name."""
    given = ((((manifest.get("semantics") or {}).get("tables") or {}).get(table) or {}).get("columns") or {})
    columns = (manifest["tables"].get(table) or {}).get("columns") or {}
    return {c: given.get(c) or column_words(c) for c in columns}


def changelog_markdown(manifest: dict) -> str:
    """The Changelog section's text, from ``manifest.json`` -> ``changelog`` (and ``splits.continues``)."""
    tag = f"v{manifest['version']}"
    log = manifest.get("changelog")
    continues = (manifest.get("splits") or {}).get("continues")
    if not log and not continues:
        return f"{tag}: the first version of this pack; there is no earlier version to compare with."
    if not log:
        return f"{tag} continues the splits of v{continues}; its manifest records no changelog."
    before = log["continues"]
    if str(before) == str(manifest["version"]):
        head = (f"{tag} was rebuilt over an earlier build of the same version; against that build (by question "
                "identity):")
    else:
        head = f"{tag} against v{before}, the version whose splits it continues (by question identity):"
    lines = [head, "",
             f"- questions: {_fmt(log['questions_before'])} before, {_fmt(log['questions_now'])} now; "
             f"{_fmt(log['kept'])} kept, {_fmt(len(log['added']))} added, {_fmt(len(log['removed']))} removed, "
             f"{_fmt(len(log['moved']))} moved to another split"]

    def keys(label: str, items: list[str]) -> None:
        if items:
            more = f" and {len(items) - CHANGELOG_KEYS} more" if len(items) > CHANGELOG_KEYS else ""
            lines.append(f"- {label}: " + ", ".join(f"`{k}`" for k in items[:CHANGELOG_KEYS]) + more)

    keys("added", log["added"])
    keys("removed", log["removed"])
    keys("moved", [f"{m['key']} ({m['from']} -> {m['to']})" for m in log["moved"]])
    lines += ["", f"Compared: {log['basis']}. `manifest.json` -> `changelog` lists every key."]
    found = log.get("diff")
    if found:
        shown = found["lines"][:CHANGELOG_DIFF_LINES]
        more = len(found["lines"]) - len(shown)
        lines += ["", f"What `evalpack diff` reports against v{before} (answers, wording, splits, the near-miss "
                      "study, tables):", "", "```", *shown, *([f"... and {more} more lines (manifest.json -> "
                                                                  "changelog -> diff)"] if more else []), "```"]
    return "\n".join(lines)


def exports_markdown(manifest: dict, local: str, repo_id: str, tag: str) -> str:
    """The card's section on the pack's ``exports/`` (the spec's ``exports:``): the SQLite databases, the BIRD and
    Spider layouts and the PostgreSQL dumps, and the command lines of BIRD's and Spider's evaluation scripts and of
    ``evalpack score --dialect``. Empty for a pack built without exports."""
    section = manifest.get("dialects") or {}
    formats = [f for f in section.get("formats") or () if f in EXPORT_FILES]
    if not formats:
        return ""
    first = str(manifest["rotations"][0])
    db_id = f"{manifest['pack']}_{first}"
    checked = [f"{name}: {entry['verified']} of {entry['checked']} questions verified, {entry['dropped']} left out"
               for name, entry in section.items() if isinstance(entry, dict) and "verified" in entry]
    out = ["## SQLite, BIRD and Spider\n",
           "The databases are here as SQLite files too, for harnesses built around SQLite and around the BIRD and "
           "Spider layouts. Each question's gold SQL was translated from DuckDB's dialect (sqlglot) and run on the "
           "real engine on every rotation; only the questions that answered exactly as in DuckDB are listed there ("
           + ("; ".join(checked) if checked else "see `manifest.json`") + "; `manifest.json` -> `dialects` gives "
           f"each one left out and why). Holdout questions are not exported. One database id per rotation: "
           f"`{db_id}` is rotation `{first}`.\n",
           "\n".join(f"- `exports/{f}/`: {EXPORT_FILES[f]}" for f in formats) + "\n"]
    if "bird" in formats:
        out.append("BIRD's evaluation script (`evaluation.py` of the BIRD repository, `bird/llm/src/`) runs each "
                   "prediction and its gold SQL on the database and compares their rows as sets; it reads the gold "
                   "SQL from `<ground_truth_path><data_mode>_gold.sql` (here `dev_gold.sql`, also as `dev.sql`, the "
                   "name of BIRD's own download) and the predictions from "
                   "`<predicted_sql_path>predict_<data_mode>.json`, a JSON object `{\"0\": \"SQL\\t----- bird "
                   "-----\\tDB_ID\", ...}` keyed by the position in `dev.json` (the paths are joined as text: keep "
                   "the trailing slashes). Being sets, a ranking or a series in the wrong order scores right there; "
                   "`evalpack score` compares the rows in order wherever a gold query orders them:\n")
        out.append("```bash\n"
                   f'hf download "{repo_id}" --repo-type dataset --revision {tag} --local-dir {local}\n'
                   f"python3 -u src/evaluation.py --db_root_path {local}/exports/bird/dev_databases/ --data_mode dev \\\n"
                   f"  --ground_truth_path {local}/exports/bird/ --diff_json_path {local}/exports/bird/dev.json \\\n"
                   "  --predicted_sql_path predictions/ --num_cpus 4 --meta_time_out 30.0 --mode_gt gt "
                   "--mode_predict gpt\n"
                   "```\n")
    if "spider" in formats:
        out.append("Spider's own `evaluation.py` (the Spider repository, and test-suite-sql-eval's) parses every gold "
                   "query with Spider's grammar before it runs anything, and that grammar has no `WITH`, window "
                   "function, `CASE`, `CAST`, `IS NULL`, `LEFT JOIN` or function other than the five aggregates "
                   "(not even `DATE` or `ROUND`): it stops with an error at the first gold query it cannot parse, "
                   "which here is the first or nearly the first, and gives no score. The layout itself is Spider's "
                   "(`dev.json`, `tables.json`, `dev_gold.sql`, "
                   "`database/<db_id>/<db_id>.sqlite`), for harnesses that read it and execute the queries, such as "
                   "evaldata's `load_spider` with its `ExecutionAccuracy`, or `evalpack score --dialect sqlite` "
                   "below.\n")
    out.append("`evalpack score` scores SQLite or PostgreSQL SQL on those engines with this pack's rules "
               "(ids and answers are the pack's; `--dialect postgres` needs a server, `--postgres-dsn`):\n")
    out.append("```bash\n"
               f"evalpack score {local} --candidates answers_sqlite.jsonl --dialect sqlite --json report.json\n"
               "```\n")
    return "\n".join(out)


EXPORT_FILES = {
    "sqlite": "one SQLite database per rotation (`<rotation>.sqlite`) and `questions.jsonl` with each exported "
              "question's SQLite gold SQL (`gold_sql`; DuckDB's in `duckdb_sql`)",
    "postgres": "one plain-SQL dump per rotation (`<rotation>.sql`; `createdb DB && psql -d DB -f seed_42.sql`)",
    "bird": "BIRD's layout: `dev.json` (question_id, db_id, question, evidence, SQL, difficulty), `dev_tables.json`, "
            "`dev.sql` (the gold SQL, `SQL<TAB>db_id` per line) and `dev_databases/<db_id>/<db_id>.sqlite`",
    "spider": "Spider's layout: `dev.json` (db_id, question, query), `tables.json` (column names and types, primary "
              "and foreign keys), `dev_gold.sql` and `database/<db_id>/<db_id>.sqlite`",
}


@dataclass(frozen=True)
class _Card:
    """What the sections of a pack's card read, worked out once from its files (:func:`_card`)."""

    pack_dir: Any
    layout: Any
    manifest: Any
    questions: Any
    cert: Any
    name: Any
    version: Any
    tag: Any
    rotations: Any
    configs: Any
    questions_cfg: Any
    tables: Any
    rotated: Any
    qinfo: Any
    shipped: Any
    by_kind: Any
    by_split: Any
    by_type: Any
    tool: Any
    duckdb_version: Any
    built_with: Any
    first_table: Any
    local: Any
    repo: Any
    repo_id: Any
    source: Any
    header: Any
    answers: Any


def _card(pack_dir: Path) -> _Card:

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
    repo = manifest.get("repo") or None
    repo_id = repo or REPO_PLACEHOLDER
    source = manifest.get("source") or {}
    header = yaml.safe_dump(card_metadata(manifest, pack_dir), sort_keys=False, allow_unicode=True, width=1000)

    answers = ("rotated (each rotation has its own expected answers; the questions config has one split per "
               "rotation)" if rotated else "shared (the same on every rotation)")
    return _Card(pack_dir, layout, manifest, questions, cert, name, version, tag, rotations, configs, questions_cfg, tables, rotated, qinfo, shipped, by_kind, by_split, by_type, tool, duckdb_version, built_with, first_table, local, repo, repo_id, source, header, answers)


def _introduction(c: _Card) -> list[str]:
    """The card's header, title and what the pack is."""
    (manifest, questions, name, tag, rotations, tables, shipped, duckdb_version, built_with, first_table, source,
        header, answers) = (c.manifest, c.questions, c.name, c.tag, c.rotations, c.tables, c.shipped,
        c.duckdb_version, c.built_with, c.first_table, c.source, c.header, c.answers)
    out: list[str] = []
    out.append(f"---\n{header}---\n")
    out.append(f"# {name} evalpack ({tag})\n")
    if manifest.get("description"):
        out.append(f"{manifest['description'].strip()}\n")
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
    return out


def _how_to_load(c: _Card) -> list[str]:
    """The card's section "How to load"."""
    (tag, rotations, questions_cfg, tables, first_table, repo, repo_id) = (c.tag, c.rotations, c.questions_cfg,
        c.tables, c.first_table, c.repo, c.repo_id)
    out: list[str] = []
    out.append("## How to load\n")
    if repo:
        out.append(f"This dataset is `{repo}` on the Hub. Pin the version tag: a tag is never moved once published.\n")
    else:
        out.append("Pin the version tag: a tag is never moved once published. Set `REPO` to the id this dataset has "
                   "on the Hub (the id in its address, `OWNER/NAME`); this pack was built without one (set `repo:` "
                   "in the spec so the card names it).\n")
    questions_splits = ", ".join(s.name for s in questions_cfg.splits)
    out.append("```python\nfrom datasets import load_dataset\n\n"
               f'REPO = "{repo_id}"  # this dataset\'s id on the Hub\n\n'
               f'questions = load_dataset(REPO, "{QUESTIONS_CONFIG}", revision="{tag}")'
               f"  # split{'s' if len(questions_cfg.splits) > 1 else ''} {questions_splits}\n"
               + "".join(f'{t.name} = load_dataset(REPO, "{t.name}", revision="{tag}")'
                         f"  # splits {', '.join(s.name for s in t.splits)}\n" for t in tables)
               + f'\nrotation = {first_table}["{rotations[0]}"]  # one database = the same split of every table\n'
               + (f'holdout = load_dataset(REPO, "{QUESTIONS_CONFIG}", split="{HOLDOUT_SPLIT}", revision="{tag}")'
                  "  # questions only: no gold SQL, no answer\n"
                  if any(s.part == HOLDOUT_SPLIT for s in questions_cfg.splits) else "")
               + "```\n")
    out.append("Question fields: `id`, `question` (an analyst's words, no identifiers), `evidence` (the "
               "definitions it needs, as in BIRD: which column a measure sums, which dates a month covers, the "
               "literal of a category; run with or without it), `paraphrases` (other phrasings of the same "
               "question), `answerable` (false: no SQL on this schema answers it and declining is correct; then "
               "`unanswerable_reason` says why, and `gold_sql` and `expected_answer` are empty), "
               "`gold_sql` (DuckDB dialect, reads the tables by name), "
               "`answer_type` (`number` | `integer` | `string`), `round_decimals`, `expected_answer` (the JSON "
               "text of the answer, exactly as in `questions.jsonl`), `expected_number` / `expected_integer` / "
               "`expected_string` (the same answer typed, filled for its own type only), `kind`, `difficulty` "
               "(`simple` | `moderate` | `challenging`, from the gold SQL's components), `skills` (what the gold SQL "
               "exercises: `window`, `cte`, `join`, ...), `split` "
               "(`dev` | `holdout`), `question_sha256` (SHA-256 of the question text), `tags`, `key` (the question's "
               "identity: its family and parameters, the same in every version), `orphan_rows` (`included` when the "
               "answer counts records whose parent is missing, `excluded` when its join leaves them out, empty when "
               "none is in reach), `commitment` (holdout questions "
               "only: their gold SQL and answer are withheld from the public pack, and this salted SHA-256 lets the "
               "private answer key be checked when it is revealed).\n")
    out.append("Column types survive the trip: decimal amounts load as `decimal.Decimal`, dates as "
               "`datetime.date`, timestamps as `datetime.datetime`.\n")
    return out


def _how_to_score(c: _Card) -> list[str]:
    """The card's section "How to score"."""
    manifest, cert, tag, rotations, local, repo_id = c.manifest, c.cert, c.tag, c.rotations, c.local, c.repo_id
    out: list[str] = []
    out.append("## How to score\n")
    out.append("Download the tagged snapshot: it is the pack exactly as built (this card included), and it "
               "verifies as it is, in the Hub cache or in a folder of your own. Then run its `verify.py`, which "
               "needs only `duckdb`:\n")
    out.append("```bash\n"
               f'REPO="{repo_id}"   # this dataset\'s id on the Hub\n'
               f'hf download "$REPO" --repo-type dataset --revision {tag} --local-dir {local}\n'
               f"python {local}/verify.py                                  # rerun every gold SQL on every rotation\n"
               f"python {local}/verify.py --candidates answers.jsonl --json report.json\n"
               "```\n")
    out.append('Candidates are JSON Lines of `{"id": "q001", "sql": "..."}`, a JSON list of those, or one JSON '
               'object mapping id to SQL; `{"id": ..., "declined": true}` declines a question, and a question left '
               'out is not answered. Scoring is four-way '
               "(correct / wrong / declined / not answered) and reports the wrong rate and coverage beside accuracy. "
               "Candidate SQL runs "
               "read-only, one statement per candidate, under a time limit.\n")
    out.append("### The pass rule\n")
    rule = cert.get("comparison")
    if not rule:
        from evalpack.core.scoring import COMPARISON_RULE

        rule = COMPARISON_RULE
    out.append(f"{rule} A candidate is correct only when it matches on **all {len(rotations)} rotations**; an "
               f"error or a timeout is wrong; a missing id is not answered (never correct).\n")
    checks = cert.get("golden_checks") or {}
    if checks:
        out.append("Every shipped gold SQL passed these checks on every rotation:\n\n"
                   + "\n".join(f"- `{k}`: {v}" for k, v in checks.items()) + "\n")

    out.append(exports_markdown(manifest, local, repo_id, tag))
    return out


def _tables(c: _Card) -> list[str]:
    """The card's section "Tables"."""
    pack_dir, manifest, rotations, configs, tables = c.pack_dir, c.manifest, c.rotations, c.configs, c.tables
    out: list[str] = []
    out.append("## Tables\n")
    out.append(_table(["table", "columns", *rotations],
                      [[f"`{t.name}`", len((manifest["tables"][t.name] or {}).get("columns") or {}),
                        *[_fmt(s.rows) for s in t.splits]] for t in tables]) + "\n")
    out.append(f"{_fmt(total_rows(configs))} rows in all (tables on every rotation plus questions).\n")
    dtypes = {c.name: {f["name"]: f.get("dtype") or f"list of {f.get('list')}"
                       for f in config_features(manifest, c, pack_dir) or []} for c in tables}
    for t in tables:
        columns = (manifest["tables"][t.name] or {}).get("columns") or {}
        row = (((manifest.get("semantics") or {}).get("tables") or {}).get(t.name) or {}).get("row")
        out.append(f"### `{t.name}`\n")
        if row:
            out.append(f"One row per {row}.\n")
        meanings = column_meanings(manifest, t.name)
        out.append(_table(["column", "DuckDB type", "`datasets` dtype", "meaning"],
                          [[f"`{c}`", f"`{ctype}`", f"`{dtypes[t.name].get(c, '')}`" if dtypes[t.name].get(c) else "",
                            _cell(meanings[c], 200)] for c, ctype in columns.items()], align="llll") + "\n")
        names, rows = example_rows(pack_dir, rotations[0], t.name)
        if rows:
            out.append(f"The first {len(rows)} rows of `{rotations[0]}`:\n\n"
                       + _table([f"`{c}`" for c in names], [[_cell(v) for v in r] for r in rows],
                                align="l" * len(names)) + "\n")
    return out


def _dictionary(c: _Card) -> list[str]:
    """The card's section "Data dictionary": the conventions every question shares, the measures and terms; the
    columns' meanings are in the Tables section (from the same dictionary)."""
    given = c.layout.read_dictionary()
    if not given:
        return []
    out = ["## Data dictionary\n",
           f"Every question reads under this dictionary (`{DICTIONARY}`, and `{DICTIONARY_MD}` for people): what one "
           "row of each table is, what each column and each stored value means, the measures and terms, and these "
           "conventions.\n"]
    out.append("\n".join(f"- **{e['name']}**: {e['definition']}" for e in given.get("conventions") or []) + "\n")
    for title, key in (("Measures", "measures"), ("Terms", "terms")):
        if given.get(key):
            out.append(f"{title}:\n\n" + "\n".join(f"- **{e['name']}**: {e['definition']}" for e in given[key]) + "\n")
    return out


def _traps(c: _Card) -> list[str]:
    """The card's section "Traps" (only when the spec declares traps): each trap with the questions that read
    through it, and the near-miss operator that makes its mistake."""
    traps = c.manifest.get("traps")
    if not traps:
        return []
    operators = (c.manifest.get("near_miss_study") or {}).get("operators") or {}
    mistake = {"not_counted": "exclusion_dropped", "sibling": "sibling_swap", "codes": "code_misread"}
    rows = []
    for name, entry in traps["declared"].items():
        op = mistake[name.split(":", 1)[0]]
        row = operators.get(op) or {}
        caught = f"{row['mutants'] - row['match_all']} of {row['mutants']}" if row.get("mutants") else ""
        rows.append([f"`{name}`", entry["questions"], f"`{op}`", caught])
    return ["## Traps\n",
            "What a careless query trips over here (the data dictionary says what each means); every answer holds "
            f"over the rows that count. {traps['questions_touched']} questions "
            f"({traps['share_touched']:.0%}) read through at least one.\n",
            _table(["trap", "questions", "mistake", "near-miss mutants caught"], rows) + "\n"]


def _questions(c: _Card) -> list[str]:
    """The card's section "Questions"."""
    (manifest, questions, rotations, qinfo, shipped, by_kind, by_split, by_type) = (c.manifest, c.questions,
        c.rotations, c.qinfo, c.shipped, c.by_kind, c.by_split, c.by_type)
    out: list[str] = []
    out.append("## Questions\n")
    study = (manifest.get("near_miss_study") or {}).get("families") or {}

    def caught(kind: str) -> str:
        f = study.get(kind)
        return f"{f['mutants'] - f['match_all']} of {f['mutants']}" if f and f.get("mutants") else ""

    out.append(_table(["kind", "asks", "questions", "near-miss mutants caught"],
                      [[f"`{k}`", KINDS.get(k, ""), v, caught(k)] for k, v in sorted(by_kind.items())]
                      + [["**all**", "", f"**{shipped}**", ""]]) + "\n")
    declines = (manifest.get("unanswerable") or {}).get("count", 0)
    if declines:
        out.append(f"{declines} of the {shipped} questions have `answerable: false`: no SQL on this schema answers "
                   "them (a measure, attribute or entity it does not hold, or a forecast, cause or advice), so "
                   "declining is the correct answer and any SQL is wrong. `manifest.json` -> `unanswerable` "
                   "gives each one's proof. Score with the penalty score (README of evalpack, 'Scoring a model') "
                   "to reward a model that knows when to stop.\n")
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
        out.append(f"{dropped} derived questions were dropped: they did not hold on every rotation, or a plausible "
                   "mistake answered them on every rotation (the near-miss gate, below); `manifest.json` lists each "
                   "with its `drop_reason`.\n")
    examples = example_questions(questions)
    if examples:
        out.append(f"### Example questions ({'`dev` only' if by_split.get('holdout') else 'from `dev`'})\n")
        for q in examples:
            facts = ", ".join(x for x in (f"`{q.get('kind')}`" if q.get("kind") else "", q.get("difficulty") or "",
                                          q.get("answer_type") or "") if x)
            lines = [f"**{q['id']}** ({facts}): {q['question']}", ""]
            if q.get("evidence"):
                lines.append(f"- evidence: {q['evidence']}")
            lines.append(f"- answer: {_answer_text(q, rotations)}")
            out.append("\n".join(lines) + "\n")
            out.append(f"```sql\n{q['gold_sql'].strip()}\n```\n")
    return out


def _near_misses(c: _Card) -> list[str]:
    """The card's section "Near misses"."""
    manifest = c.manifest
    out: list[str] = []
    out.append("## Near misses\n")
    out.append("Each gold SQL was mutated into plausible wrong queries (an off-by-one date bound, a swapped "
               "aggregate, a dropped filter, ...) and every mutant was rerun on every rotation. A mutant that "
               "still matches on all rotations would let a wrong query pass; the fewer, the sharper the pack.\n")
    out.append(near_miss_markdown(manifest.get("near_miss_study")) + "\n")
    if sentence := gate_sentence((manifest.get("near_miss_study") or {}).get("gate")):
        out.append(sentence + "\n")
    return out


def _intended_use(c: _Card) -> list[str]:
    """The card's section "Intended use"."""
    rotations = c.rotations
    out: list[str] = []
    out.append("## Intended use\n")
    out.append("- Scoring text-to-SQL systems and data agents: each question has one verified answer"
               + (", and a candidate counts only when it matches on every rotation, so a memorised or constant answer "
                  "fails.\n" if len(rotations) > 1 else " on the one database it was asked of.\n")
               + "- Tune and debug on `dev`; report on `holdout`, which only the holder of the answer key can score.\n"
               "- Comparing versions of a system, or of this pack, pinned to a version tag (`evalpack diff` compares "
               "two pack versions).\n"
               "- Not for training a model you then score here (it would learn the answers, not the skill), and not "
               "as a source of facts about real businesses.\n")
    return out


def _limitations(c: _Card) -> list[str]:
    """The card's section "Limitations"."""
    manifest, duckdb_version, source = c.manifest, c.duckdb_version, c.source
    out: list[str] = []
    out.append("## Limitations\n")
    if source:
        limits = ["- **Imported data**: the questions and the database are the ones received; evalpack checked them "
                  "and recorded each question's `status`, it did not write or correct them.\n"]
    else:
        limits = ["- **Synthetic data**: every row is generated. Only the declared facts (totals, rates, shares, "
                  "keys, orphans) are meant; names, cities, notes and every other distribution are filler with no "
                  "real-world signal.\n",
                  "- **Answers fixed by declarations**: the expected answers come from the spec's declarations, not "
                  "from someone reading the data. A question that admits another reasonable reading is still scored "
                  "against the declared one; its `evidence` says which.\n"]
    operators = ", ".join(f"`{op}`" for op in ((manifest.get("near_miss_study") or {}).get("operators") or {}))
    limits.append("- **What the near-miss study catches**: wrong queries that its operators make from the gold SQL"
                  + (f" ({operators})" if operators else "") + "; it counts those that would still pass. It does not "
                  "cover wrong queries unlike any mutant, and a candidate that matches on every rotation counts as "
                  "correct however it got there.\n")
    limits.append("- **Holdout answers are private**: holdout questions ship with their text and a salted "
                  "commitment, never their gold SQL or answer; without the answer key they are reported as not "
                  "scored.\n")
    limits.append(f"- **Dialect**: gold SQL is DuckDB SQL{' (DuckDB ' + duckdb_version + ')' if duckdb_version else ''}"
                  " and candidates run on DuckDB. SQL written for another engine may need translating (integer "
                  "division, date functions, NULL ordering).\n")
    out.append("".join(limits))
    return out


def _changelog(c: _Card) -> list[str]:
    """The card's section "Changelog"."""
    manifest = c.manifest
    out: list[str] = []
    out.append("## Changelog\n")
    out.append(changelog_markdown(manifest) + "\n")
    return out


def _attestation(c: _Card) -> list[str]:
    """The card's section "Verify the attestation"."""
    local = c.local
    out: list[str] = []
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
    return out


def _citation(c: _Card) -> list[str]:
    """The card's section "Citation"."""
    (name, tag, rotations, shipped, built_with, repo, repo_id) = (c.name, c.tag, c.rotations, c.shipped,
        c.built_with, c.repo, c.repo_id)
    out: list[str] = []
    out.append("## Citation\n")
    key = "".join(ch if ch.isalnum() else "_" for ch in f"{name}_evalpack_{tag}")
    owner = repo_id.split("/")[0]
    out.append("```bibtex\n"
               f"@misc{{{key},\n"
               f"  title        = {{{{{name}}} evalpack, {tag}: an evaluation database with answers fixed in "
               "advance},\n"
               f"  author       = {{{owner}}},\n"
               f"  howpublished = {{\\url{{https://huggingface.co/datasets/{repo_id}/tree/{tag}}}}},\n"
               f"  note         = {{Built with {built_with}; {len(rotations)} rotations, {shipped} questions}}\n"
               "}\n```\n")
    if not repo:
        out.append(f"Replace `{REPO_PLACEHOLDER}` with this dataset's id on the Hub (or set `repo:` in the spec and "
                   "rebuild, and the card names it).\n")
    return out


def render_card(pack_dir: Path) -> str:
    """The dataset card of the pack in ``pack_dir``, from its manifest.json, questions.jsonl, certificate.json
    and the first rows of its tables. Never reads the attestation (the card is written before it)."""
    c = _card(pack_dir)
    return "\n".join(part for section in (_introduction, _how_to_load, _how_to_score, _dictionary, _traps, _tables, _questions, _near_misses, _intended_use, _limitations, _changelog, _attestation, _citation) for part in section(c))


def write_card(pack_dir: Path) -> Path:
    """Render the card of ``pack_dir`` and write it as its README.md (UTF-8, ``\\n`` line ends)."""
    path = PackLayout(pack_dir).card
    path.write_bytes(render_card(pack_dir).encode("utf-8"))
    return path


__all__ = ["CARD", "DEV_SPLIT", "DUCKDB_DTYPES", "HOLDOUT_SPLIT", "QUESTIONS_CONFIG", "REPO_PLACEHOLDER", "Config",
           "Split",
           "arrow_feature", "card_metadata", "config_features", "configs_metadata", "data_path", "dataset_info",
           "duckdb_dtype", "example_questions", "hub_configs", "part_of", "question_count", "read_card_metadata", "render_card",
           "rotated_answers", "size_category", "total_rows", "write_card"]
