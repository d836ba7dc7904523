"""Question families beyond one aggregate over one table: each module yields drafts from a rotation's
answer key, listed once in ``FAMILIES`` (STYLE.md: a new family is one module and one line)."""

from evalpack.questions.families import (
    curves,
    joins,
    key_counts,
    keys,
    ledgers,
    periods,
    rate_months,
    rates,
    segment_trends,
    segments,
    trends,
    waterfall_months,
    waterfalls,
)

# in the order their questions are derived (a question's id follows it): one aggregate over one table first
FAMILIES = (curves.drafts, rate_months.drafts, ledgers.drafts, waterfall_months.drafts, key_counts.drafts,
            trends.drafts, periods.drafts, segments.drafts, segment_trends.drafts, rates.drafts, waterfalls.drafts,
            keys.drafts, joins.drafts)

__all__ = ["FAMILIES"]
