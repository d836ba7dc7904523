"""Questions of a relationship's keys: its orphan rows and its rows without a parent key."""

from __future__ import annotations

from sqlglot import exp

from evalpack.data.plan import AnswerKey
from evalpack.questions import phrasing
from evalpack.questions.families.base import (
    Draft,
    Drafts,
    count_star,
    select_from,
)
from evalpack.spec.model import Spec


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    out: Drafts = []
    sem = spec.semantics
    for k in key.keys:
        child = exp.column(k.child_column, table="c")
        parent = exp.column(k.parent_column, table="p")
        orphan_sql = (exp.select(count_star()).from_(exp.alias_(exp.to_table(k.child_table), "c", table=True))
                      .join(exp.alias_(exp.to_table(k.parent_table), "p", table=True),
                            on=exp.EQ(this=child, expression=parent), join_type="left")
                      .where(exp.and_(exp.Not(this=exp.Is(this=child.copy(), expression=exp.Null())),
                                      exp.Is(this=parent.copy(), expression=exp.Null()))))
        tag = ("relationship", k.child_table, k.parent_table)
        child, parent = phrasing.Words(sem, k.child_table), phrasing.Words(sem, k.parent_table)
        out.append((Draft(f"fk_orphans:{k.child_table}.{k.child_column}",
                   phrasing.fk_orphans(child, parent),
                   orphan_sql, "integer", None, "fk_orphans", tag + ("orphans",), (k.child_table, k.parent_table)),
            k.orphans))
        out.append((Draft(f"fk_nulls:{k.child_table}.{k.child_column}",
                   phrasing.fk_nulls(child, parent),
                   select_from(count_star(), k.child_table, exp.Is(this=exp.column(k.child_column), expression=exp.Null())),
                   "integer", None, "fk_nulls", tag, (k.child_table,)), k.nulls))
    return out
