"""Attestation of a pack (issue 6 builds this out: DSSE envelope, in-toto Statement, signing).

Placeholder while the attestation is being written: the build calls these two functions.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def write_attestation(pack: Path, spec, *, started: dt.datetime, finished: dt.datetime,
                      signing_key: str | Path | None = None) -> None:
    """Not written yet: issue 6."""
    return
