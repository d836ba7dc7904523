"""Load a pack spec (YAML) into frozen, typed objects, or refuse it with file, line and key path.

The accepted keys are those of SPEC_FORMAT.md: Misata's evalpack names and shapes plus our
extensions. Anything else is refused with the closest valid key; Misata features evalpack does
not support are refused by name.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from evalpack.core.errors import SpecError
from evalpack.spec.crosschecks import ROWS_LIMIT, _check_references, _rotation_rows, _unique_ignoring_case
from evalpack.spec.declarations import (
    _check_dependents,
    _date_by_curve,
    _implied,
    _read_column,
    _read_exports,
    _read_group_shares,
    _read_ledger,
    _read_license,
    _read_outcome_curve,
    _read_per_parent,
    _read_questions,
    _read_rate_curve,
    _read_relationship,
    _read_repo,
    _read_segment_shares,
    _read_semantics,
    _read_time_grid,
    _read_waterfall,
    read_margin,
    read_near_miss,
)
from evalpack.spec.grammar import (
    GATE_POLICIES,
    MAX_NAME_LENGTH,
    MAX_SEED,
    MAX_TABLE_ROWS,
    NAME_RE,
    NOTED_TOP,
    SEMVER_RE,
    TABLE_KEYS,
    TOP_KEYS,
    UNSUPPORTED_TABLE,
    UNSUPPORTED_TOP,
)
from evalpack.spec.model import BalancedLedger, Spec, Table
from evalpack.spec.traps import bind_traps, check_traps, read_traps
from evalpack.spec.yamldoc import _clip, _Doc, _kind, _number, _Reader


def load_spec(path: str | Path, *, seed: int | None = None, rotations: int | None = None) -> Spec:
    """Read, validate and return the spec at ``path``; ``seed``/``rotations`` override the file.

    Raises SpecError (exit code 2) naming the file, line and key path of the first problem.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SpecError(str(path), None, "", f"cannot read the spec: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(str(path), None, "", f"the spec is not UTF-8 ({exc.reason}); save it as UTF-8") from None
    return parse_spec(text, file=str(path), seed=seed, rotations=rotations)


def parse_spec(text: str, *, file: str = "<spec>", seed: int | None = None, rotations: int | None = None) -> Spec:
    """Validate spec ``text`` (named ``file`` in messages) into a Spec."""
    doc = _Doc(file, text)
    r = _Reader(doc)
    top = r.mapping(doc.root, (), TOP_KEYS + tuple(NOTED_TOP), UNSUPPORTED_TOP)
    r.note_misata(top, (), NOTED_TOP)
    default_rows = r.integer(top.get("rows", 100), ("rows",), lo=1, hi=MAX_TABLE_ROWS, limit=ROWS_LIMIT)
    name = top.get("name", Path(file).stem)
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        slug = re.sub(r"[^a-z0-9]+", "_", str(name).lower()).strip("_")
        slug = (slug if NAME_RE.fullmatch(slug or "-") else f"pack_{slug}".rstrip("_"))[:MAX_NAME_LENGTH]
        if not isinstance(name, str) or not name.strip():
            raise r.err(("name",), f"pack name {_clip(str(name))} must match [a-z][a-z0-9_]*; write name: {slug}")
        r.notes.append(f"{file}:{r.line(('name',))}: name: {_clip(name)} is a display name (Misata takes any); "
                       f"evalpack names the dataset, its files and its Hub repo {slug}: write name: {slug} to say so")
        name = slug
    if len(name) > MAX_NAME_LENGTH:
        raise r.err(("name",), f"the pack name is {len(name)} characters long; names are limited to "
                    f"{MAX_NAME_LENGTH}; shorten it")
    version = str(top.get("version", "0.1.0"))
    if not SEMVER_RE.fullmatch(version):
        raise r.err(("version",), f"version {_clip(version)} is not semver (e.g. 1.0.0)")
    answers = top.get("answers", "shared")
    if answers not in ("shared", "rotated"):
        raise r.err(("answers",), f"answers is `shared` or `rotated`, got {_kind(answers)}")
    gate = "off" if top.get("gate") is False else top.get("gate", "block")  # YAML 1.1 reads a bare `off` as false
    if gate not in GATE_POLICIES:
        raise r.err(("gate",), f"gate is `block`, `warn` or `off`, got {_kind(gate)}")
    near_miss = read_near_miss(r, top.get("near_miss"))
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        raise SpecError(file, None, "seed", f"the seed override {_number(seed) if isinstance(seed, int) else seed!r} "
                        f"must be an integer from 0 to {MAX_SEED:,}")

    raw_tables = r.mapping(r.required(top, "tables", ()), ("tables",), tuple(top["tables"]) if isinstance(
        top["tables"], dict) else ())
    if not raw_tables:
        raise r.err(("tables",), "declare at least one table")
    tables: list[Table] = []
    ledgers: list[BalancedLedger] = []
    seen_tables: dict[str, str] = {}
    for tname, raw in raw_tables.items():
        tp = ("tables", tname)
        r.ident(tname, tp, "table")
        _unique_ignoring_case(r, tname, seen_tables, tp, "table", ("tables",))
        tm = r.mapping(raw, tp, TABLE_KEYS, UNSUPPORTED_TABLE, "table key")
        rows = r.integer(tm.get("rows", default_rows), tp + ("rows",), lo=1, hi=MAX_TABLE_ROWS, limit=ROWS_LIMIT)
        raw_cols = r.required(tm, "columns", tp)
        if not isinstance(raw_cols, dict) or not raw_cols:
            raise r.err(tp + ("columns",), "expected a mapping of column name to definition")
        seen_columns: dict[str, str] = {}
        for cn in raw_cols:
            r.ident(cn, tp + ("columns", cn), "column")
            _unique_ignoring_case(r, cn, seen_columns, tp + ("columns", cn), "column", tp + ("columns",))
        cols = tuple(_read_column(r, cn, cv, tp + ("columns", cn), rows) for cn, cv in raw_cols.items())
        _check_dependents(r, cols, tp + ("columns",))
        tables.append(Table(tname, rows, cols, r.line(tp), rows_line=r.line(tp + ("rows",))))
        for i, raw_c in enumerate(r.sequence(tm.get("constraints", []), tp + ("constraints",))):
            ledgers.append(_read_ledger(r, raw_c, tp + ("constraints", i), tname))
    for i, raw_c in enumerate(r.sequence(top.get("constraints", []), ("constraints",))):
        ledgers.append(_read_ledger(r, raw_c, ("constraints", i), None))
    table_map = {t.name: t for t in tables}

    def many(key: str, reader) -> tuple:
        return tuple(reader(r, raw, (key, i)) for i, raw in enumerate(r.sequence(top.get(key, []), (key,))))

    undated: set[tuple[str, str]] = set()  # time columns dated by their curves (_date_by_curve)
    read = {key: many(key, reader) for key, reader in (  # in the order of the file's sections, for messages
        ("relationships", _read_relationship),
        ("outcome_curves", lambda rr, raw, p: _date_by_curve(rr, _read_outcome_curve(rr, raw, p, table_map), table_map,
                                                             undated)),
        ("rate_curves", lambda rr, raw, p: _read_rate_curve(rr, raw, p, table_map)),
        ("group_shares", _read_group_shares),
        ("segment_shares", _read_segment_shares), ("per_parent", _read_per_parent))}
    traps, table_map = read_traps(r, top.get("traps"), table_map)
    table_map = read_margin(r, near_miss.get("margin"), table_map)
    tables = [table_map[t.name] for t in tables]
    semantics = _read_semantics(r, top.get("semantics"), table_map)
    relationships, per_parent, rel_paths, pp_paths = _implied(
        r, top, tables, read["relationships"], read["per_parent"], read["outcome_curves"])

    spec = Spec(
        name=name,
        version=version,
        description=None if top.get("description") is None else str(top["description"]),
        license=_read_license(r, top.get("license", "cc-by-4.0")),
        seed=seed if seed is not None else r.integer(top.get("seed", 42), ("seed",), lo=0, hi=MAX_SEED,
                                                             limit=" (numpy's seed range)"),
        rotations=rotations if rotations is not None else r.integer(top.get("rotations", 1), ("rotations",), 1, 64),
        answers=answers,
        holdout=float(r.number(top.get("holdout", 0), ("holdout",), lo=0.0, hi=1.0)),
        gate=gate,
        gate_margin=float(r.number(top.get("gate_margin", 1.0), ("gate_margin",), lo=0.0, hi=100.0)),
        near_miss_gate=near_miss.get("gate", "drop"),
        tables=tuple(tables),
        relationships=relationships,
        outcome_curves=read["outcome_curves"],
        rate_curves=read["rate_curves"],
        group_shares=read["group_shares"],
        segment_shares=read["segment_shares"],
        per_parent=per_parent,
        waterfalls=many("waterfalls", _read_waterfall),
        time_grids=many("time_grids", _read_time_grid),
        ledgers=tuple(ledgers),
        semantics=semantics,
        traps=bind_traps(r, traps, semantics, table_map),
        questions=_read_questions(r, top.get("questions")),
        repo=_read_repo(r, top.get("repo")),
        exports=_read_exports(r, top.get("exports")),
        path=file,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        source=text,
        notes=tuple(r.notes),
    )
    if spec.rotations < 1:
        raise SpecError(file, None, "rotations", "at least one rotation is needed")
    _check_references(r, spec, rel_paths, pp_paths)
    _rotation_rows(r, spec)
    check_traps(r, spec)
    return spec
