"""Question families beyond one aggregate over one table: each module yields drafts from a rotation's
answer key, listed once in ``FAMILIES`` (STYLE.md: a new family is one module and one line)."""

from evalpack.families import segments, trends

FAMILIES = (trends.drafts, segments.drafts)

__all__ = ["FAMILIES"]
