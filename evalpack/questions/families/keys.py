"""Questions across a declared key, answered by joining the two tables: how many child rows belong
to a parent that exists. The answer is the child table's rows less its declared orphans and NULL
keys, so an outer join, a missing join or a join on the wrong side each give a different count.
"""

from __future__ import annotations

from evalpack.data.plan import AnswerKey
from evalpack.questions.families.base import Draft, Drafts
from evalpack.questions.phrasing import Wording, Words
from evalpack.questions.sqltext import parse_sql
from evalpack.spec.model import Spec


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    """One question per declared relationship, with this rotation's answer."""
    out: Drafts = []
    for k in key.keys:
        child, parent = Words(spec.semantics, k.child_table), Words(spec.semantics, k.parent_table)
        out.append((Draft(
            f"fk_linked:{k.child_table}.{k.child_column}",
            Wording((f"How many {child.many} belong to a {parent.one} on record?",
                     f"Count the {child.many} whose {parent.one} can be found among the {parent.many} on record.",
                     f"How many {child.many} can be matched to an existing {parent.one}?")),
            parse_sql(f"SELECT COUNT(*) FROM {k.child_table} AS c JOIN {k.parent_table} AS p "
                  f"ON c.{k.child_column} = p.{k.parent_column}"),
            "integer", None, "fk_linked", ("relationship", k.child_table, k.parent_table),
            (k.child_table, k.parent_table)), k.child_rows - k.orphans - k.nulls))
    return out


