"""The near-miss operators: each one plausible mistake, made by editing one node of a gold SQL's sqlglot tree.

An operator is a function of a node and the gold SQL's facts (:class:`Gold`) that returns the node's edited copies;
:data:`REGISTRY` lists every operator with the node types it edits, in the order the study makes their mutants, and
:func:`mutants_of` runs them all. Each construct has one owner: ``agg_swap`` leaves COUNT(col) of a LEFT JOINed table
to ``count_star_outer``, ``order_flip`` leaves a window's ORDER BY to ``window_order_flip``, the four bound operators
leave HAVING to ``having_bound``, and ``constant_shift`` leaves a LAG/LEAD offset to ``lag_offset`` (as it leaves
ROUND digits to ``whole_units`` and LIMIT to ``limit_shift``). Adding an operator: its function here, its entry in
:data:`REGISTRY`, its fixture in ``tests/fixtures/nearmiss/`` (what it makes of real gold SQL) and its line in the
study's description of the operators.
"""

import datetime as dt
import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from decimal import Decimal, InvalidOperation

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

from evalpack.questions.derive import DIALECT, Question, lean, parse_gold
from evalpack.questions.traps import counted_predicate

# one dialect object for the thousands of mutants printed: naming the dialect made a new one for every print
PRINTER = Dialect.get_or_raise(DIALECT)


# --------------------------------------------------------------------------- column types


class _Columns:
    """Column -> DuckDB type per table (money swaps only with money of the same scale), and the
    alias -> table map of one query."""

    def __init__(self, types: dict[str, dict[str, str]], tree: exp.Expression) -> None:
        self.types = {t: {c: v.upper() for c, v in cols.items()} for t, cols in types.items()}
        self.alias = {}
        self.default = None
        for table in tree.find_all(exp.Table):
            self.alias[table.alias_or_name] = table.name
            self.default = self.default or table.name

    def table_of(self, col: exp.Column) -> str | None:
        return self.alias.get(col.table) if col.table else self.default

    def type_of(self, col: exp.Column) -> str | None:
        table = self.table_of(col)
        return self.types.get(table, {}).get(col.name) if table else None

    def same_type(self, col: exp.Column) -> list[str]:
        table, typ = self.table_of(col), self.type_of(col)
        if typ is None:
            return []
        return [c for c, t in self.types[table].items() if t == typ and c != col.name]


# --------------------------------------------------------------------------- operators


def _edits(tree: exp.Expression, kind: type | tuple, edit: Callable[[exp.Expression], list[exp.Expression]]
           ) -> Iterator[exp.Expression]:
    """One mutant per (matching node, replacement): each on a fresh copy of the tree, so the
    edit sees the node in place (with its parents) and may reuse its children.

    An edit that offers nothing leaves its node alone, so the copy it looked at serves the next
    node: most nodes of a kind offer nothing, and copying the tree is most of an operator's cost."""
    count = sum(1 for _ in tree.find_all(kind))
    scratch = None
    for index in range(count):
        if scratch is None:
            scratch = tree.copy()
        target = _nth(scratch, kind, index)
        options = edit(target)
        for option in range(len(options)):
            if option:
                scratch = tree.copy()
                target = _nth(scratch, kind, index)
                options = edit(target)
            replacement = options[option]
            if target is scratch:
                yield replacement
            else:
                target.replace(replacement)
                yield scratch
            scratch = None


def _nth(tree: exp.Expression, kind: type | tuple, index: int) -> exp.Expression:
    return next(node for i, node in enumerate(tree.find_all(kind)) if i == index)


def _date_literal(node: exp.Expression) -> tuple[dt.date, str] | None:
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        target = node.to.this
        text = node.this.this
        try:
            if target == exp.DataType.Type.DATE:
                return dt.date.fromisoformat(text), "date"
            if target in exp.DataType.TEMPORAL_TYPES:
                return dt.date.fromisoformat(text[:10]), text[10:]
        except ValueError:
            return None
    return None


def _shift_date(node: exp.Expression) -> list[exp.Expression]:
    parsed = _date_literal(node)
    if not parsed:
        return []
    day, rest = parsed
    out = []
    for delta in (-1, 1):
        moved = (day + dt.timedelta(days=delta)).isoformat()
        new = node.copy()
        new.this.set("this", moved if rest == "date" else moved + rest)
        out.append(new)
    return out


def _is_round_digits(lit: exp.Literal) -> bool:
    parent = lit.parent
    return isinstance(parent, exp.Round) and parent.args.get("decimals") is lit


def _is_limit(lit: exp.Literal) -> bool:
    return isinstance(lit.parent, (exp.Limit, exp.Offset))


def _is_lag_offset(lit: exp.Literal) -> bool:
    parent = lit.parent
    return isinstance(parent, (exp.Lag, exp.Lead)) and parent.args.get("offset") is lit


def _numeric_shift(lit: exp.Literal) -> list[exp.Expression]:
    if lit.is_string or _is_round_digits(lit) or _is_limit(lit) or _is_lag_offset(lit):
        return []
    text = lit.this
    try:
        if "." in text:
            scale = len(text.split(".")[1])
            return [exp.Literal.number(f"{Decimal(text) + d:.{scale}f}") for d in (-1, 1)]
        return [exp.Literal.number(str(int(text) + d)) for d in (-1, 1)]
    except ValueError:
        return []


AGGREGATES = (exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Count, exp.CountIf)
AGG_SWAPS = {exp.Sum: exp.Avg, exp.Avg: exp.Sum, exp.Min: exp.Max, exp.Max: exp.Min}
RUNNING = (exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Count)  # aggregates that an ordered window makes running
RANKINGS = (exp.RowNumber, exp.Rank, exp.DenseRank)


def _in_having(node: exp.Expression) -> bool:
    """Whether ``node`` is in the HAVING of its own query (not of an enclosing one)."""
    return isinstance(node.find_ancestor(exp.Having, exp.Query), exp.Having)


def _in_window_order(node: exp.Ordered) -> bool:
    """Whether ``node`` is a sort key of a window's ORDER BY (``OVER (... ORDER BY node)``)."""
    return isinstance(node.parent, exp.Order) and isinstance(node.parent.parent, exp.Window)


def _is_number(node: exp.Expression, value: int) -> bool:
    if not isinstance(node, exp.Literal) or node.is_string:
        return False
    try:
        return Decimal(node.this) == value
    except InvalidOperation:
        return False


def _fractional_cast(node: exp.Expression) -> bool:
    """A CAST (or ::) to a fractional type: DOUBLE, FLOAT, DECIMAL and their kin."""
    return isinstance(node, exp.Cast) and node.to.is_type(*exp.DataType.REAL_TYPES)


@functools.lru_cache(maxsize=256)
def _integer_type(name: str) -> bool:
    try:
        return exp.DataType.build(name, dialect=DIALECT).is_type(*exp.DataType.INTEGER_TYPES)
    except Exception:  # a type sqlglot does not parse is not known to be an integer
        return False


def _projection(select: exp.Expression, name: str) -> exp.Expression | None:
    """What the output column ``name`` of a SELECT is computed from."""
    if not isinstance(select, exp.Select):
        return None
    for p in select.expressions:
        if p.alias_or_name == name:
            return p.unalias()
    return None


def _integer_typed(node: exp.Expression, types: dict[str, dict[str, str]], depth: int = 0) -> bool:
    """Whether ``node`` (in its tree) surely has an integer type: DuckDB's ``//`` truncates only an
    integer divided by an integer (on DECIMAL or DOUBLE it is ``/``). Columns resolve through the
    declared ``types`` and through CTEs and subqueries to the expressions that compute them; anything
    not known to be an integer is not."""
    if depth > 32:
        return False
    node = node.unnest()
    if isinstance(node, exp.Literal):
        return not node.is_string and node.this.isdigit()
    if isinstance(node, (exp.Count, exp.CountIf, exp.RowNumber, exp.Rank, exp.DenseRank)):
        return True
    if isinstance(node, exp.Cast):
        return node.to.is_type(*exp.DataType.INTEGER_TYPES)
    if isinstance(node, exp.Distinct):
        return len(node.expressions) == 1 and _integer_typed(node.expressions[0], types, depth + 1)
    if isinstance(node, (exp.Sum, exp.Min, exp.Max, exp.Lag, exp.Lead, exp.Window, exp.Filter, exp.Neg, exp.Abs)):
        return node.this is not None and _integer_typed(node.this, types, depth + 1)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.IntDiv, exp.Mod)):
        return _integer_typed(node.this, types, depth + 1) and _integer_typed(node.expression, types, depth + 1)
    if isinstance(node, exp.Subquery):
        query = node.this
        return isinstance(query, exp.Select) and len(query.expressions) == 1 \
            and _integer_typed(query.expressions[0].unalias(), types, depth + 1)
    if not isinstance(node, exp.Column):
        return False
    select = node.find_ancestor(exp.Select)
    if select is None:
        return False
    source = select.args.get("from_") or select.args.get("from")
    sources = ([source.this] if source else []) + [j.this for j in select.args.get("joins") or []]
    ctes = {cte.alias_or_name: cte.this for cte in node.root().find_all(exp.CTE)}
    for src in sources:
        if node.table and node.table != src.alias_or_name:
            continue
        if isinstance(src, exp.Subquery):
            computed = _projection(src.this, node.name)
        elif isinstance(src, exp.Table) and src.name in ctes:
            computed = _projection(ctes[src.name], node.name)
        elif isinstance(src, exp.Table) and node.name in types.get(src.name, {}):
            return _integer_type(types[src.name][node.name])
        else:
            continue
        if computed is not None:
            return _integer_typed(computed, types, depth + 1)
    return False


def _running(window: exp.Window) -> bool:
    """Whether ``window`` (ordered) frames each row from its partition's start up to it: no frame
    (the default, RANGE from UNBOUNDED PRECEDING to CURRENT ROW) or such an explicit one."""
    spec = window.args.get("spec")
    if spec is None:
        return True
    start = str(spec.args.get("start") or "").upper()
    end = str(spec.args.get("end") or "CURRENT ROW").upper()
    return start == "UNBOUNDED" and str(spec.args.get("start_side") or "").upper() == "PRECEDING" \
        and end == "CURRENT ROW"


def _reads_only_last(window: exp.Window) -> bool:
    """Whether the query keeps, of the rows ``window`` is computed over, only the last one in the
    window's order: its own SELECT, or one reading it (from its CTE or FROM subquery) with no
    filter, is ORDER BY the window's keys reversed LIMIT 1. A running aggregate's value there is
    its whole partition's: dropping the window's ORDER BY gives the same answer."""
    select = window.find_ancestor(exp.Select)
    if select is None or not _running(window):
        return False
    keys = [(k.this, bool(k.args.get("desc"))) for k in window.args["order"].expressions]
    readers = [(select, True)]
    holder = select.parent
    if isinstance(holder, exp.CTE):
        for other in select.root().find_all(exp.Select):
            source = other.args.get("from_") or other.args.get("from")
            if source and isinstance(source.this, exp.Table) and source.this.name == holder.alias_or_name \
                    and not other.args.get("joins"):
                readers.append((other, False))
    elif isinstance(holder, exp.Subquery) and isinstance(holder.parent, exp.From):
        readers.append((holder.parent.parent, False))
    for reader, own in readers:
        limit = reader.args.get("limit")
        order = reader.args.get("order")
        if not (isinstance(limit, exp.Limit) and _is_number(limit.expression, 1) and order) \
                or len(order.expressions) != len(keys):
            continue
        if not own and any(reader.args.get(k) for k in ("where", "group", "having", "qualify", "distinct")):
            continue
        matched = True
        for ordered, (key, desc) in zip(order.expressions, keys):
            if bool(ordered.args.get("desc")) == desc:
                matched = False
            elif own:
                matched = matched and ordered.this == key
            else:  # the reader sees the window's key through the output column of the same name
                exposed = _projection(select, key.name) if isinstance(key, exp.Column) else None
                matched = matched and exposed == key and isinstance(ordered.this, exp.Column) \
                    and ordered.this.name == key.name
        if matched:
            return True
    return False


def _operand(node: exp.Expression, right: bool) -> exp.Expression:
    """``node`` as the left or right operand of a division: parenthesised unless it binds tightly
    enough (a product or quotient only on the left: division is left-associative)."""
    if isinstance(node, (exp.Column, exp.Literal, exp.Func, exp.Paren, exp.Cast, exp.Filter, exp.Window,
                         exp.Subquery)):
        return node
    if not right and isinstance(node, (exp.Mul, exp.Div, exp.IntDiv, exp.Mod)):
        return node
    return exp.Paren(this=node)


def _conjuncts(cond: exp.Expression | None) -> list[exp.Expression]:
    """The top-level AND terms of ``cond`` (none for None), each without its parentheses."""
    if cond is None:
        return []
    return [term.unnest() for term in (cond.unnest().flatten() if isinstance(cond.unnest(), exp.And) else [cond])]


def _column_of(node: exp.Expression | None, alias: str) -> bool:
    """Whether ``node``, unwrapped of parentheses and casts, is a column of the table aliased ``alias``."""
    while isinstance(node, (exp.Paren, exp.Cast)):
        node = node.this
    return isinstance(node, exp.Column) and node.table == alias


def _key_pairs(on: exp.Expression | None, alias: str) -> list[tuple[exp.Column, exp.Column]] | None:
    """(column of ``alias``, the other table's column it equals) for each term of a join condition made
    only of such equalities between ``alias`` and one other table; None for any other condition."""
    pairs = []
    for term in _conjuncts(on):
        if not (isinstance(term, exp.EQ) and isinstance(term.this, exp.Column)
                and isinstance(term.expression, exp.Column)):
            return None
        own, other = (term.this, term.expression) if term.this.table == alias else (term.expression, term.this)
        if own.table != alias or other.table in ("", alias):
            return None
        pairs.append((own, other))
    return pairs if pairs and len({other.table for _, other in pairs}) == 1 else None


def _joined(select: exp.Expression | None) -> dict[str, exp.Join]:
    """The joins of ``select`` (a SELECT, else none), by the alias of the table each adds."""
    if not isinstance(select, exp.Select):
        return {}
    return {j.alias_or_name: j for j in select.args.get("joins") or []}


def _inner(join: exp.Join) -> bool:
    return not join.side and join.kind in ("", "INNER") and join.args.get("on") is not None


def _null_extended(node: exp.Expression) -> set[str]:
    """The aliases of the tables a LEFT JOIN adds to ``node``'s own SELECT: NULL in the rows they do not match."""
    return {alias for alias, j in _joined(node.find_ancestor(exp.Select)).items() if j.side == "LEFT"}


NULL_REJECTING = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike, exp.In, exp.Between)


def _rejects_null(term: exp.Expression, alias: str) -> bool:
    """Whether ``term`` is false or unknown when the columns of ``alias`` are NULL: a comparison (or
    ``NOT ... IS NULL``) of one of them."""
    if isinstance(term, exp.Not) and isinstance(term.this.unnest(), exp.Is):
        return _column_of(term.this.unnest().this, alias)
    return isinstance(term, NULL_REJECTING) and (_column_of(term.this, alias) or _column_of(term.expression, alias))


def _argument(agg: exp.Expression) -> exp.Expression | None:
    """What an aggregate reads: the x of SUM(x) or COUNT(DISTINCT x); None for COUNT(*)."""
    arg = agg.this
    if isinstance(arg, exp.Distinct):
        return arg.expressions[0] if len(arg.expressions) == 1 else None
    return None if isinstance(arg, exp.Star) else arg


def _unmatched_ignored(join: exp.Join, unique: Mapping[str, set[str]]) -> bool:
    """Whether the rows ``join`` made LEFT would add (the other tables' rows that match none of its
    table's, NULL in each of its columns) change nothing in its query: a WHERE term or a later inner
    join's condition rejects them; or the query aggregates without GROUP BY and every aggregate reads
    a column of the joined table (aggregates skip NULLs); or it groups by a unique column of its one
    other table, so that each such row is a group of its own, and its HAVING asks for more rows of the
    joined table than such a group holds (COUNT(*) >= 2 and the like)."""
    select, alias = join.parent, join.alias_or_name
    if not isinstance(select, exp.Select):
        return True
    where = select.args.get("where")
    if any(_rejects_null(term, alias) for term in _conjuncts(where.this if where else None)):
        return True
    joins = select.args.get("joins") or []
    later = joins[joins.index(join) + 1:]
    if any(_inner(j) and any(_rejects_null(term, alias) for term in _conjuncts(j.args["on"])) for j in later):
        return True
    group = select.args.get("group")
    aggregates = [a for p in select.expressions for a in p.find_all(AGGREGATES)]
    if group is None and aggregates and all(_column_of(_argument(a), alias) for a in aggregates):
        return True
    source = select.args.get("from_") or select.args.get("from")
    having = select.args.get("having")
    if group is None or having is None or len(joins) != 1 or not isinstance(source.this, exp.Table):
        return False
    keys = unique.get(source.this.name, set())
    if not any(isinstance(g, exp.Column) and g.table in ("", source.this.alias_or_name) and g.name in keys
               for g in group.expressions):
        return False
    for term in _conjuncts(having.this):
        if isinstance(term, (exp.GTE, exp.GT)) and isinstance(term.this, exp.Count) \
                and isinstance(term.expression, exp.Literal) and not term.expression.is_string:
            counted = term.this.this
            rows = 1 if isinstance(counted, exp.Star) else 0 if _column_of(counted, alias) else None
            bar = Decimal(term.expression.this)
            if rows is not None and not (rows >= bar if isinstance(term, exp.GTE) else rows > bar):
                return True
    return False


def _without_table(select: exp.Select, index: int, types: dict[str, dict[str, str]],
                   unique: Mapping[str, set[str]]) -> exp.Select | None:
    """``select`` without its ``index``-th table (0: the FROM one, then its joins in order) and the
    inner join that links it, when that join only checks that a row of the other table has a parent
    there: the join equates a unique column of the dropped table with the other table's columns, and the
    rest of the query reads no column of the dropped table but those, each read from the column it equals
    (under its own name where it is an output column)."""
    joins = select.args["joins"]
    source = select.args.get("from_") or select.args.get("from")
    dropped = source.this if index == 0 else joins[index - 1].this
    link = joins[0] if index == 0 else joins[index - 1]
    alias = dropped.alias_or_name
    pairs = _key_pairs(link.args.get("on"), alias) if _inner(link) and isinstance(dropped, exp.Table) else None
    if not pairs or not any(own.name in unique.get(dropped.name, ()) for own, _ in pairs):
        return None
    equal = {own.name: other for own, other in pairs}
    new = select.copy()
    kept = new.args["joins"]
    if index == 0:
        new.set("from_", exp.From(this=kept[0].this.copy()))
        kept = kept[1:]
    else:
        kept = kept[:index - 1] + kept[index:]
    new.set("joins", kept or None)
    if any(t.alias_or_name == alias for t in new.find_all(exp.Table)):
        return None  # a subquery names another table so: its columns are not the dropped table's
    for col in list(new.find_all(exp.Column)):
        if col.table == alias and col.name in equal:
            other = equal[col.name].copy()
            # a bare output column keeps its name, which an enclosing query may read
            col.replace(exp.alias_(other, col.name) if col.parent is new and other.name != col.name else other)
        elif col.table == alias or (not col.table and col.name in types.get(dropped.name, {})):
            return None
    return new



# --------------------------------------------------------------------------- the operators
# Each operator is one function: given a node of the gold SQL's tree that it edits (:attr:`Operator.nodes`) and the
# gold SQL's facts (:class:`Gold`), the edited copies of that node, each one plausible mistake (none when the
# mistake does not apply there). :data:`REGISTRY` lists them in the order the study makes their mutants.


@dataclass(frozen=True)
class Gold:
    """What an operator may read of one gold SQL: its tree, its columns' types, and which columns of the spec can
    hold NULL (COUNT(*) -> COUNT(col) and NOT EXISTS -> NOT IN are mistakes only there) or hold no value twice (a
    join on one finds at most one row, the parent, which ``join_dropped`` drops)."""

    tree: exp.Expression
    cols: _Columns
    types: dict[str, dict[str, str]]
    nullable: dict[str, set[str]]
    unique: dict[str, set[str]]
    traps: dict = dataclass_field(default_factory=dict)  # :func:`trap_facts` of the spec


@dataclass(frozen=True)
class Operator:
    """A near-miss operator: its name (the study's and the manifest's), the node types it edits and its edit."""

    name: str
    nodes: type | tuple[type, ...]
    edit: Callable[[exp.Expression, Gold], list[exp.Expression]]


def trap_facts(spec) -> dict:
    """What the trap operators read of a spec's traps, as JSON-able data (the study's cache key holds it): each
    table's sibling of each column, the predicates of the rows that count (unqualified, printed) and each coded
    column's codes."""
    traps = spec.traps
    siblings: dict[str, dict[str, str]] = {}
    for s in traps.siblings:
        siblings.setdefault(s.table, {})[s.of] = s.column
    codes: dict[str, dict[str, list[int]]] = {}
    for c in traps.codes:
        codes.setdefault(c.table, {})[c.column] = [code for _, code in c.book]
    counted = sorted(counted_predicate(spec, nc).sql(dialect=PRINTER) for nc in traps.not_counted)
    return {"siblings": siblings, "counted": counted, "codes": codes} if traps else {}


def _unqualified(node: exp.Expression) -> str:
    bare = node.copy()
    for col in bare.find_all(exp.Column):
        col.set("table", None)
    return bare.sql(dialect=PRINTER)


def sibling_swap(n: exp.Expression, g: Gold) -> list[exp.Expression]:
    """The whole query with a column read as its sibling trap wherever it reads it (the gross amount for the net
    one, the ship date for the order date): one mutant per column that has a sibling. Edits the root only."""
    siblings = g.traps.get("siblings")
    if n.parent is not None or not siblings:
        return []
    found = dict.fromkeys((table, col.name) for col in n.find_all(exp.Column)
                          if (table := g.cols.table_of(col)) and col.name in siblings.get(table, {}))
    out_ = []
    for table, name in found:
        new = n.copy()
        for col in new.find_all(exp.Column):
            if col.name == name and g.cols.table_of(col) == table:
                col.set("this", exp.to_identifier(siblings[table][name]))
        out_.append(new)
    return out_


def _counts_rows(node: exp.Expression, g: Gold) -> bool:
    return bool(g.traps.get("counted")) and _unqualified(node) in g.traps["counted"]


def exclusion_dropped(n: exp.Expression, g: Gold) -> list[exp.Expression]:
    """The predicate of the rows that count (cancelled and test orders left out) dropped: every row counts."""
    if isinstance(n, exp.Where):
        return [None] if _counts_rows(n.this, g) else []
    return [n.args[keep].copy() for drop_, keep in (("this", "expression"), ("expression", "this"))
            if _counts_rows(n.args[drop_], g)]


def code_misread(n: exp.Expression, g: Gold) -> list[exp.Expression]:
    """A coded column compared with a code -> with each other code of its book (the app channel read as 3)."""
    column = n.this
    if not isinstance(column, exp.Column) or not g.traps.get("codes"):
        return []
    codes = g.traps["codes"].get(g.cols.table_of(column) or "", {}).get(column.name)
    if not codes:
        return []
    literals = n.expressions if isinstance(n, exp.In) else [n.expression]
    out_ = []
    for i, lit in enumerate(literals):
        if not (isinstance(lit, exp.Literal) and not lit.is_string and lit.this.isdigit()):
            continue
        for other in codes:
            if other != int(lit.this):
                new = n.copy()
                (new.expressions if isinstance(n, exp.In) else [new.expression])[i].replace(exp.Literal.number(other))
                out_.append(new)
    return out_


def inclusive_end(n: exp.LT, g: Gold) -> list[exp.Expression]:
    """``<`` -> ``<=`` (the bound operators leave HAVING's comparisons to ``having_bound``)."""
    return [] if _in_having(n) else [exp.LTE(this=n.this, expression=n.expression)]


def exclusive_start(n: exp.GTE, g: Gold) -> list[exp.Expression]:
    return [] if _in_having(n) else [exp.GT(this=n.this, expression=n.expression)]


def inclusive_start(n: exp.GT, g: Gold) -> list[exp.Expression]:
    return [] if _in_having(n) else [exp.GTE(this=n.this, expression=n.expression)]


def exclusive_end(n: exp.LTE, g: Gold) -> list[exp.Expression]:
    return [] if _in_having(n) else [exp.LT(this=n.this, expression=n.expression)]


def _later_bound(n: exp.Expression, g: Gold) -> bool:
    """``n`` is the DATE literal of ``date_col >= d`` or ``date_col < d`` outside HAVING: one day later
    it selects what ``> d`` or ``<= d`` do, the bound operators' mutant."""
    parent = n.parent
    return isinstance(parent, (exp.GTE, exp.LT)) and parent.expression is n and not _in_having(parent) \
        and isinstance(parent.this, exp.Column) and g.cols.type_of(parent.this) == "DATE" \
        and (_date_literal(n) or (None, ""))[1] == "date"


def date_shift(n: exp.Expression, g: Gold) -> list[exp.Expression]:
    options = _shift_date(n)
    return options[:1] if options and _later_bound(n, g) else options


def date_shift_as_bound(n: exp.Expression, g: Gold) -> list[exp.Expression]:
    """A date bound shifted by a day, written as the bound it equals (``>= d + 1`` as ``> d``), so that the study
    counts it as equivalent to the bound operators' mutant instead of running it twice."""
    if not _later_bound(n.expression, g):
        return []
    return [(exp.GT if isinstance(n, exp.GTE) else exp.LTE)(this=n.this, expression=n.expression)]


def whole_units(n: exp.Round, g: Gold) -> list[exp.Expression]:
    digits = n.args.get("decimals")
    if isinstance(digits, exp.Literal) and digits.this not in ("0",):
        return [exp.Round(this=n.this, decimals=exp.Literal.number(0))]
    return []


def agg_swap(n: exp.Expression, g: Gold) -> list[exp.Expression]:
    if type(n) in AGG_SWAPS:
        return [AGG_SWAPS[type(n)](this=n.this)]
    if isinstance(n, exp.Count):
        if isinstance(n.this, exp.Star):
            return [exp.Count(this=exp.column(c)) for c in sorted(g.nullable.get(g.cols.default, ()))]
        if isinstance(n.this, exp.Column) and n.this.table not in _null_extended(n):  # else count_star_outer's
            return [exp.Count(this=exp.Star())]
    return []


def distinct(n: exp.Expression, g: Gold) -> list[exp.Expression]:
    inner = n.this
    if isinstance(n.parent, exp.Window):
        return []  # DISTINCT in a window aggregate: PostgreSQL, SQLite and SQL Server refuse it, no one writes it
    if isinstance(inner, exp.Distinct):
        return [type(n)(this=inner.expressions[0])]
    if isinstance(inner, exp.Star):
        return []
    return [type(n)(this=exp.Distinct(expressions=[inner]))]


def inner_join(n: exp.Join, g: Gold) -> list[exp.Expression]:
    if n.side == "LEFT":
        new = n.copy()
        new.set("side", None)
        return [new]
    return []


def join_key(n: exp.Join, g: Gold) -> list[exp.Expression]:
    on = n.args.get("on")
    if not isinstance(on, exp.EQ):
        return []
    out_ = []
    for side in ("this", "expression"):
        col = on.args[side]
        if isinstance(col, exp.Column):
            for other in g.cols.same_type(col):
                new = n.copy()
                new.args["on"].set(side, exp.column(other, table=col.table or None))
                out_.append(new)
    return out_


def outer_join(n: exp.Join, g: Gold) -> list[exp.Expression]:
    """An inner join made LEFT, unless the rows it adds change nothing (:func:`_unmatched_ignored`)."""
    if not _inner(n) or _unmatched_ignored(n, g.unique):
        return []
    new = n.copy()
    new.set("side", "LEFT")
    new.set("kind", None)
    return [new]


def anti_join_side(n: exp.Is, g: Gold) -> list[exp.Expression]:
    """``x.col IS NULL`` in the WHERE of a query that LEFT JOINs x, col a join column or unique key of x
    (an anti-join) -> the other side's join column IS NULL: the wrong table's key tested for a missing match."""
    col = n.this
    if isinstance(n.parent, exp.Not) or not isinstance(col, exp.Column) or not isinstance(n.expression, exp.Null) \
            or not isinstance(n.find_ancestor(exp.Where, exp.Query), exp.Where):
        return []
    join = _joined(n.find_ancestor(exp.Select)).get(col.table)
    pairs = _key_pairs(join.args.get("on"), col.table) if join is not None and join.side == "LEFT" else None
    if not pairs or not (col.name in g.unique.get(g.cols.alias.get(col.table, ""), ())
                         or any(own.name == col.name for own, _ in pairs)):
        return []
    other = next((o for own, o in pairs if own.name == col.name), pairs[0][1])
    return [exp.Is(this=other.copy(), expression=exp.Null())]


def not_in(n: exp.Not, g: Gold) -> list[exp.Expression]:
    """NOT EXISTS (SELECT ... FROM t WHERE t.k = outer.k [AND rest]) -> outer.k NOT IN (SELECT t.k FROM t
    [WHERE rest]), where either key can be NULL: one NULL t.k makes NOT IN reject every row, and a NULL
    outer.k is rejected where NOT EXISTS keeps it."""
    sub = n.this.this if isinstance(n.this, exp.Exists) else None
    if not isinstance(sub, exp.Select) or sub.args.get("where") is None:
        return []
    own = {t.alias_or_name for t in sub.find_all(exp.Table)}
    link, rest = None, []
    for term in _conjuncts(sub.args["where"].this):
        sides = (term.this, term.expression) if isinstance(term, exp.EQ) else ()
        if link is None and all(isinstance(s, exp.Column) for s in sides) \
                and [s.table in own for s in sides] in ([True, False], [False, True]):
            link = sides if sides[0].table in own else sides[::-1]
        else:
            rest.append(term)
    if link is None or any(c.table not in own for term in rest for c in term.find_all(exp.Column)):
        return []
    inner, outer = link
    if not any(c.name in g.nullable.get(g.cols.alias.get(c.table, ""), ()) for c in link):
        return []  # without NULLs NOT IN is NOT EXISTS
    query = sub.copy()
    query.set("expressions", [inner.copy()])
    query.set("where", exp.Where(this=exp.and_(*(t.copy() for t in rest))) if rest else None)
    return [exp.Not(this=exp.In(this=outer.copy(), query=exp.Subquery(this=query)))]


def count_star_outer(n: exp.Count, g: Gold) -> list[exp.Expression]:
    """COUNT(x.col) -> COUNT(*) where x is LEFT JOINed: a row without a match counts as one."""
    if isinstance(n.this, exp.Column) and n.this.table in _null_extended(n):
        return [exp.Count(this=exp.Star())]
    return []


def join_dropped(n: exp.Select, g: Gold) -> list[exp.Expression]:
    """The query without the inner join to a parent (a unique key) that it reads only the key of:
    rows whose parent is missing (orphans, NULL keys) count again (:func:`_without_table`)."""
    joins = n.args.get("joins") or []
    if not joins:
        return []
    return [new for index in range(len(joins) + 1)
            if (new := _without_table(n, index, g.types, g.unique)) is not None]


def drop_conjunct(n: exp.And, g: Gold) -> list[exp.Expression]:
    return [n.this.copy(), n.expression.copy()]


def null_flip(n: exp.Expression, g: Gold) -> list[exp.Expression]:
    if isinstance(n, exp.Not) and isinstance(n.this, exp.Is):
        return [n.this.copy()]
    if isinstance(n, exp.Is) and not isinstance(n.parent, exp.Not):
        return [exp.Not(this=n.copy())]
    return []


def order_flip(n: exp.Ordered, g: Gold) -> list[exp.Expression]:
    if _in_window_order(n):  # window_order_flip's
        return []
    new = n.copy()
    new.set("desc", not n.args.get("desc"))
    return [new]


def limit_shift(n: exp.Limit, g: Gold) -> list[exp.Expression]:
    try:
        value = int(n.expression.this)
    except (AttributeError, TypeError, ValueError):
        return []
    return [exp.Limit(expression=exp.Literal.number(v)) for v in (value - 1, value + 1) if v >= 0]


def column_swap(n: exp.Column, g: Gold) -> list[exp.Expression]:
    if not (n.find_ancestor(exp.Where, exp.Select, exp.Having)) or n.find_ancestor(exp.Join):
        return []
    return [exp.column(other, table=n.table or None) for other in g.cols.same_type(n)]


def window_frame(n: exp.Window, g: Gold) -> list[exp.Expression]:
    """ROWS BETWEEN UNBOUNDED PRECEDING -> 1 PRECEDING (the frame ends where it did); and a
    running aggregate (one with an ORDER BY) over its whole partition: ORDER BY and frame dropped,
    unless the query reads only the last row of the window's order (the same answer there)."""
    out_ = []
    spec = n.args.get("spec")
    if spec is not None and str(spec.args.get("kind") or "").upper() == "ROWS" \
            and str(spec.args.get("start") or "").upper() == "UNBOUNDED" \
            and str(spec.args.get("start_side") or "").upper() == "PRECEDING":
        new = n.copy()
        new.args["spec"].set("start", exp.Literal.number(1))
        out_.append(new)
    whole = spec is not None and str(spec.args.get("start") or "").upper() == "UNBOUNDED" \
        and str(spec.args.get("end") or "").upper() == "UNBOUNDED"
    if isinstance(n.this, RUNNING) and n.args.get("order") and not whole and not _reads_only_last(n):
        new = n.copy()
        new.set("order", None)
        new.set("spec", None)  # a frame without ORDER BY would run in no defined order
        out_.append(new)
    return out_


def partition_drop(n: exp.Window, g: Gold) -> list[exp.Expression]:
    if not n.args.get("partition_by"):
        return []
    new = n.copy()
    new.set("partition_by", None)
    return [new]


def window_order_flip(n: exp.Window, g: Gold) -> list[exp.Expression]:
    """Every key of the window's ORDER BY the other way round (ascending <-> descending)."""
    if not n.args.get("order"):
        return []
    new = n.copy()
    for key in new.args["order"].expressions:
        key.set("desc", not key.args.get("desc"))
    return [new]


def lag_offset(n: exp.Expression, g: Gold) -> list[exp.Expression]:
    """LAG/LEAD(x[, k]) -> offset k + 1 and (k > 1) k - 1; then LAG <-> LEAD with the same arguments."""
    offset = n.args.get("offset")
    k = 1 if offset is None else (int(offset.this) if isinstance(offset, exp.Literal) and not offset.is_string
                                  and offset.this.isdigit() else None)
    out_ = []
    for v in ((k + 1, k - 1) if k is not None else ()):
        if v >= 1:
            new = n.copy()
            new.set("offset", exp.Literal.number(v))
            out_.append(new)
    other = exp.Lead if isinstance(n, exp.Lag) else exp.Lag
    out_.append(other(**{arg: value.copy() for arg, value in n.args.items() if value is not None}))
    return out_


def rank_swap(n: exp.Expression, g: Gold) -> list[exp.Expression]:
    if not isinstance(n.parent, exp.Window) or any(n.args.values()):
        return []
    return [other() for other in RANKINGS if not isinstance(n, other)]


HAVING_SWAPS = {exp.GT: exp.GTE, exp.GTE: exp.GT, exp.LT: exp.LTE, exp.LTE: exp.LT}


def having_bound(n: exp.Expression, g: Gold) -> list[exp.Expression]:
    if not _in_having(n):
        return []
    return [HAVING_SWAPS[type(n)](this=n.this, expression=n.expression)]


def percent_scale(n: exp.Mul, g: Gold) -> list[exp.Expression]:
    """100 * e or e * 100 -> e: a fraction where a percentage was asked."""
    return [n.args[keep].copy() for drop_, keep in (("this", "expression"), ("expression", "this"))
            if _is_number(n.args[drop_], 100)][:1]


def integer_division(n: exp.Div, g: Gold) -> list[exp.Expression]:
    """a / b -> a // b where a and b are integers (DuckDB's // of a DECIMAL or DOUBLE is /, the
    same query); and each fractional CAST operand dropped: what is left is written a // b when
    it divides an integer by an integer (the truncation the cast was there to prevent: DuckDB's
    / would still divide exactly), a / b when the cast was a DECIMAL's rounding, and not at all
    when it was a DOUBLE or FLOAT cast of a non-integer (the same query)."""
    out_ = []
    if _integer_typed(n.this, g.cols.types) and _integer_typed(n.expression, g.cols.types):
        out_.append(exp.IntDiv(this=n.this.copy(), expression=n.expression.copy()))
    for side in ("this", "expression"):
        cast = n.args[side]
        if not _fractional_cast(cast):
            continue
        other = n.expression if side == "this" else n.this
        kept = {side: _operand(cast.this.copy(), side == "expression"),
                ("expression" if side == "this" else "this"): other.copy()}
        if _integer_typed(cast.this, g.cols.types) and _integer_typed(other, g.cols.types):
            out_.append(exp.IntDiv(**kept))
        elif not cast.to.is_type(exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT):
            out_.append(exp.Div(**kept))
    return out_


def and_or(n: exp.And, g: Gold) -> list[exp.Expression]:
    return [exp.Or(this=n.this, expression=n.expression)]


def constant_shift(n: exp.Literal, g: Gold) -> list[exp.Expression]:
    return _numeric_shift(n)


# every operator, in the order the study makes their mutants (and a mutant that repeats an earlier one is dropped)
REGISTRY: tuple[Operator, ...] = (
    # the traps' first: a mutant another operator also makes (column_swap, drop_conjunct, constant_shift) is theirs
    Operator("sibling_swap", exp.Query, sibling_swap),
    Operator("exclusion_dropped", (exp.And, exp.Where), exclusion_dropped),
    Operator("code_misread", (exp.EQ, exp.NEQ, exp.In), code_misread),
    Operator("inclusive_end", exp.LT, inclusive_end),
    Operator("exclusive_start", exp.GTE, exclusive_start),
    Operator("inclusive_start", exp.GT, inclusive_start),
    Operator("exclusive_end", exp.LTE, exclusive_end),
    Operator("date_shift", exp.Cast, date_shift),
    Operator("date_shift", (exp.GTE, exp.LT), date_shift_as_bound),
    Operator("whole_units", exp.Round, whole_units),
    Operator("agg_swap", (exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Count), agg_swap),
    Operator("distinct", (exp.Sum, exp.Avg, exp.Count), distinct),
    Operator("inner_join", exp.Join, inner_join),
    Operator("join_key", exp.Join, join_key),
    Operator("outer_join", exp.Join, outer_join),
    Operator("anti_join_side", exp.Is, anti_join_side),
    Operator("not_in", exp.Not, not_in),
    Operator("count_star_outer", exp.Count, count_star_outer),
    Operator("join_dropped", exp.Select, join_dropped),
    Operator("drop_conjunct", exp.And, drop_conjunct),
    Operator("and_or", exp.And, and_or),
    Operator("null_flip", (exp.Not, exp.Is), null_flip),
    Operator("order_flip", exp.Ordered, order_flip),
    Operator("limit_shift", exp.Limit, limit_shift),
    Operator("constant_shift", exp.Literal, constant_shift),
    Operator("column_swap", exp.Column, column_swap),
    Operator("window_frame", exp.Window, window_frame),
    Operator("partition_drop", exp.Window, partition_drop),
    Operator("window_order_flip", exp.Window, window_order_flip),
    Operator("lag_offset", (exp.Lag, exp.Lead), lag_offset),
    Operator("rank_swap", RANKINGS, rank_swap),
    Operator("having_bound", tuple(HAVING_SWAPS), having_bound),
    Operator("percent_scale", exp.Mul, percent_scale),
    Operator("integer_division", exp.Div, integer_division),
)
# the operators' names, the study's and the manifest's; constant_answer, last, reads the rotations' answers, not SQL
OPERATORS = (*dict.fromkeys(op.name for op in REGISTRY), "constant_answer")


def mutants_of(q: Question, types: dict[str, dict[str, str]], nullable: dict[str, set[str]] | None = None,
               rotated_answers: dict[str, object] | None = None, unique: dict[str, set[str]] | None = None,
               parsed: exp.Expression | None = None, traps: dict | None = None) -> list[tuple[str, exp.Expression]]:
    """Every (operator, mutated AST) for one question's gold SQL: each operator of :data:`REGISTRY` on every node
    of its kind, in order, then, with ``rotated_answers``, :func:`constant_answer`. ``nullable`` and ``unique``: see
    :class:`Gold`; ``parsed``: the gold SQL already parsed and :func:`lean` (it is left as it is; each mutant is a
    copy)."""
    tree = lean(parse_gold(q.gold_sql)) if parsed is None else parsed
    gold = Gold(tree, _Columns(types, tree), types, nullable or {}, unique or {}, traps or {})
    out = [(op.name, mutant) for op in REGISTRY for mutant in _edits(tree, op.nodes, lambda n, op=op: op.edit(n, gold))]
    if rotated_answers:
        out.append(("constant_answer", constant_answer(rotated_answers)))
    return out


def constant_answer(rotated_answers: dict[str, object]) -> exp.Expression:
    """The ``constant_answer`` mutant: the first rotation's answer as a literal, the last of :func:`mutants_of`
    and the only one that reads the answers. Written where rotations answer differently, it matches on one."""
    first = next(iter(rotated_answers.values()))
    literal = exp.Literal.string(first) if isinstance(first, str) else exp.Literal.number(first)
    return exp.select(literal)


