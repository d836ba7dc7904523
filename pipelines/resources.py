"""Resources: where specs and packs live, and the DuckDB connections verification uses.

Environment variables override the defaults (the repository's ``schemas/`` and ``packs/``), so one
deployment can point the same code at other folders without editing it:
``EVALPACK_SCHEMAS_DIR``, ``EVALPACK_PACKS_DIR``, ``EVALPACK_SIGNING_KEY``, ``EVALPACK_PUBLIC_KEY``.
"""

import os

from dagster_duckdb import DuckDBResource

from assets.common import REPO, EvalpackResource


def evalpack_resource() -> EvalpackResource:
    return EvalpackResource(
        schemas_dir=os.environ.get("EVALPACK_SCHEMAS_DIR", str(REPO / "schemas")),
        packs_dir=os.environ.get("EVALPACK_PACKS_DIR", str(REPO / "packs")),
        signing_key=os.environ.get("EVALPACK_SIGNING_KEY") or None,
        public_key=os.environ.get("EVALPACK_PUBLIC_KEY") or None,
    )


def resources() -> dict[str, object]:
    # In-memory DuckDB: every connection is its own database, so parallel steps and runs never share a file.
    return {"evalpack": evalpack_resource(), "duckdb": DuckDBResource(database=":memory:")}
