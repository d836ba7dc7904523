"""The near-miss study: plausible wrong versions of each gold SQL, rerun on every rotation.

Each operator makes one edit on the sqlglot AST of a gold query. A mutant whose SQL is the gold
SQL's or an earlier mutant's (for edits of AND/OR: after sqlglot's simplifier) is dropped as
equivalent; one that fails to run is recorded as errored. The rest run on every rotation with the
verification comparison; the study records, per operator, how many matched the expected answer on
at least one and on all databases.

The operators, each one plausible mistake, are :mod:`evalpack.checks.nearmiss.operators`'s registry.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass

import duckdb
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.optimizer.simplify import simplify

from evalpack.checks.golden import orders_result
from evalpack.checks.nearmiss.cells import Cells, cells_form, merged, worth_computing
from evalpack.checks.nearmiss.operators import AGGREGATES, OPERATORS, constant_answer, mutants_of, trap_facts
from evalpack.checks.nearmiss.ranges import always_true, declared_ranges, ranges_key
from evalpack.checks.nearmiss.rates import survival_rate
from evalpack.checks.nearmiss.rollup import (
    Need,
    Rollup,
    aggregate_types,
    create_rollups,
    every_measure,
    need_of,
    plan_rollups,
    rollup_form,
)
from evalpack.checks.verification import map_on_cursors
from evalpack.core import cache
from evalpack.core.scoring import answer_matches, verdict_in_any_order
from evalpack.questions.derive import DIALECT, Question, lean, parse_gold
from evalpack.spec.model import Spec

# one dialect object for the thousands of mutants printed: naming the dialect made a new one for every print
PRINTER = Dialect.get_or_raise(DIALECT)

MAX_SURVIVORS_LISTED = 50
# a prepared mutant that is the gold query on every database the spec's declared ranges allow (evalpack.checks.nearmiss.ranges)
IMPLIED = "implied"
EQUIVALENCE_RULE = ("a mutant is equivalent when it is the same query as the gold SQL on every database the spec allows, "
                    "never judged on the rows: the same SQL once printed, the same after sqlglot's simplifier (edits "
                    "of AND/OR), or the same once each comparison that the spec's declarations make true of every "
                    "row is read as TRUE: a never-NULL date column against a day its declared start and end always "
                    "meet, a text period column or a categorical one against a value all its labels or choices meet "
                    "(equivalent_by_ranges counts those; where a date range has room the build plants rows outside "
                    "the declared months instead)")


@dataclass(frozen=True)
class _Batchable:
    """A mutant of the form SELECT f(aggregates) FROM source [WHERE cond], rewritten so that many
    with the same source (a table, or tables and their joins) are computed in one scan: every
    aggregate reads only the rows where cond holds."""

    source: str  # what follows FROM, as SQL
    projection: str  # the projection with filtered aggregates, as SQL
    bounds: tuple[str, str | None, str | None] | None  # (column, lower literal SQL, upper literal SQL)


@dataclass(frozen=True)
class Mutant:
    question_id: str
    operator: str
    sql: str
    batch: _Batchable | None = None
    need: Need | None = None  # what a rollup must hold to answer it
    rollup_sql: str | None = None  # the same query over its table's rollup
    # its scalar subqueries that read only tables (as SQL, each as it appears in ``sql``): where mutants
    # share one, a rotation computes it once (see plan_runs)
    subqueries: tuple[str, ...] = ()
    # the same query reading its groups' aggregates from cells (evalpack.checks.nearmiss.cells), and those cells
    cells: tuple[str, tuple[Cells, ...]] | None = None


def table_subqueries(tree: exp.Expression, types: dict[str, dict[str, str]]) -> tuple[str, ...]:
    """The SQL of each scalar subquery of ``tree`` that depends on nothing outside it: it reads only
    tables of ``types`` (no CTE of the query) and each of its columns is one of their columns.

    Such a subquery has one value per database, whatever query holds it."""
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    out = []
    for sub in tree.find_all(exp.Subquery):
        if isinstance(sub.parent, (exp.From, exp.Join)) or not isinstance(sub.this, exp.Select):
            continue
        tables = list(sub.find_all(exp.Table))
        if not tables or any(t.name in ctes or t.name not in types for t in tables):
            continue
        names = {t.alias_or_name: t.name for t in tables}
        columns = set().union(*(types[t.name] for t in tables))
        if all((c.table in names and c.name in types[names[c.table]]) if c.table else c.name in columns
               for c in sub.find_all(exp.Column)):
            out.append(sub.sql(dialect=PRINTER))
    return tuple(dict.fromkeys(out))


# the operators whose edit changes a boolean connective: only there can the mutant collapse into the
# gold query by logic alone (a duplicated or absorbed conjunct); sqlglot's simplifier, which costs about
# as much as everything else in preparing a mutant, runs on those alone
CONNECTIVE_OPERATORS = frozenset({"drop_conjunct", "and_or"})


def _canonical(tree: exp.Expression) -> str:
    """The SQL of ``tree`` after sqlglot's simplifier (``tree`` is consumed)."""
    try:
        return simplify(tree).sql(dialect=PRINTER, copy=False)
    except Exception:  # simplify can fail on unusual trees; the plain SQL still identifies the query
        return tree.sql(dialect=PRINTER, copy=False)


# --------------------------------------------------------------------------- running


def nullable_columns(spec: Spec) -> dict[str, set[str]]:
    """Columns that can be NULL in the data: declared nullable, or a foreign key with declared nulls."""
    out: dict[str, set[str]] = {t.name: {c.name for c in t.columns if c.nullable} for t in spec.tables}
    for rel in spec.relationships:
        if rel.nulls:
            out[rel.child_table].add(rel.child_column)
    return out


def unique_columns(spec: Spec) -> dict[str, set[str]]:
    """Columns that hold no value twice: declared unique (every parent key is)."""
    return {t.name: {c.name for c in t.columns if c.unique} for t in spec.tables}


@dataclass(frozen=True)
class MutantSet:
    """Every question's non-equivalent mutants, and which (question, operator) edits were
    equivalent to the gold SQL and dropped."""

    mutants: tuple[Mutant, ...]
    equivalent: tuple[tuple[str, str], ...]
    # those of ``equivalent`` that are the gold query only on the databases the declared ranges allow
    implied: tuple[tuple[str, str], ...] = ()

    def implied_of(self, question_ids) -> dict[str, int]:
        """Per operator, how many of the equivalent mutants of ``question_ids`` the declared ranges make so."""
        ids = set(question_ids)
        return dict(sorted(Counter(op for question_id, op in self.implied if question_id in ids).items()))

    def of(self, question_ids) -> tuple[list[Mutant], dict[str, int]]:
        """The mutants of ``question_ids`` and their equivalent count per operator."""
        ids = set(question_ids)
        equivalent = dict.fromkeys(OPERATORS, 0)
        for question_id, op in self.equivalent:
            if question_id in ids:
                equivalent[op] += 1
        return [m for m in self.mutants if m.question_id in ids], equivalent


def prepare_mutants(spec: Spec, questions: tuple[Question, ...], types: dict[str, dict[str, str]],
                    pool: Executor | None = None) -> MutantSet:
    """Mutate every question's gold SQL (no data needed: a build starts this while it writes).

    Each gold SQL is prepared once per process (a process that builds the same spec again, such as
    Dagster's code server, reuses it) and kept in the cache on disk for other processes. With ``pool``
    (worker processes) the gold SQL texts not prepared yet are shared out among its workers: the
    work is pure, so the mutants are the same either way."""
    nullable = nullable_columns(spec)
    schema = json.dumps(types, sort_keys=True)
    maybe_null = json.dumps({t: sorted(c) for t, c in nullable.items()}, sort_keys=True)
    unique = json.dumps({t: sorted(c) for t, c in unique_columns(spec).items()}, sort_keys=True)
    traps = json.dumps(trap_facts(spec), sort_keys=True)
    ranges = ranges_key(declared_ranges(spec, nullable))
    keys = [(q.gold_sql, schema, maybe_null, json.dumps(list(q.expected), default=str)
             if spec.answers == "rotated" else None, unique, traps, ranges) for q in questions]
    missing = [k for k in dict.fromkeys(keys) if k not in _PREPARED]
    if len(_PREPARED) + len(missing) > PREPARED_CACHE:
        _PREPARED.clear()
    if pool is not None and len(missing) > 1:
        _PREPARED.update(zip(missing, pool.map(_cached_prepared, missing, chunksize=PREPARE_CHUNK)))
    else:
        _PREPARED.update((k, _cached_prepared(k)) for k in missing)
    mutants: list[Mutant] = []
    equivalent, implied = [], []
    for q, key in zip(questions, keys):
        for op, prepared in _PREPARED[key]:
            if prepared == IMPLIED:
                implied.append((q.id, op))
            if prepared is None or prepared == IMPLIED:
                equivalent.append((q.id, op))
            else:
                mutants.append(Mutant(q.id, op, *prepared))
    return MutantSet(tuple(mutants), tuple(equivalent), tuple(implied))


PREPARED_CACHE = 4096  # gold SQL texts whose mutants a process keeps
PREPARE_CHUNK = 4  # gold SQL texts per task given to a worker: their costs differ, small tasks balance them
_PREPARED: dict[tuple, tuple] = {}
# what preparing a gold SQL's mutants reads besides its arguments: a change to any of them is a new key
PREPARING_CODE = ("evalpack.checks.nearmiss.study", "evalpack.checks.nearmiss.ranges", "evalpack.checks.nearmiss.operators", "evalpack.checks.nearmiss.rollup", "evalpack.checks.nearmiss.cells", "evalpack.questions.derive", "evalpack.core.scoring")


def _cached_prepared(key: tuple) -> tuple:
    """:func:`_prepared` of ``key``, through the cache on disk (see evalpack.core.cache): a process that
    builds a spec another process built before (a test session, the CLI after Dagster) skips the sqlglot work."""
    return cache.remembered("mutants", PREPARING_CODE, key, lambda: _prepared(*key), decode=decode_prepared,
                            encode=encode_prepared)


def encode_prepared(prepared: tuple) -> list:
    """:func:`_prepared`'s result as JSON values (:func:`decode_prepared` gives it back, equal)."""
    out = []
    for op, made in prepared:
        if made is None or made == IMPLIED:
            out.append([op, made])
            continue
        sql, batch, need, over_rollup, shared, cells = made
        out.append([op, [sql, None if batch is None else [batch.source, batch.projection, batch.bounds],
                         None if need is None else [need.table, sorted(need.dims), sorted(need.measures), need.grouped],
                         over_rollup, list(shared),
                         None if cells is None else [cells[0], [[c.table, list(c.keys), [list(a) for a in c.aggregates],
                                                                 None if c.window is None else list(c.window), c.rows]
                                                                for c in cells[1]]]]])
    return out


def decode_prepared(stored: list) -> tuple:
    """The inverse of :func:`encode_prepared`; raises TypeError or ValueError on anything else."""
    out = []
    for op, made in stored:
        if op not in OPERATORS:
            raise ValueError(f"unknown operator {op!r}")
        if made is None or made == IMPLIED:
            out.append((op, made))
            continue
        sql, batch, need, over_rollup, shared, cells = made
        if not isinstance(sql, str) or not (over_rollup is None or isinstance(over_rollup, str)) \
                or not all(isinstance(sub, str) and sub in sql for sub in shared):
            raise TypeError("mutant SQL is not text")
        if batch is not None:
            source, projection, bounds = batch
            batch = _Batchable(str(source), str(projection), None if bounds is None else tuple(bounds))
        if need is not None:
            table, dims, measures, grouped = need
            need = Need(str(table), frozenset(dims), frozenset(tuple(m) for m in measures), bool(grouped))
        if cells is not None:
            cells_sql, tables = cells
            if not isinstance(cells_sql, str):
                raise TypeError("cells SQL is not text")
            cells = (cells_sql, tuple(Cells(str(table), tuple(map(str, keys)), tuple((str(c), str(a)) for c, a in aggs),
                                            None if window is None else tuple(map(str, window)),
                                            None if rows is None else str(rows))
                                      for table, keys, aggs, window, rows in tables))
        out.append((op, (sql, batch, need, over_rollup, tuple(shared), cells)))
    return tuple(out)


def _prepared(gold_sql: str, schema: str, maybe_null: str, rotated: str | None, unique_keys: str = "{}",
              traps: str = "{}", ranges: str = "{}") -> tuple[tuple[str, tuple | str | None], ...]:
    """(operator, (sql, batch form, rollup need, rollup SQL, table subqueries, cells form), or None when the same query
    as the gold SQL, or :data:`IMPLIED` when the same on every database the declared ``ranges`` allow
    (:mod:`evalpack.checks.nearmiss.ranges`)) for one gold SQL. Pure, and its arguments are text (JSON), so that they
    key :data:`_PREPARED`.

    With ``rotated`` answers the mutants are those without them, read through :func:`_cached_prepared` (a fact of
    the spec changed, the answers with it, the SQL not: only the last mutant is new), then
    :func:`constant_answer`, the last of :func:`mutants_of` and the only one that reads them."""
    expected = json.loads(rotated) if rotated else []
    if expected:
        unanswered = _cached_prepared((gold_sql, schema, maybe_null, None, unique_keys, traps, ranges))
        return unanswered + (_constant_prepared(gold_sql, schema, dict((r, v) for r, v in expected), unanswered),)
    types = json.loads(schema)
    nullable = {t: set(c) for t, c in json.loads(maybe_null).items()}
    unique = {t: set(c) for t, c in json.loads(unique_keys).items()}
    result_types = _result_types(schema)
    q = Question("", "", gold_sql, (), "", None, "", ())
    gold = lean(parse_gold(gold_sql))
    seen = {gold.sql(dialect=PRINTER), _canonical(gold.copy())}
    counted = frozenset(json.loads(traps).get("counted", ()))
    declared = json.loads(ranges)
    reduced = always_true(gold.copy(), declared)
    implied = None if reduced is None else (declared, _canonical(reduced))
    return tuple((op, _prepared_one(op, tree, types, result_types, seen, counted, implied))
                 for op, tree in mutants_of(q, types, nullable, None, unique, parsed=gold, traps=json.loads(traps)))


def _constant_prepared(gold_sql: str, schema: str, rotated_answers: dict[str, object],
                       unanswered: tuple[tuple[str, tuple | None], ...]) -> tuple[str, tuple | None]:
    """:func:`constant_answer` prepared after ``unanswered`` (the gold SQL's other mutants, prepared), as it would be
    at the end of their loop. What it is compared with there: the gold SQL printed and simplified, and each earlier
    mutant's SQL; the simplified forms of the connective ones are left out, since every one of them reads a table and
    this mutant reads none."""
    gold = lean(parse_gold(gold_sql))
    seen = {gold.sql(dialect=PRINTER), _canonical(gold.copy()),
            *(made[0] for _, made in unanswered if made and made != IMPLIED)}
    tree = constant_answer(rotated_answers)
    return "constant_answer", _prepared_one("constant_answer", tree, json.loads(schema), _result_types(schema), seen)


def split_exists(tree: exp.Expression) -> exp.Expression:
    """``tree`` with each EXISTS over a plain SELECT whose WHERE is an OR written as an OR of EXISTS, one per
    disjunct (a copy; ``tree`` itself when there is none). The same truth value: a plain SELECT has a row when some
    row meets one disjunct. DuckDB cannot decorrelate a correlated condition under an OR (a mutant of and_or: ``c.id =
    p.id AND x OR y``), and ran each such mutant as a nested loop; split, each part is decorrelated or uncorrelated."""
    def plain_or(node: exp.Exists) -> bool:
        sub = node.this
        where = sub.args.get("where") if isinstance(sub, exp.Select) else None
        return where is not None and isinstance(where.this.unnest(), exp.Or) and not any(
            sub.args.get(k) for k in ("group", "having", "limit", "offset", "distinct", "qualify", "with")) and \
            not any(sub.find_all(exp.AggFunc, exp.Window))
    if not any(plain_or(node) for node in tree.find_all(exp.Exists)):
        return tree
    tree = tree.copy()
    for node in [n for n in tree.find_all(exp.Exists) if plain_or(n)]:
        parts = list(node.this.args["where"].this.unnest().flatten())
        exists = []
        for part in parts:
            sub = node.this.copy()
            sub.set("where", exp.Where(this=part.unnest().copy()))
            exists.append(exp.Exists(this=sub))
        node.replace(exp.paren(exp.or_(*exists, copy=False), copy=False))
    return tree


def _prepared_one(op: str, tree: exp.Expression, types: dict[str, dict[str, str]], result_types: dict,
                  seen: set[str], counted: frozenset[str] = frozenset(),
                  implied: tuple[Mapping, str] | None = None) -> tuple | str | None:
    """One mutant's prepared forms (see :func:`_prepared`), or None when it is the same query as the gold SQL or an
    earlier mutant (``seen``: their SQL, to which this one's is added; ``tree`` is consumed). ``counted``: the
    predicates of the rows that count, which cells may hold (:func:`evalpack.checks.nearmiss.cells.cells_form`).
    ``implied``: (the declared ranges, the gold SQL's canonical form once they are applied), when they apply to it:
    a mutant with the same canonical form under them is :data:`IMPLIED`."""
    sql = tree.sql(dialect=PRINTER, copy=False)  # printing leaves the tree as it was
    if sql in seen:
        return None
    if implied is not None:
        declared, gold_form = implied
        if _canonical(always_true(tree.copy(), declared) or tree.copy()) == gold_form:
            seen.add(sql)
            return IMPLIED
    need = need_of(tree, types)
    # a rollup is small enough to run its queries one by one: batch only the others
    batch = None if need else batchable(split_exists(tree))
    connective = op in CONNECTIVE_OPERATORS
    # the tree is needed after the rollup form only by _canonical, which consumes it
    over_rollup = rollup_form(tree, need, result_types, copy=connective).sql(dialect=PRINTER, copy=False) \
        if need else None
    shared = () if need or batch else table_subqueries(tree, types)
    cells = None if need or batch else cells_form(tree, types, counted)
    forms = {sql, _canonical(tree)} if connective else {sql}
    if forms & seen:
        return None
    seen |= forms
    return sql, batch, need, over_rollup, shared, cells


@functools.lru_cache(maxsize=16)
def _result_types(schema: str) -> dict:
    types = json.loads(schema)
    return aggregate_types(types, every_measure(types))


def build_mutants(spec: Spec, questions: tuple[Question, ...], types: dict[str, dict[str, str]]
                  ) -> tuple[list[Mutant], dict[str, int]]:
    """Non-equivalent mutants of every question, and the count of equivalent ones per operator."""
    return prepare_mutants(spec, questions, types).of(q.id for q in questions)




def _bounds(where: exp.Expression | None) -> tuple[str, exp.Expression | None, exp.Expression | None] | None:
    """The column and literal bounds (either may be missing) of a top-level AND-chain window."""
    if where is None:
        return None
    found: dict[str, list] = {}
    for term in (where.flatten() if isinstance(where, exp.And) else [where]):
        term = term.unnest()
        if isinstance(term, exp.And):
            inner = _bounds(term)
            if inner:
                slot = found.setdefault(inner[0], [None, None])
                slot[0], slot[1] = slot[0] or inner[1], slot[1] or inner[2]
            continue
        if isinstance(term, (exp.GTE, exp.GT, exp.LT, exp.LTE)) and isinstance(term.this, exp.Column) \
                and isinstance(term.expression, exp.Cast):
            slot = found.setdefault(term.this.name, [None, None])
            slot[0 if isinstance(term, (exp.GTE, exp.GT)) else 1] = term.expression
    if len(found) != 1:
        return None
    column, (lower, upper) = next(iter(found.items()))
    return column, lower, upper


def _only_when(agg: exp.Expression, cond: exp.Expression) -> exp.Expression:
    """``agg`` over the rows where ``cond`` holds: each argument becomes CASE WHEN cond THEN arg END.

    The aggregates batched here ignore NULL arguments, so this equals ``agg FILTER (WHERE cond)``;
    DuckDB evaluates it about three times faster than FILTER on wide batches."""
    def when(arg: exp.Expression) -> exp.Expression:
        return exp.Case(ifs=[exp.If(this=exp.Paren(this=cond.copy()), true=arg)])

    arg = agg.this
    if isinstance(arg, exp.Distinct):
        arg.set("expressions", [when(e) for e in arg.expressions])
    elif arg is None or isinstance(arg, exp.Star):  # COUNT(*): count the rows where cond holds
        agg.set("this", when(exp.Literal.number(1)))
    else:
        agg.set("this", when(arg))
    return agg


def batchable(query: str | exp.Expression) -> _Batchable | None:
    """The batch form of a scalar aggregate query over a table or joined tables (SQL or AST, not
    modified), or None. Joined mutants share their join: its rows are what the aggregates filter."""
    tree = parse_gold(query) if isinstance(query, str) else query
    if not isinstance(tree, exp.Select) or len(tree.expressions) != 1:
        return None
    if any(tree.args.get(k) for k in ("group", "having", "order", "limit", "offset", "distinct", "with",
                                      "qualify", "windows")):
        return None
    source = tree.args.get("from_") or tree.args.get("from")
    table = source.this if source else None
    joins = tree.args.get("joins") or []
    if not isinstance(table, exp.Table) or any(not isinstance(j.this, exp.Table) for j in joins):
        return None
    plain = not joins and not table.args.get("alias")  # a single table: its window can bound the scan
    projection = tree.expressions[0].copy()
    if isinstance(projection, exp.Alias):
        projection = projection.this
    aggregates = [a for a in projection.find_all(AGGREGATES)]
    if not aggregates or any(isinstance(n, (exp.Subquery, exp.Select, exp.Window, exp.Filter))
                             for n in projection.find_all(exp.Expression)):
        return None
    # a column outside every aggregate would make the query invalid (or a per-row result)
    if any(not c.find_ancestor(*AGGREGATES) for c in projection.find_all(exp.Column)):
        return None
    where = tree.args.get("where")
    cond = where.this if where else None
    holder = exp.Paren(this=projection)  # so that a bare aggregate can be replaced too
    if cond is not None:
        for agg in list(projection.find_all(AGGREGATES)):
            agg.replace(_only_when(agg.copy(), cond))
    bounds = _bounds(cond) if plain else None
    if bounds is not None:
        bounds = (bounds[0], *(None if b is None else b.sql(dialect=PRINTER) for b in bounds[1:]))
    source_sql = " ".join([table.sql(dialect=PRINTER), *(j.sql(dialect=PRINTER) for j in joins)])
    return _Batchable(source_sql, holder.this.sql(dialect=PRINTER), bounds)


BATCH_WIDTH = 64
ROLLUP_BATCH = 16  # rollup queries per statement (8 a statement ran slower than one by one in DuckDB 2.0)
# mutants of one shape whose SQL differs only in DATE literals, as every mutant prints them
DATE_LITERAL = re.compile(r"CAST\('(\d{4}-\d{2}-\d{2})' AS DATE\)")
LITERALS = "__evalpack_literal"  # the table of a templated statement's literals; a SQL naming it is not templated
ROW_ALIAS = "__evalpack_row"  # a batched mutant's rows, each as a struct; a mutant whose SQL has it runs alone


def _parts(indices: list[int]) -> list[list[int]]:
    return [indices[k:k + ROLLUP_BATCH] for k in range(0, len(indices), ROLLUP_BATCH)]


@dataclass(frozen=True)
class StudyJob:
    """One statement of a rotation's study: ``sql`` returns one row with one value per member, the member's
    scalar answer or, with ``rows``, the list of its result rows (each a struct); None: the one member runs
    on its own. ``per_member``: ``sql`` returns one row per member instead, (member, list of its rows)."""

    sql: str | None
    members: list[int]
    rows: bool = False
    per_member: bool = False


def _rows_list(sql: str) -> str:
    """A scalar subquery with the list of ``sql``'s result rows, each a struct (NULL when there are none)."""
    return f"(SELECT list({ROW_ALIAS}) FROM ({sql}) AS {ROW_ALIAS})"


def date_template(sql: str) -> tuple[str, tuple[str, ...]] | None:
    """``sql`` with each of its DATE literals read from a column of :data:`LITERALS` (``CAST('2025-01-01' AS
    DATE)`` becomes ``CAST(__evalpack_literal.__evalpack_literal_0 AS DATE)``), and those literals' texts; None
    when it has none or names :data:`LITERALS`. DuckDB's tokenizer confirms each is a literal, not text inside a
    quoted name, a string or a comment."""
    found = list(DATE_LITERAL.finditer(sql))
    if not found or LITERALS in sql:
        return None
    starts = dict(duckdb.tokenize(sql))
    if any(starts.get(m.start()) != duckdb.token_type.keyword
           or starts.get(m.start(1) - 1) != duckdb.token_type.string_const for m in found):
        return None
    parts, end = [], 0
    for n, m in enumerate(found):
        parts += [sql[end:m.start()], f"CAST({LITERALS}.{LITERALS}_{n} AS DATE)"]
        end = m.end()
    return "".join(parts) + sql[end:], tuple(m.group(1) for m in found)


def templated_jobs(sql: Mapping[int, str]) -> tuple[list[StudyJob], list[int]]:
    """Statements for the members of ``sql`` (index -> SQL) that share a :func:`date_template` with another:
    each group runs its template once per member's literals, as a correlated subquery over a VALUES list of
    them (planned once instead of once per member); and the members left over."""
    groups: dict[str, list[tuple[int, tuple[str, ...]]]] = {}
    rest = []
    for i, text in sql.items():
        found = date_template(text)
        if found is None:
            rest.append(i)
        else:
            groups.setdefault(found[0], []).append((i, found[1]))
    jobs = []
    for template, members in groups.items():
        if len(members) < 2:
            rest.append(members[0][0])
            continue
        columns = ", ".join(f"{LITERALS}_{n}" for n in range(len(members[0][1])))
        values = ", ".join(f"({i}, {', '.join(repr(text) for text in literals)})" for i, literals in members)
        jobs.append(StudyJob(f"SELECT {LITERALS}.{LITERALS}_member, {_rows_list(template)} "
                             f"FROM (VALUES {values}) AS {LITERALS}({LITERALS}_member, {columns})",
                             [i for i, _ in members], rows=True, per_member=True))
    return jobs, sorted(rest)


def _batches(items: list[tuple[str, _Batchable | None]]) -> tuple[list[tuple[str, list[int]]], list[int]]:
    """(batch SQL, item indices) groups, and the indices of items that run one by one.

    ``items`` are (question id, batch form or None). Mutants of one question that bound the same
    column on the same sides share a scan restricted to the union of their windows, so zone maps
    still skip the rest of the table."""
    groups: dict[tuple, list[tuple[int, _Batchable]]] = {}
    alone = []
    for i, (question_id, b) in enumerate(items):
        if b is None:
            alone.append(i)
            continue
        column, lower, upper = b.bounds or (None, None, None)
        groups.setdefault((b.source, question_id, column, lower is not None, upper is not None), []).append((i, b))
    out = []
    for (source, _, column, has_lower, has_upper), members in groups.items():
        for start in range(0, len(members), BATCH_WIDTH):
            part = members[start:start + BATCH_WIDTH]
            sql = f'SELECT {", ".join(b.projection for _, b in part)} FROM {source}'
            # LEAST/GREATEST of the members' literals: a superset of their rows; each CASE does the rest
            limits = []
            if has_lower:
                limits.append(f'"{column}" >= LEAST({", ".join(b.bounds[1] for _, b in part)})')
            if has_upper:
                limits.append(f'"{column}" <= GREATEST({", ".join(b.bounds[2] for _, b in part)})')
            if limits:
                sql += " WHERE " + " AND ".join(limits)
            out.append((sql, [i for i, _ in part]))
    return out, alone


@dataclass(frozen=True)
class StudyPlan:
    """How a rotation runs the study: the rollups to create, the SQL each mutant runs as (its own,
    or its rewrite over a rollup), and the batches (indices into ``mutants``)."""

    mutants: tuple[Mutant, ...]
    rollups: tuple[Rollup, ...]
    sql: tuple[str, ...]
    batches: tuple[tuple[str, list[int]], ...]
    alone: tuple[int, ...]
    shared: tuple[tuple[str, str], ...] = ()  # (table, scalar subquery SQL) computed once per rotation
    cells: tuple[Cells, ...] = ()  # computed once per rotation
    over_cells: frozenset[int] = frozenset()  # the mutants that read them

    def create_tables(self, con: duckdb.DuckDBPyConnection) -> None:
        """The rollups, the shared subqueries' values and the cells, in ``con``'s database (every cursor sees
        them)."""
        create_rollups(con, self.rollups)
        # if one fails, the mutants reading it fall back to their own SQL, which fails or not on its own
        for table, subquery in self.shared:
            with contextlib.suppress(duckdb.Error):
                con.execute(f'CREATE OR REPLACE TABLE "{table}" AS SELECT * FROM {subquery}')
        for cells in self.cells:
            with contextlib.suppress(duckdb.Error):
                con.execute(cells.create_sql())

    def jobs(self) -> list[StudyJob]:
        """The statements that run the study, costliest kinds first."""
        # several mutants go in one statement: rewrites over a rollup that return one value as scalar
        # subqueries, and the others as the list of each one's rows (a list's order is not guaranteed to be
        # the rows', so a mutant compared in row order is judged on it only where no order could change the
        # verdict, and otherwise runs again on its own); one that DuckDB cannot run that way makes the
        # statement fail, and its members then run one by one
        # rewrites over a rollup or over cells read far fewer rows than the table has: they run last
        over_rollup = {i for i in self.alone if self.sql[i] == self.mutants[i].rollup_sql or i in self.over_cells}

        def kind(i: int) -> str:
            if i in over_rollup and self.mutants[i].need and not self.mutants[i].need.grouped:
                return "scalar"
            return "alone" if ROW_ALIAS in self.sql[i] else "listed"

        runs: dict[str, list[int]] = {"scalar": [], "alone": [], "listed": []}
        for i in self.alone:
            runs[kind(i)].append(i)
        scalar, alone, listed = runs["scalar"], runs["alone"], runs["listed"]

        def lists(members: list[int]) -> list[StudyJob]:
            return [StudyJob("SELECT " + ", ".join(_rows_list(self.sql[i]) for i in part), part, rows=True)
                    for part in _parts(members)]

        # over a rollup or cells, mutants that differ only in dates run as one correlated statement per shape
        # (on the table itself that is a join of every row with every date, far slower than each alone)
        templated, rest = templated_jobs({i: self.sql[i] for i in listed if i in over_rollup})
        return [*templated,
                *(StudyJob(sql, members) for sql, members in self.batches),
                *lists([i for i in listed if i not in over_rollup]),
                *(StudyJob(None, [i]) for i in alone),
                *(StudyJob("SELECT " + ", ".join(f"({self.sql[i]})" for i in part), part) for part in _parts(scalar)),
                *lists(rest)]


def plan_runs(mutants: list[Mutant], rollups: tuple[Rollup, ...]) -> StudyPlan:
    """Rewrite the mutants a rollup covers onto it, then batch everything that can share a scan.

    A scalar subquery that reads only tables and appears in several mutants (a year's total in every
    month's share, mistaken the same way) is computed once into a table; those mutants read its one value.
    Cells (:mod:`evalpack.checks.nearmiss.cells`) that several mutants read are computed once, and those mutants read them."""
    counts = Counter(sub for m in mutants if not (m.rollup_sql or m.batch) for sub in m.subqueries)
    shared = {sub: f"__shared_{index}" for index, sub in enumerate(sorted(s for s, n in counts.items() if n > 1))}
    covered = [bool(m.rollup_sql and any(r.covers(m.need) for r in rollups)) for m in mutants]
    readers: dict[str, list[Cells]] = {}
    for m, done in zip(mutants, covered):
        for c in m.cells[1] if m.cells and not done else ():
            readers.setdefault(c.name, []).append(c)
    cells = merged([c for name, of in readers.items() if worth_computing(of) for c in of])
    made = {c.name for c in cells}
    sql, items, over_cells = [], [], set()
    for i, (m, done) in enumerate(zip(mutants, covered)):
        if done:
            sql.append(m.rollup_sql)
            items.append((m.question_id, None))
        else:
            text = m.sql
            if m.cells and all(c.name in made for c in m.cells[1]):
                text = m.cells[0]
                over_cells.add(i)
            for sub in m.subqueries:
                if sub in shared:
                    text = text.replace(sub, f'(SELECT * FROM "{shared[sub]}")')
            sql.append(text)
            items.append((m.question_id, m.batch if m.need is None else batchable(m.sql)))
    batches, alone = _batches(items)
    return StudyPlan(tuple(mutants), rollups, tuple(sql), tuple(batches), tuple(alone),
                     tuple((table, sub) for sub, table in shared.items()), tuple(cells), frozenset(over_cells))


def plan_study(con: duckdb.DuckDBPyConnection, mutants: list[Mutant], types: dict[str, dict[str, str]]
               ) -> StudyPlan:
    """The plan for ``mutants``, with rollups chosen on ``con``'s data (they serve every rotation:
    a rollup only decides how fast a mutant runs, never what it returns)."""
    return plan_runs(mutants, plan_rollups(con, [m.need for m in mutants if m.need], types))


def study_rotation(con: duckdb.DuckDBPyConnection, rotation: str, questions: dict[str, Question],
                   plan: StudyPlan, workers: int = 2) -> dict[Mutant, bool | None]:
    """Each mutant's outcome on one rotation: True/False (matches the expected answer), None (error).

    Single-table aggregate mutants run many to a scan (each aggregate over its own WHERE's rows,
    which gives exactly the standalone result); the rest run one by one. A rewrite over a rollup
    that fails falls back to the mutant's own SQL, so only the mutant's own errors count. Two
    cursors with one DuckDB thread each keep both cores busy."""
    plan.create_tables(con)
    mutants = plan.mutants
    # a result set is compared in order when the gold SQL orders it (the scorer's spider rule)
    in_order = {qid: orders_result(questions[qid].gold_sql) for qid in {m.question_id for m in mutants}}

    def judge(i: int, rows: list[tuple]) -> bool:
        q = questions[mutants[i].question_id]
        return answer_matches({"answer_type": q.answer_type, "round_decimals": q.round_decimals},
                              q.expected_for(rotation), rows, ordered=in_order[q.id])

    def listed(cursor, i: int, rows: list[tuple]) -> bool | None:
        q = questions[mutants[i].question_id]
        if not in_order[q.id]:
            return judge(i, rows)
        verdict = verdict_in_any_order({"answer_type": q.answer_type, "round_decimals": q.round_decimals},
                                       q.expected_for(rotation), rows)
        return one(cursor, i) if verdict is None else verdict

    def one(cursor, i: int) -> bool | None:
        for sql in dict.fromkeys((plan.sql[i], mutants[i].sql)):
            try:
                return judge(i, cursor.execute(sql).fetchall())
            except duckdb.Error:
                continue
        return None

    def run(cursor, job: StudyJob) -> dict[int, bool | None]:
        try:
            if job.per_member:
                row = dict(cursor.execute(job.sql).fetchall())
                row = [row[i] for i in job.members] if len(row) == len(job.members) else None
            else:
                row = cursor.execute(job.sql).fetchone() if job.sql else None
        except (duckdb.Error, KeyError):  # one member does not bind or run: fall back to each on its own
            row = None
        if row is None:
            return {i: one(cursor, i) for i in job.members}
        if job.rows:  # no rows: the list is NULL
            return {i: listed(cursor, i, [tuple(struct.values()) for struct in value or ()])
                    for i, value in zip(job.members, row)}
        return {i: judge(i, [(value,)]) for i, value in zip(job.members, row)}

    return {mutants[i]: r for part in map_on_cursors(con, run, plan.jobs(), workers) for i, r in part.items()}


# what a rotation's study outcomes depend on besides the data, the mutants and the questions
STUDYING_CODE = ("evalpack.checks.nearmiss.study", "evalpack.checks.nearmiss.operators", "evalpack.checks.nearmiss.rollup", "evalpack.checks.nearmiss.cells", "evalpack.questions.derive", "evalpack.core.scoring",
                 "evalpack.checks.verification")


def study_keys(tables: str, rotation: str, questions: Mapping[str, Question], mutants: list[Mutant]
               ) -> dict[str, str]:
    """The cache address of each studied question's outcomes on a rotation (question id -> key): SHA-256 over the
    code, DuckDB's version, the :func:`evalpack.checks.verification.tables_digest` of its files, the question's comparison
    (answer type, digits, gold SQL, expected answer) and its mutants in order. Not the question's id, which a
    changed selection renumbers: a question asked again with the same SQL and answer on the same files finds its
    outcomes."""
    common = [f"duckdb {duckdb.__version__}", tables]
    fingerprint = cache.code_fingerprint(STUDYING_CODE)
    runs: dict[str, list[Mutant]] = {}
    for m in mutants:
        runs.setdefault(m.question_id, []).append(m)
    keys = {}
    for qid, studied in runs.items():
        q = questions[qid]
        asked = json.dumps([q.answer_type, q.round_decimals, q.gold_sql, q.expected_for(rotation)], default=repr)
        keys[qid] = cache.entry_key("studies", fingerprint, [*common, asked, _mutants_digest(tuple(studied))])
    return keys


@functools.lru_cache(maxsize=4096)
def _mutants_digest(mutants: tuple[Mutant, ...]) -> str:
    """SHA-256 over what a study runs of ``mutants`` (one question's, in order): the same on every rotation."""
    runs = [[m.operator, m.sql, m.rollup_sql, list(m.subqueries), m.cells and m.cells[0]] for m in mutants]
    return hashlib.sha256(json.dumps(runs).encode()).hexdigest()


def study_outcomes(con: duckdb.DuckDBPyConnection, tables: str | None, rotation: str, questions: Mapping[str, Question],
                   mutants: list[Mutant], types: dict[str, dict[str, str]]) -> dict[Mutant, bool | None]:
    """:func:`study_rotation` of ``mutants`` on a rotation loaded into ``con``; with ``tables``, the
    :func:`evalpack.checks.verification.tables_digest` of its files, through the cache on disk, question by question
    (:func:`study_keys`): only the questions not studied before on files byte for byte these, with the same
    mutants, answer and code, run. A mutant's outcome does not depend on which others run beside it (the plan
    decides only how fast), so the outcomes are the same either way; they are given in the order of ``mutants``."""
    keys = study_keys(tables, rotation, questions, mutants) if tables and cache.cache_dir() else {}
    of_question: dict[str, list[Mutant]] = {}
    for m in mutants:
        of_question.setdefault(m.question_id, []).append(m)
    known: dict[Mutant, bool | None] = {}
    for qid, studied in of_question.items() if keys else ():
        stored = cache.load("studies", keys[qid])
        if isinstance(stored, list) and len(stored) == len(studied) \
                and all(o is None or isinstance(o, bool) for o in stored):
            known.update(zip(studied, stored))
    missing = [m for m in mutants if m not in known]
    if missing:
        known.update(study_rotation(con, rotation, questions, plan_study(con, missing, types)))
        for qid in dict.fromkeys(m.question_id for m in missing) if keys else ():
            cache.store("studies", keys[qid], [known[m] for m in of_question[qid]])
    return {m: known[m] for m in mutants}


def judged(mutant: Mutant, per_rotation: Iterable[Mapping[Mutant, bool | None]]) -> list[bool | None]:
    """``mutant``'s outcomes in rotation order up to and including the first that is not a match."""
    outcomes = []
    for outcomes_here in per_rotation:
        outcomes.append(outcomes_here[mutant])
        if outcomes[-1] is not True:
            break
    return outcomes


def still_studied(mutants: Iterable[Mutant], per_rotation: Iterable[Mapping[Mutant, bool | None]]) -> list[Mutant]:
    """The ``mutants`` whose study goes on to the next rotation: they matched on every rotation so far."""
    earlier = list(per_rotation)
    return [m for m in mutants if all(outcomes.get(m) is True for outcomes in earlier)]


def survives(outcomes: list[bool | None], rotations: int) -> bool:
    """A mutant's :func:`judged` outcomes say it survives: it matched the expected answer on every rotation."""
    return len(outcomes) == rotations and outcomes[-1] is True


def survivors_of(prepared: MutantSet, question_ids: Iterable[str],
                 per_rotation: Mapping[str, Mapping[Mutant, bool | None]]) -> dict[str, tuple[Mutant, ...]]:
    """Per question of ``question_ids`` that has any, its mutants that survive (:func:`survives`), in mutant order:
    the plausible mistakes that return its expected answer on every rotation (``per_rotation`` in seed order)."""
    found: dict[str, list[Mutant]] = {}
    mutants, _ = prepared.of(question_ids)
    for m in mutants:
        if survives(judged(m, per_rotation.values()), len(per_rotation)):
            found.setdefault(m.question_id, []).append(m)
    return {qid: tuple(ms) for qid, ms in found.items()}


def summarize_study(prepared: MutantSet, question_ids: tuple[str, ...],
                    per_rotation: dict[str, dict[Mutant, bool | None]], threshold: float = 0.01,
                    kinds: Mapping[str, str] | None = None, withheld: Collection[str] = ()) -> dict:
    """The manifest's ``near_miss_study`` for ``question_ids``: per operator mutants / equivalent /
    errored / match_first / match_all, overall rates, and up to 50 surviving mutants. A survivor of a
    ``withheld`` question (the holdout's) is counted and not listed: its SQL returns that question's answer.

    ``per_rotation`` is in seed order. A mutant is judged rotation after rotation and its study ends
    at the first rotation where it does not match: it needs an outcome there and on every rotation
    before, none after (:func:`still_studied`), so a build may skip the rotations after a mismatch
    and a run that studied everything everywhere gives the same summary. It errored when that first
    non-match is an error; ``match_first`` counts the mutants that match on the first rotation (what
    a benchmark with one database would accept), ``match_all`` those that match on every rotation.

    With ``kinds`` (question id -> question kind) it also has ``families``: per kind, sorted, the
    questions, the mutants run, how many of them matched on every rotation and that rate (the same
    counts as the per-operator ones). Questions missing from ``kinds`` are in no family."""
    mutants, equivalent = prepared.of(question_ids)
    rotations = list(per_rotation)
    table = {op: {"mutants": 0, "equivalent": equivalent[op], "errored": 0, "match_first": 0, "match_all": 0}
             for op in OPERATORS}
    families: dict[str, dict] = {}
    if kinds is not None:
        for question_id in question_ids:
            if question_id in kinds:
                family = families.setdefault(kinds[question_id], {"questions": 0, "mutants": 0, "match_all": 0})
                family["questions"] += 1
    survivors = []
    for m in mutants:
        row = table[m.operator]
        family = families.get(kinds[m.question_id]) if kinds is not None and m.question_id in kinds else None
        outcomes = judged(m, per_rotation.values())
        if outcomes[-1] is None:
            row["errored"] += 1
            continue
        row["mutants"] += 1
        if family is not None:
            family["mutants"] += 1
        if outcomes[0]:
            row["match_first"] += 1
        if survives(outcomes, len(rotations)):
            row["match_all"] += 1
            if family is not None:
                family["match_all"] += 1
            survivors.append({"question": m.question_id, "operator": m.operator, "sql": m.sql})
    ran = sum(r["mutants"] for r in table.values())
    survival = survival_rate(table) or 0.0
    first_match = sum(r["match_first"] for r in table.values())
    out = {
        "rule": "a mutant survives when it matches the expected answer on every rotation (same comparison "
                "as verification); it is judged rotation after rotation in seed order and its study ends at the "
                "first rotation where it does not match; it errored when that is an error; equivalent and "
                "errored mutants are not counted as run; match_first: matches on the first rotation",
        "equivalence": EQUIVALENCE_RULE,
        "equivalent_by_ranges": prepared.implied_of(question_ids),
        "rotations": rotations,
        "operators": {op: row for op, row in table.items() if row["mutants"] or row["equivalent"] or row["errored"]},
        "mutants_run": ran,
        "match_first_rate": round(first_match / ran, 4) if ran else 0.0,
        "match_all_rate": round(survival, 4),
        "threshold": threshold,
        "survivors": [v for v in survivors if v["question"] not in withheld][:MAX_SURVIVORS_LISTED],
        "survivors_total": len(survivors),
        "survivors_withheld": sum(v["question"] in withheld for v in survivors),
    }
    if kinds is not None:
        out["families"] = {kind: {**row, "match_all_rate": round(row["match_all"] / row["mutants"], 4)
                                  if row["mutants"] else 0.0}
                           for kind, row in sorted(families.items())}
    return out


def study_markdown(study: dict) -> str:
    """The per-operator table as Markdown (CLI output, dataset card, Dagster metadata)."""
    lines = ["| operator | mutants | equivalent | errored | match on the first | match on all |",
             "|---|---:|---:|---:|---:|---:|"]
    for op, r in study.get("operators", {}).items():
        lines.append(f"| {op} | {r['mutants']} | {r['equivalent']} | {r['errored']} | {r['match_first']} | "
                     f"{r['match_all']} |")
    lines.append(f"| **all** | {study.get('mutants_run', 0)} | | | {study.get('match_first_rate', 0):.2%} | "
                 f"{study.get('match_all_rate', 0):.2%} |")
    return "\n".join(lines)


__all__ = ["OPERATORS", "Mutant", "MutantSet", "StudyPlan", "build_mutants", "mutants_of", "plan_study",
           "prepare_mutants", "still_studied", "study_markdown", "study_rotation", "summarize_study", "survivors_of"]
