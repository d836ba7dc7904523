"""Same spec and seed, same bytes, across changes to the code: every file of five packs (the example specs, two test
specs and a Misata-format spec) has the SHA-256 recorded in ``tests/fixtures/pack_digests.json``.

A refactor that must not change what a pack holds (issue 51) keeps this test green as it is. A change that means to
change packs writes the digests again and says why in its commit:

    python tests/pack/test_pack_bytes.py          # rebuilds the five packs and rewrites tests/fixtures/pack_digests.json

The builds are reproducible by construction: ``SOURCE_DATE_EPOCH`` fixes the attestation's times and a fixed holdout
secret (``$EVALPACK_HOLDOUT_SECRET``) fixes the holdout's salts; everything else follows from the spec and its seed.
One thing is meant to differ per commit: the attestation names the git commit of evalpack that built the pack (and
its invocation id, with SOURCE_DATE_EPOCH set, is derived from it), so the attestation's digest here is that of its
statement with those two values removed; every other byte of it counts.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DIGESTS = ROOT / "tests" / "fixtures" / "pack_digests.json"
SPECS = {"retail": "schemas/retail.yaml", "finance": "schemas/finance.yaml", "cohorts": "tests/specs/cohorts.yaml",
         "shop_joins": "tests/specs/shop_joins.yaml", "retail_misata": "benchmarks/specs/retail_misata.yaml"}
EPOCH = "1767225600"  # 2026-01-01T00:00:00Z
SECRET = "0123456789abcdef" * 4 + "\n"  # a fixed holdout secret: only this test's packs are salted with it


def versions() -> dict[str, str]:
    """What the bytes depend on besides evalpack's code, the spec and its seed: the libraries that write the files
    (a pack records their versions) and SQLite's (an export's file header records it)."""
    import sqlite3
    from importlib.metadata import version

    return {**{name: version(name) for name in ("duckdb", "pyarrow", "sqlglot", "numpy")},
            "sqlite": sqlite3.sqlite_version, "python": ".".join(map(str, sys.version_info[:2]))}


def attestation_digest(path: Path) -> str:
    """The SHA-256 of an unsigned attestation's statement (canonical JSON) without the git commit of evalpack and the
    invocation id derived from it; every other field as written."""
    envelope = json.loads(path.read_text(encoding="utf-8"))
    assert not envelope.get("signatures"), "these packs are built unsigned"
    statement = json.loads(base64.b64decode(envelope["payload"]))
    predicate = statement["predicate"]
    deps = predicate["buildDefinition"]["resolvedDependencies"]
    predicate["buildDefinition"]["resolvedDependencies"] = [d for d in deps if "gitCommit" not in d.get("digest", {})]
    predicate["runDetails"]["metadata"].pop("invocationId")
    envelope["payload"] = json.dumps(statement, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(json.dumps(envelope, sort_keys=True).encode()).hexdigest()


def digests(pack: Path) -> dict[str, str]:
    """Every file of ``pack`` (POSIX path relative to it) and of its holdout answer key beside it (under
    ``holdout-key/``) with its SHA-256."""
    key = pack.with_name(pack.name + ".holdout-key")
    return {prefix + p.relative_to(folder).as_posix():
            attestation_digest(p) if p == pack / "attestation.intoto.json" else hashlib.sha256(p.read_bytes()).hexdigest()
            for prefix, folder in (("", pack), ("holdout-key/", key)) for p in sorted(folder.rglob("*"))
            if p.is_file()}


def build(name: str, where: Path) -> dict[str, str]:
    """The digests of the pack of ``SPECS[name]`` built into ``where`` as the CLI builds it, reproducibly."""
    from evalpack.cli import main

    pack = where / name
    assert main(["build", str(ROOT / SPECS[name]), "-o", str(pack), "--jobs", "1"]) == 0
    return digests(pack)


@pytest.fixture
def reproducible(tmp_path, monkeypatch) -> Path:
    secret = tmp_path / "holdout.secret"
    secret.write_text(SECRET, encoding="ascii")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    monkeypatch.setenv("EVALPACK_HOLDOUT_SECRET", str(secret))
    for variable in ("EVALPACK_SIGNING_KEY", "EVALPACK_POSTGRES_DSN"):
        monkeypatch.delenv(variable, raising=False)
    return tmp_path


@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_pack_holds_the_bytes_it_held(name, reproducible):
    recorded = json.loads(DIGESTS.read_text(encoding="utf-8"))
    assert recorded["versions"] == versions(), ("the libraries differ from those the digests were recorded with: "
                                                "run `python tests/pack/test_pack_bytes.py` on the code before the change "
                                                "and again after it")
    expected = recorded["packs"][name]
    got = build(name, reproducible)
    changed = sorted(f for f in set(expected) | set(got) if expected.get(f) != got.get(f))
    assert not changed, (f"{name}: {len(changed)} files differ from tests/fixtures/pack_digests.json "
                         f"(first: {changed[:5]}); if the change means to change packs, run "
                         "`python tests/pack/test_pack_bytes.py` and say why in the commit")


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        (where / "holdout.secret").write_text(SECRET, encoding="ascii")
        os.environ.update(SOURCE_DATE_EPOCH=EPOCH, EVALPACK_HOLDOUT_SECRET=str(where / "holdout.secret"))
        for variable in ("EVALPACK_SIGNING_KEY", "EVALPACK_POSTGRES_DSN"):
            os.environ.pop(variable, None)
        packs = {name: build(name, where) for name in sorted(SPECS)}
    DIGESTS.write_text(json.dumps({"versions": versions(), "packs": packs}, indent=1, sort_keys=True) + "\n",
                       encoding="utf-8")
    print(f"wrote {DIGESTS.relative_to(ROOT)}: {sum(map(len, packs.values()))} files of {len(packs)} packs",
          file=sys.stderr)


if __name__ == "__main__":
    main()
