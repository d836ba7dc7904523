"""Resources: where specs and packs live, and the DuckDB connections verification uses.

Environment variables override the defaults (the repository's ``schemas/`` and ``packs/``), so one
deployment can point the same code at other folders without editing it:
``EVALPACK_SCHEMAS_DIR``, ``EVALPACK_PACKS_DIR``, ``EVALPACK_SIGNING_KEY``, ``EVALPACK_PUBLIC_KEY``.

The Hub release (``hub_release``, job ``publish_pack``) reads ``EVALPACK_HUB_REPO`` (OWNER/NAME, or a
template with ``{pack}``), ``HF_TOKEN``, ``HF_ENDPOINT`` and ``EVALPACK_HUB_PRIVATE``. The repo, token and
endpoint are ``EnvVar``s: the definitions and the run config hold the variable's name, and the value is
read in the run's process when the resource is built, so the token is never stored or shown. Dagster
refuses an ``EnvVar`` that is unset at run time, so a variable is wired only when it is set where the code
location loads; unset, the default applies (no repo: ``hub_release`` fails saying so; no token: the
huggingface_hub login; no endpoint: https://huggingface.co). Reload the code location after changing them.
"""

import os

from dagster import EnvVar
from dagster_duckdb import DuckDBResource

from assets.common import REPO, EvalpackResource
from assets.publish import HubResource

TRUE = {"1", "true", "yes", "on"}


def evalpack_resource() -> EvalpackResource:
    return EvalpackResource(
        schemas_dir=os.environ.get("EVALPACK_SCHEMAS_DIR", str(REPO / "schemas")),
        packs_dir=os.environ.get("EVALPACK_PACKS_DIR", str(REPO / "packs" / "dagster")),
        signing_key=os.environ.get("EVALPACK_SIGNING_KEY") or None,
        public_key=os.environ.get("EVALPACK_PUBLIC_KEY") or None,
    )


def env_var(name: str) -> EnvVar | None:
    """``EnvVar(name)`` when the variable is set (to anything but blanks), else None (the field's default)."""
    return EnvVar(name) if os.environ.get(name, "").strip() else None


def hub_resource() -> HubResource:
    return HubResource(
        repo=env_var("EVALPACK_HUB_REPO"),
        holdout_repo=env_var("EVALPACK_HUB_HOLDOUT_REPO"),
        token=env_var("HF_TOKEN"),
        endpoint=env_var("HF_ENDPOINT"),
        private=os.environ.get("EVALPACK_HUB_PRIVATE", "").strip().lower() in TRUE,
    )


def resources() -> dict[str, object]:
    # In-memory DuckDB: every connection is its own database, so parallel steps and runs never share a file.
    return {"evalpack": evalpack_resource(), "duckdb": DuckDBResource(database=":memory:"), "hub": hub_resource()}
