"""The house follows the data path: imports only go down, no import circle, modules and functions a reader can hold.

Layers: schemas/ -> evalpack/ (engine) -> publish/ -> assets/ -> pipelines/. Inside evalpack, the stages in their
order (:data:`STAGES`): core (the scorer and what every stage shares), spec, data, questions, checks, pack,
dialects, agent, interop, then build.py (the one orchestrator) and cli.py on top. Read from the source with ``ast``:
every ``import`` and ``from ... import`` anywhere in a module, at its top or inside a function, counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "evalpack": {"assets", "pipelines", "publish", "dagster", "dagster_duckdb", "dagster_dask", "dagster_webserver"},
    "publish": {"assets", "pipelines", "dagster"},
    "assets": {"pipelines"},
}
STAGES = ("core", "spec", "data", "questions", "checks", "pack", "dialects", "agent", "interop", "build", "cli")
SCORER = "evalpack/core/scoring.py"  # the standalone scorer: one file, copied into every pack as verify.py
MAX_MODULE_LINES = 1_500
MAX_FUNCTION_LINES = 120
# what is still longer, with its length today: none may grow, none may join (issue 51 splits them)
OVERSIZE_MODULES: dict[str, int] = {}
OVERSIZE_FUNCTIONS = {  # in the scorer: splitting it changes every pack's verify.py, so it waits for a scorer change
                      (SCORER, "_inspect_misata"): 125}


def sources(*folders: str) -> list[Path]:
    return [p for folder in folders for p in sorted((ROOT / folder).rglob("*.py")) if "__pycache__" not in p.parts]


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imports(path: Path) -> list[tuple[str, int]]:
    """Every module ``path`` imports (``from m import x`` as ``m`` and ``m.x``, relative imports resolved), with its
    line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found += [(base, node.lineno)] + [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def imported_packages(path: Path) -> set[str]:
    return {name.split(".")[0] for name, _ in imports(path)}


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "evalpack" and len(parts) > 1 and parts[1] in STAGES else None


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_module_imports_a_layer_above_its_own(layer):
    offenders = {p.relative_to(ROOT).as_posix(): sorted(imported_packages(p) & FORBIDDEN[layer])
                 for p in sources(layer)}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from publish.cli import publish_command\n    import dagster.x\n")
    assert imported_packages(module) == {"publish", "dagster"}


def test_every_engine_module_is_in_a_stage():
    loose = [p.relative_to(ROOT).as_posix() for p in sources("evalpack")
             if stage_of(module_name(p)) is None and p != ROOT / "evalpack" / "__init__.py"]
    assert loose == []


def test_imports_only_go_down_the_stages():
    """A stage imports its own modules and the stages before it, never one after it: in functions neither."""
    upward = [f"{p.relative_to(ROOT).as_posix()}:{line} imports {name}" for p in sources("evalpack")
              if (me := stage_of(module_name(p))) for name, line in imports(p)
              if (other := stage_of(name)) and STAGES.index(other) > STAGES.index(me)]
    assert upward == []


def module_graph(*folders: str) -> dict[str, set[str]]:
    """Module -> the modules of the project it imports (anywhere in it), of ``folders``."""
    known = {module_name(p): p for p in sources(*folders)}
    graph = {}
    for name, path in known.items():
        graph[name] = {m for m, _ in imports(path) if m in known and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_circle_through_a_function_import(tmp_path, monkeypatch):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("from pkg.b import x\n")
    (package / "b.py").write_text("def x():\n    from pkg import a\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert cycles(module_graph("pkg")) == [["pkg.a", "pkg.b"]]


KNOWN_CIRCLES: list[list[str]] = []


def test_no_import_circle_not_even_through_an_import_inside_a_function():
    assert cycles(module_graph("evalpack", "publish", "assets", "pipelines")) == KNOWN_CIRCLES


def test_no_module_is_longer_than_a_reader_can_hold_but_the_scorer():
    long = {p.relative_to(ROOT).as_posix(): n for p in sources("evalpack", "publish", "assets", "pipelines")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    long.pop(SCORER, None)
    grown = {k: n for k, n in long.items() if n > OVERSIZE_MODULES.get(k, MAX_MODULE_LINES)}
    assert grown == {}, f"modules over {MAX_MODULE_LINES} lines (or longer than they were): {grown}"


def test_no_function_is_longer_than_a_reader_can_hold():
    long = {}
    for p in sources("evalpack", "publish", "assets", "pipelines"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                key = (p.relative_to(ROOT).as_posix(), node.name)
                if length > OVERSIZE_FUNCTIONS.get(key, MAX_FUNCTION_LINES):
                    long[key] = length
    assert long == {}, f"functions over {MAX_FUNCTION_LINES} lines (or longer than they were): {long}"


@pytest.mark.parametrize("stage", [s for s in STAGES if (ROOT / "evalpack" / s).is_dir()] + ["checks.nearmiss"])
def test_a_stage_re_exports_what_other_stages_import_from_it(stage):
    import importlib

    package = importlib.import_module(f"evalpack.{stage}")
    assert package.__doc__ and package.__all__
    folder = ROOT / "evalpack" / stage.replace(".", "/")
    submodules = {p.stem for p in folder.glob("*.py")} | {p.name for p in folder.iterdir() if p.is_dir()}
    assert not set(package.__all__) & submodules, "a re-exported name would hide the submodule of the same name"
    for name in package.__all__:
        assert getattr(package, name) is not None, name
    with pytest.raises(AttributeError):
        package.no_such_name  # noqa: B018


def module_state(path: Path) -> list[str]:
    """Module-level names of ``path`` bound to a mutable container (a dict, list or set, displayed or built), but
    ``__all__`` and UPPER_CASE constants."""
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            mutable = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) or (
                isinstance(value, ast.Call) and getattr(value.func, "id", None) in ("dict", "list", "set", "defaultdict"))
            for target in targets:
                if mutable and isinstance(target, ast.Name) and target.id != "__all__" and not (
                        target.id.isupper() and not target.id.startswith("_")):
                    found.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno} {target.id}")
    return found


def test_assets_hold_no_state():
    """Which earlier rotations' results a step may reuse is the engine's decision (evalpack.build.RotationsChecked,
    held by the run's resource); an asset module keeps nothing between steps (it once kept a module-level dict)."""
    assert [s for p in sources("assets", "pipelines") for s in module_state(p)] == []


def test_the_state_check_sees_a_module_level_dict(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    (tmp_path / "m.py").write_text("_CHECKED: dict[str, int] = {}\nLIMITS = {'a': 1}\n__all__ = ['x']\n")
    assert module_state(tmp_path / "m.py") == ["m.py:1 _CHECKED"]


def test_a_rotation_builds_on_every_earlier_rotation_checked_here_or_on_none():
    from evalpack.build import RotationsChecked

    checked = RotationsChecked({7: "c7", 8: "c8"})
    assert checked.earlier(7, (7, 8, 9)) == () and checked.earlier(9, (7, 8, 9)) == ("c7", "c8")
    assert RotationsChecked({8: "c8"}).earlier(9, (7, 8, 9)) is None  # seed 7 ran in another process


def test_the_tests_mirror_the_stages():
    """tests/<stage>/ holds the tests of evalpack/<stage>/ (commands/: build.py and cli.py; publish/ and dagster/:
    the layers above the engine); no test module sits loose in tests/."""
    folders = {p.parent.name for p in (ROOT / "tests").rglob("test_*.py")}
    assert not list((ROOT / "tests").glob("test_*.py"))
    assert folders <= {s for s in STAGES if (ROOT / "evalpack" / s).is_dir()} | {"commands", "publish", "dagster"}
