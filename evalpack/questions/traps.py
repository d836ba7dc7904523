"""How gold SQL reads a spec's traps, written once for every family: the rows that do not count are left out
wherever their table is read, and a coded column is compared by its codes and shown by its labels.

Families write their SQL as if no trap existed; :func:`read_traps` rewrites it. A table whose rows do not all count
gets the predicate of the rows that do (:func:`counted_predicate`) in the WHERE of each SELECT that reads it, or in
the ON of the LEFT JOIN that brings it in (so that a parent without counted rows still has its row); a coded
column's comparisons with labels become comparisons with codes, and where its value is shown or ordered the
label is computed from the code (a CASE over the code book)."""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from evalpack.questions.families.base import Draft
from evalpack.questions.phrasing import Wording
from evalpack.spec.model import Coded, NotCounted, Spec

TRAP_SKILL = "business_rule"  # the skill of a question whose answer reads through a trap
# questions about a table's records (its keys), which a careful reader could take to count every row: with rows
# that do not count, their wording says it leaves them out (one reading; blind reading of issue 53)
RECORD_KINDS = ("fk_orphans", "fk_nulls", "fk_linked", "parents_without")


def counted_wording(spec: Spec, draft: Draft) -> Draft:
    """``draft`` with one reading left where its table has rows that do not count and it asks about records."""
    trapped = [t for t in draft.tables if spec.traps.excluded(t)]
    if draft.kind not in RECORD_KINDS or not trapped:
        return draft
    tail = f" Leave out the {spec.semantics.table(trapped[0]).plural} that do not count."
    return replace(draft, wording=Wording(tuple(text + tail for text in draft.wording.phrasings)))


def trap_names(spec: Spec) -> tuple[str, ...]:
    """Each declared trap's name, as questions, the manifest and the card count them: ``not_counted:orders``,
    ``sibling:orders.gross_amount``, ``codes:orders.channel``."""
    traps = spec.traps
    return (*(f"not_counted:{t}" for t in dict.fromkeys(n.table for n in traps.not_counted)),
            *(f"sibling:{s.table}.{s.column}" for s in traps.siblings),
            *(f"codes:{c.table}.{c.column}" for c in traps.codes))


def touched_by(spec: Spec, tree: exp.Expression) -> tuple[str, ...]:
    """The traps a family's query (before :func:`read_traps`) reaches for: a table with rows that do not count that
    it reads, a column with a sibling or a coded column that it reads."""
    if not spec.traps:
        return ()
    tables = {t.name for t in tree.find_all(exp.Table)}
    columns = {(_owner(spec, c), c.name) for c in tree.find_all(exp.Column)}
    out = []
    for name in trap_names(spec):
        kind, _, target = name.partition(":")
        if kind == "not_counted":
            hit = target in tables
        elif kind == "sibling":
            sibling = spec.traps.sibling(*target.split("."))
            hit = (sibling.table, sibling.of) in columns
        else:  # a coded column the query reads, or the coded mark of rows that do not count in a table it reads
            table, column = target.split(".")
            hit = (table, column) in columns or any(n.column == column for n in spec.traps.excluded(table)
                                                    if table in tables)
        if hit:
            out.append(name)
    return tuple(out)


def counted_predicate(spec: Spec, trap: NotCounted, qualifier: str | None = None) -> exp.Expression:
    """The rows of ``trap.table`` that count: its marking column holds none of the trap's values."""
    column = exp.column(trap.column, table=qualifier)
    col = spec.table(trap.table).column(trap.column)
    if col.type == "boolean":
        return exp.Not(this=column)
    coded = spec.traps.coded(trap.table, trap.column)
    values = [exp.Literal.number(coded.code(v)) if coded else exp.Literal.string(v) for v in trap.values]
    if len(values) == 1:
        return exp.NEQ(this=column, expression=values[0])
    return exp.Not(this=exp.In(this=column, expressions=values))


def _sources(select: exp.Select) -> list[tuple[exp.Table, exp.Join | None]]:
    """The tables a SELECT reads directly: its FROM and each JOIN's table (subqueries read their own)."""
    out = []
    source = select.args.get("from_")
    if source is not None and isinstance(source.this, exp.Table):
        out.append((source.this, None))
    for join in select.args.get("joins") or ():
        if isinstance(join.this, exp.Table):
            out.append((join.this, join))
    return out


def _conjoined(condition: exp.Expression | None, predicate: exp.Expression) -> exp.Expression:
    """``condition AND predicate`` as one flat chain (``a AND b AND p``, not ``(a AND b) AND p``): the near-miss
    study reads a WHERE's conjuncts, and a parenthesised chain would hide them."""
    def conjuncts(e: exp.Expression) -> list[exp.Expression]:
        e = e.unnest()
        if isinstance(e, exp.And):
            return conjuncts(e.this) + conjuncts(e.expression)
        return [exp.paren(e, copy=False) if isinstance(e, exp.Connector) else e]

    return exp.and_(*(conjuncts(condition) if condition is not None else []), predicate, wrap=False)


def _exclude_uncounted(spec: Spec, select: exp.Select) -> None:
    sources = _sources(select)
    joined = len(sources) > 1 or bool(select.args.get("joins"))
    for table, join in sources:
        for trap in spec.traps.excluded(table.name):
            predicate = counted_predicate(spec, trap, table.alias_or_name if joined or table.alias else None)
            side = (join.side or "").upper() if join is not None else ""
            if join is not None and side == "LEFT":
                join.set("on", _conjoined(join.args.get("on"), predicate))
            elif side in ("", "INNER") and (join is None or (join.kind or "").upper() in ("", "INNER", "CROSS")):
                where = select.args.get("where")
                select.set("where", exp.Where(this=_conjoined(where.this if where else None, predicate)))
            else:
                raise NotImplementedError(f"a {side} JOIN of a table whose rows do not all count: {select.sql()}")


def _owner(spec: Spec, column: exp.Column) -> str | None:
    """The table a column reference reads, among the tables of its SELECT (by alias when qualified)."""
    select = column.find_ancestor(exp.Select)
    if select is None:
        return None
    for table, _ in _sources(select):
        if column.table and column.table != table.alias_or_name:
            continue
        spec_table = next((t for t in spec.tables if t.name == table.name), None)
        if spec_table is not None and spec_table.column(column.name) is not None:
            return table.name
    return None


def _label_of(coded: Coded, column: exp.Column) -> exp.Expression:
    case = exp.Case(this=column.copy())
    for label, code in coded.book:
        case = case.when(exp.Literal.number(code), exp.Literal.string(label))
    return case


def _by_codes(spec: Spec, tree: exp.Expression) -> None:
    for column in list(tree.find_all(exp.Column)):
        owner = _owner(spec, column)
        coded = spec.traps.coded(owner, column.name) if owner else None
        if coded is None:
            continue
        parent = column.parent
        if isinstance(parent, (exp.EQ, exp.NEQ)) and isinstance(other := (
                parent.expression if parent.this is column else parent.this), exp.Literal) and other.is_string:
            other.replace(exp.Literal.number(coded.code(other.this)))
        elif isinstance(parent, exp.In) and parent.this is column:
            for value in parent.expressions:
                if isinstance(value, exp.Literal) and value.is_string:
                    value.replace(exp.Literal.number(coded.code(value.this)))
        elif column.find_ancestor(exp.Group) is None:
            label = _label_of(coded, column)
            if isinstance(parent, exp.Select):  # a shown column keeps its name
                label = exp.alias_(label, column.name)
            column.replace(label)


def read_traps(spec: Spec, tree: exp.Expression) -> exp.Expression:
    """``tree`` (a family's gold SQL) as it reads ``spec``'s traps; the tree itself when there are none."""
    traps = spec.traps
    if not (traps.not_counted or traps.codes):
        return tree
    tree = tree.copy()
    for select in list(tree.find_all(exp.Select)):
        _exclude_uncounted(spec, select)
    if traps.codes:
        _by_codes(spec, tree)
    return tree
