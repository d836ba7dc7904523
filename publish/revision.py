"""A pack version on the Hub as one side of a comparison: ``hub:OWNER/NAME@REVISION`` fetched with
huggingface_hub (only its questions.jsonl and manifest.json), then read by the engine's
:func:`evalpack.pack.diff.load_side` like any pack folder. ``evalpack diff`` and the release gate use it."""

from __future__ import annotations

import re
from pathlib import Path

from evalpack.core.errors import EvalpackError
from evalpack.core.layout import MANIFEST, QUESTIONS
from evalpack.pack.diff import PackSide, load_side

HUB_PREFIX = "hub:"
HUB_SOURCE = re.compile(r"hub:([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(.+))?")


def download(source: str, endpoint: str | None = None, token: str | None = None) -> Path:
    """The local folder of ``hub:OWNER/NAME@REVISION`` with its questions and manifest (revision default main)."""
    match = HUB_SOURCE.fullmatch(source)
    if match is None:
        raise EvalpackError(f"{source}: not a Hub revision; write hub:OWNER/NAME@REVISION, e.g. "
                            "hub:owner/retail-evalpack@v1.0.0")
    repo_id, revision = match.group(1), match.group(2) or "main"
    from huggingface_hub import snapshot_download

    try:
        local = snapshot_download(repo_id, repo_type="dataset", revision=revision,
                                  allow_patterns=[QUESTIONS, MANIFEST], endpoint=endpoint, token=token)
    except (OSError, ValueError) as exc:  # HTTP and connection errors are OSErrors in huggingface_hub
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise EvalpackError(f"{source}: cannot download {repo_id} at {revision} from the Hub ({first}); check "
                            "the repo, the revision, HF_ENDPOINT and HF_TOKEN") from None
    return Path(local)


def fetch_side(source: str | Path, *, endpoint: str | None = None, token: str | None = None) -> PackSide:
    """One side of a comparison: a pack folder, or a Hub revision ``hub:OWNER/NAME@REVISION`` (by default
    from HF_ENDPOINT with HF_TOKEN or the login)."""
    text = str(source)
    if text.startswith(HUB_PREFIX):
        return load_side(download(text, endpoint, token), source=text)
    return load_side(source)
