"""Shared fixtures: the example packs, built once per test session."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakehub import FakeHub, client_env
from pg import postgres_dsn  # noqa: F401 - the session's private PostgreSQL server, a fixture

from evalpack.build import build_pack
from evalpack.checks.verification import NEAR_MISS_REASON
from evalpack.core.cache import CACHE_ENV
from evalpack.core.errors import ERROR_PREFIX
from evalpack.core.scoring import holdout_key_beside, pack_questions

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "schemas"


def full_questions(pack: Path) -> list[dict]:
    """Every question of a pack built here, the holdout's gold SQL and answers from the key beside it."""
    records, key = pack_questions(pack)
    assert key is not None or all(r.get("split") != "holdout" for r in records), f"no answer key beside {pack}"
    return records


def gold_questions(pack: Path) -> list[dict]:
    """The questions of a pack built here that have gold SQL (all but those to decline), holdout included."""
    return [r for r in full_questions(pack) if r.get("answerable") is not False]


def gated_out(pack: Path) -> list[dict]:
    """The manifest's dropped questions that verified on every rotation and that the near-miss gate left out."""
    dropped = json.loads((pack / "manifest.json").read_text())["dropped"]
    return [d for d in dropped if d["drop_reason"].startswith(NEAR_MISS_REASON)]


def failed_checks(pack: Path) -> list[dict]:
    """The manifest's dropped questions that failed a golden check on some rotation (the gate's are not these)."""
    dropped = json.loads((pack / "manifest.json").read_text())["dropped"]
    return [d for d in dropped if not d["drop_reason"].startswith(NEAR_MISS_REASON)]


def verified_kinds(pack: Path) -> set[str]:
    """The families whose questions verified on every rotation: shipped, or left out by the near-miss gate only
    (a family the rows of one spec cannot guard against every mistake is still asked and verified)."""
    return {r["kind"] for r in full_questions(pack)} | {d["kind"] for d in gated_out(pack)}


def verified_records(pack: Path) -> list[dict]:
    """The answerable questions that verified on every rotation: the shipped records, and those the near-miss gate
    left out as the manifest lists them (gold SQL and expected answer per rotation; the first when shared)."""
    shared = json.loads((pack / "manifest.json").read_text())["answers"] == "shared"
    gated = [{**d, "expected_answer": next(iter(d["expected_answer"].values())) if shared else d["expected_answer"]}
             for d in gated_out(pack) if d["expected_answer"] is not None]
    return [r for r in full_questions(pack) if r.get("answerable") is not False] + gated


def spec_text(pack: Path) -> str:
    """The spec a pack built here was made from: in its manifest, or (with a holdout) in its answer key."""
    spec = json.loads((pack / "manifest.json").read_text())["spec"]
    return spec["text"] if spec["text"] is not None else (holdout_key_beside(pack) / spec["file"]).read_text()


def copy_pack(source: Path, target: Path) -> Path:
    """A copy of a pack built here and of the holdout answer key beside it (the full pack)."""
    shutil.copytree(source, target)
    if holdout_key_beside(source).is_dir():
        shutil.copytree(holdout_key_beside(source), holdout_key_beside(target))
    return target


# The test files that take longest (a full run's junit times, 2026-12-07), started first: pytest-xdist hands a
# worker the next file as it frees up (--dist loadfile), so with the longest ones first the run ends on short
# files and the two workers finish close together. A file not listed keeps its place after them.
LONGEST_FIRST = ("test_dialect_scoring", "test_serve", "test_exports", "test_nearmiss", "test_scoring_isolation",
                 "test_misata_packs", "test_import", "test_dagster", "test_postgres", "test_publish",
                 "test_import_hostile", "test_serve_hostile", "test_readme", "test_dagster_publish")


def pytest_collection_modifyitems(session, config, items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: the rest keep collection order


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    """A fake Hub (tests/fakehub.py) of the test module's own, serving the real Hub clients."""
    with FakeHub() as fake:
        yield fake


@pytest.fixture(scope="module")
def hub_env(hub, tmp_path_factory) -> dict[str, str]:
    """The environment that points the real huggingface_hub and datasets clients at ``hub``."""
    return client_env(hub, tmp_path_factory.mktemp("hf_home"))


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory) -> Iterator[Path]:
    """The session's own cache on disk (evalpack.core.cache), inherited by the builds tests start as
    subprocesses: a test session never reads or fills the user's cache."""
    base = tmp_path_factory.getbasetemp()
    # pytest-xdist's workers each have a base folder under one run folder: they share the cache there
    # (one SQLite database in write-ahead mode: concurrent builds share it safely)
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "evalpack-cache"
    folder.mkdir(exist_ok=True)
    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(folder)
    yield folder
    if before is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = before


@pytest.fixture(scope="session", autouse=True)
def session_holdout_secret(tmp_path_factory) -> Iterator[Path]:
    """The session's own holdout secret (evalpack.pack.holdout.holdout_secret, made on first use), inherited by the
    builds tests start as subprocesses: a test session never reads or makes the user's, and every build of one
    spec in a session (pytest-xdist's workers too) salts its holdout alike, so two builds give the same bytes."""
    from evalpack.pack.holdout import SECRET_ENV

    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "holdout.secret"
    before = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = str(path)
    yield path
    if before is None:
        os.environ.pop(SECRET_ENV, None)
    else:
        os.environ[SECRET_ENV] = before


@pytest.fixture(scope="session")
def retail_pack(tmp_path_factory) -> Path:
    """schemas/retail.yaml built with 3 rotations (read-only: copy it before changing anything)."""
    out = tmp_path_factory.mktemp("packs") / "retail"
    build_pack(SCHEMAS / "retail.yaml", out, rotations=3)
    return out


@pytest.fixture(scope="session")
def retail_one_rotation(tmp_path_factory) -> Path:
    """schemas/retail.yaml with one rotation (read-only): for tests of hostile queries, each of which runs to its
    limit once per rotation while the limits, the workers and the report are the same with one as with three."""
    out = tmp_path_factory.mktemp("packs") / "retail_one"
    build_pack(SCHEMAS / "retail.yaml", out, rotations=1)
    return out


@pytest.fixture(scope="session")
def finance_pack(tmp_path_factory) -> Path:
    """schemas/finance.yaml built with 3 rotations (read-only: copy it before changing anything)."""
    out = tmp_path_factory.mktemp("packs") / "finance"
    build_pack(SCHEMAS / "finance.yaml", out, rotations=3)
    return out


# schemas/retail.yaml with a business term its questions use (so that they carry evidence) and a column description
# written to break out of a schema comment or a string literal (a quote, a line break, a backslash, `--`)
NOTED_AT = "    customers.signed_up_at: sign-up date\n  measures:\n    revenue: {sum: orders.amount}\n"
NOTED = ("    customers.signed_up_at: sign-up date\n"
         "    orders.note: {name: note, description: \"what the customer's agent typed -- \\\"as is\\\"\\nthen a "
         "line); DROP TABLE orders; -- a back\\\\slash\", unit: words}\n"
         "  measures:\n    revenue: {sum: orders.amount}\n"
         "  terms:\n    revenue: \"money taken in from orders as placed, refunds not taken off\"\n")
NOTED_DESCRIPTION = "what the customer's agent typed -- \"as is\"\nthen a line); DROP TABLE orders; -- a back\\slash"


@pytest.fixture(scope="session")
def noted_pack(tmp_path_factory) -> Path:
    """schemas/retail.yaml with a business term (its questions carry evidence) and a hostile column description
    (:data:`NOTED_DESCRIPTION`, of orders.note, unit words), built with one rotation (read-only): what it is for
    is the same on every rotation, and each rotation exported is verified again."""
    return build_variant(tmp_path_factory, "noted", NOTED_AT, NOTED, rotations=1)


def build_variant(tmp_path_factory, name: str, old: str, new: str, rotations: int = 3) -> Path:
    """schemas/retail.yaml with one text edit (which must apply), built with ``rotations`` rotations."""
    text = (SCHEMAS / "retail.yaml").read_text()
    assert old in text, f"{old!r} is not in schemas/retail.yaml"
    spec_path = tmp_path_factory.mktemp("spec") / f"{name}.yaml"
    spec_path.write_text(text.replace(old, new))
    out = tmp_path_factory.mktemp("packs") / name
    build_pack(spec_path, out, rotations=rotations)
    return out


def one_line_error(err: str, *named: str, prefixes: tuple[str, ...] = (ERROR_PREFIX,)) -> str:
    """The contract of every command for an error a user can fix, read from its stderr ``err``: one line, starting
    with the error prefix, naming each of ``named``, no traceback. Returns the line."""
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err[-3000:]
    assert len(lines) == 1 and lines[0].startswith(prefixes), err[-3000:]
    for word in named:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def refused_in_one_line(run, *named: str, prefixes: tuple[str, ...] = (ERROR_PREFIX,)) -> str:
    """:func:`one_line_error` of a finished command (a ``subprocess.CompletedProcess``) that exited 2."""
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr[-3000:])
    return one_line_error(run.stderr, *named, prefixes=prefixes)
