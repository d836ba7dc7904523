"""Question families beyond one aggregate over one table: each module yields drafts from a rotation's
answer key, listed once in ``FAMILIES`` (STYLE.md: a new family is one module and one line)."""

from evalpack.questions.families import joins, keys, periods, rates, segment_trends, segments, trends, waterfalls

FAMILIES = (trends.drafts, periods.drafts, segments.drafts, segment_trends.drafts, rates.drafts, waterfalls.drafts,
            keys.drafts, joins.drafts)

__all__ = ["FAMILIES"]
