"""The Dagster code location: definitions, a build identical to the CLI's, blocking checks, sensor, schedule.

Everything runs real Dagster in this process (``materialize`` on a test instance); the code location
itself is validated with ``dagster definitions validate`` in a subprocess, as CI would.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from dagster import (
    AssetKey,
    DagsterInstance,
    FilesystemIOManager,
    PathMetadataValue,
    build_schedule_context,
    build_sensor_context,
    instance_for_test,
    materialize,
)
from dagster._core.storage.defs_state.base import DefsStateStorage
from dagster_duckdb import DuckDBResource

from assets import ALL_ASSETS, ALL_CHECKS, EvalpackResource
from assets.common import WORK as WORK_DIR
from evalpack.build import RotationsChecked
from pipelines.definitions import defs
from pipelines.executors import executor
from pipelines.schedules import weekly_rebuild
from pipelines.sensors import spec_file_sensor

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
EPOCH = "1767225600"  # 2026-01-01T00:00:00Z: fixes the attestation's times (SOURCE_DATE_EPOCH)
STAGES = ["spec", "questions", "rotations", "verification", "certificate", "attestation", "pack"]


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def instance():
    with instance_for_test() as inst:
        yield inst


def resources(tmp: Path, schemas: Path = SCHEMAS) -> dict:
    return {"evalpack": EvalpackResource(schemas_dir=str(schemas), packs_dir=str(tmp / "packs")),
            "duckdb": DuckDBResource(database=":memory:"),
            "io_manager": FilesystemIOManager(base_dir=str(tmp / "io"))}


def build(instance: DagsterInstance, tmp: Path, selection: list[str] | None = None, **spec_config):
    """Materialise (a selection of) the evalpack assets and their checks for partition ``retail``."""
    if "retail" not in instance.get_dynamic_partitions("packs"):
        instance.add_dynamic_partitions("packs", ["retail"])
    config = {"ops": {"spec": {"config": spec_config}}} if selection is None or "spec" in selection else None
    return materialize([*ALL_ASSETS, *ALL_CHECKS], selection=selection, instance=instance, partition_key="retail",
                       resources=resources(tmp), run_config=config, raise_on_error=False)


def materialized(result) -> dict[str, object]:
    """asset name -> its materialisation (from this run's events)."""
    return {e.asset_key.to_user_string(): e.event_specific_data.materialization
            for e in result.get_asset_materialization_events()}


def checks(result) -> dict[str, object]:
    """check name -> its evaluation (from this run's events)."""
    return {e.event_specific_data.check_name: e.event_specific_data
            for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def add_one_to_an_amount(path: Path) -> None:
    """Overwrite one order amount (an order of June 2025, inside every declared window) in a Parquet file."""
    table = pq.read_table(path)
    i = table.schema.get_field_index("amount")
    values = table.column(i).to_pylist()
    days = table.column("ordered_at").to_pylist()
    k = next(j for j, (v, d) in enumerate(zip(values, days, strict=True))
             if v is not None and d is not None and (d.year, d.month) == (2025, 6))
    values[k] += type(values[k])(1)
    pq.write_table(table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type)), path)


# --------------------------------------------------------------------------- definitions


def test_definitions_validate_in_a_subprocess(tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation successful for code location evalpack" in done.stdout + done.stderr


def test_workspace_and_pyproject_name_one_code_location():
    workspace = yaml.safe_load((ROOT / "workspace.yaml").read_text())
    entry = workspace["load_from"][0]["python_module"]
    assert (entry["module_name"], entry["location_name"]) == ("pipelines.definitions", "evalpack")
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    assert tool["dagster"] == {"module_name": "pipelines.definitions", "code_location_name": "evalpack"}
    assert tool["dg"]["project"]["code_location_target_module"] == "pipelines.definitions"
    assert tool["dg"]["project"]["code_location_name"] == "evalpack"


def test_asset_graph_is_one_chain_of_stages_partitioned_by_pack():
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert set(STAGES) <= keys
    parents = {name: {p.to_user_string() for p in graph.get(AssetKey(name)).parent_keys} for name in STAGES}
    assert parents == {
        "spec": set(), "questions": {"spec"}, "rotations": {"spec", "questions"},
        "verification": {"spec", "questions", "rotations"},
        "certificate": {"spec", "questions", "rotations", "verification"},
        "attestation": {"spec", "certificate"}, "pack": {"attestation"},
    }
    # one step per rotation, and it is the engine's per-rotation unit
    nodes = {n.definition.name: n.definition for n in graph.get(AssetKey("rotations")).assets_def.node_def.nodes}
    assert set(nodes) == {"rotation_seeds", "check_rotation", "collect_rotations"}
    assert "duckdb" in nodes["check_rotation"].required_resource_keys  # its connection: the DuckDB resource's
    for name in STAGES:
        assert graph.get(AssetKey(name)).partitions_def.name == "packs"
    blocking = {c.name for c in graph.asset_check_keys if graph.get_check_spec(c).blocking}
    assert blocking == {"rotations_hold_the_answer_key", "shipped_questions_verify_on_every_rotation",
                        "attestation_verifies"}
    assert defs.resolve_job_def("build_pack").executor_def.name == "in_process"


def test_pack_keys_cannot_leave_the_schemas_or_packs_folder():
    settings = EvalpackResource(schemas_dir="/s", packs_dir="/p")
    assert settings.work_dir("retail") == Path("/p/.work/retail")
    assert settings.spec_path("retail.v2") == Path("/s/retail.v2.yaml")
    for key in ("..", "../retail", "a/b", ".hidden", ""):
        with pytest.raises(ValueError, match="pack key"):
            settings.work_dir(key)


def test_only_the_dask_executor_uses_private_dagster_names_and_only_when_chosen():
    sources = [p for folder in ("evalpack", "assets", "pipelines", "publish") for p in (ROOT / folder).rglob("*.py")]
    private = sorted(p.relative_to(ROOT).as_posix() for p in sources if "dagster._" in p.read_text())
    assert private == ["pipelines/dask_executor.py"]
    env = {k: v for k, v in os.environ.items() if k != "EVALPACK_EXECUTOR"}
    code = "import sys, pipelines.definitions; print('pipelines.dask_executor' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def test_executor_is_chosen_by_name():
    assert executor("in_process").name == "in_process"
    assert executor("multiprocess").name == "multiprocess"
    assert executor("dask").name == "dask"
    with pytest.raises(ValueError, match="unknown executor"):
        executor("kubernetes")


# --------------------------------------------------------------------------- a whole build


@pytest.mark.slow
def test_materialising_every_asset_gives_the_pack_evalpack_build_gives(instance, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    cli_out = tmp_path / "cli" / "retail"
    # the CLI build runs beside the Dagster one (two processes), then the packs are compared byte for byte
    cli = subprocess.Popen([sys.executable, "-m", "evalpack.cli", "build", str(SCHEMAS / "retail.yaml"), "-o",
                            str(cli_out), "--seed", "42", "--rotations", "3"], cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    built_on = []  # what each rotation's step built on: the engine decides, the run's resource keeps the checks
    earlier = RotationsChecked.earlier
    monkeypatch.setattr(RotationsChecked, "earlier",
                        lambda self, seed, seeds: built_on.append((seed, r := earlier(self, seed, seeds))) or r)
    try:
        result = build(instance, tmp_path, seed=42, rotations=3)
    finally:
        output, _ = cli.communicate(timeout=300)
    assert cli.returncode == 0, output
    assert result.success
    # in-process steps, one after another in seed order: each studies only what the rotations before it left
    assert [(seed, None if r is None else [c.rotation for c in r]) for seed, r in built_on] == [
        (42, []), (43, ["seed_42"]), (44, ["seed_42", "seed_43"])]
    done = materialized(result)
    assert sorted(done) == sorted(STAGES)
    assert all(c.passed for c in checks(result).values()), checks(result)
    assert set(checks(result)) == {"rotations_hold_the_answer_key", "near_miss_survival_under_threshold",
                                   "shipped_questions_verify_on_every_rotation", "attestation_verifies"}

    pack = tmp_path / "packs" / "retail"
    ours, theirs = files_of(pack), files_of(cli_out)
    assert "attestation.intoto.json" in ours
    assert sorted(ours) == sorted(theirs)
    assert [name for name in ours if ours[name] != theirs[name]] == []
    assert not (tmp_path / "packs" / ".work" / "retail").exists()  # moved into place, not copied

    # what the UI shows
    spec_sha = hashlib.sha256((SCHEMAS / "retail.yaml").read_bytes()).hexdigest()
    assert done["spec"].tags["dagster/data_version"] == f"{spec_sha}+seed=42+rotations=3"
    tables = done["rotations"].metadata
    assert tables["rows_per_table"].value == {r: {"customers": 2000, "orders": 41999}
                                              for r in ("seed_42", "seed_43", "seed_44")}
    assert "orders.amount" in {c.name for c in tables["dagster/column_schema"].schema.columns}
    assert "| orders | 41,999 | 41,999 | 41,999 |" in tables["rows"].value
    verification = done["verification"].metadata
    manifest = json.loads((pack / "manifest.json").read_text())
    assert verification["shipped"].value == manifest["questions"]["shipped"]
    assert "| **all** |" in verification["by_kind"].value
    assert "| operator |" in verification["near_miss"].value
    assert verification["mutants_run"].value == manifest["near_miss_study"]["mutants_run"]
    gate = manifest["near_miss_study"]["gate"]  # the near-miss gate's drops, per operator, as the manifest counts them
    assert verification["gate_dropped"].value == gate["dropped"] > 0
    assert verification["gate_dropped_by_operator"].value == gate["dropped_by_operator"]
    assert done["certificate"].metadata["audit_findings"].value >= 0
    assert done["pack"].metadata["path"].value == str(pack)
    # every path the UI links is there after the run (they named packs/.work/..., gone once the pack moved into place)
    linked = {f"{name}.{key}": value.value for name, m in done.items() for key, value in m.metadata.items()
              if isinstance(value, PathMetadataValue)}
    linked |= {f"{name}.{key}": value.value for name, c in checks(result).items() for key, value in c.metadata.items()
               if isinstance(value, PathMetadataValue)}
    assert {"rotations.folder", "certificate.folder", "attestation.attestation",
            "attestation_verifies.folder"} <= set(linked)
    assert {name: path for name, path in linked.items() if not Path(path).exists() or WORK_DIR in Path(path).parts} \
        == {}


@pytest.mark.slow
def test_the_readme_headless_command_builds_on_a_fresh_dagster_home(tmp_path):
    """README: `export DAGSTER_HOME=...; python -m pipelines.run retail` on a folder Dagster has never seen, then
    `dagster job execute ... --tags '{"dagster/partition": "retail"}'` as written, on the same instance."""
    home, packs = tmp_path / "fresh_home", tmp_path / "dagster_packs"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "EVALPACK_"))}
    env.update({"DAGSTER_HOME": str(home), "EVALPACK_PACKS_DIR": str(packs), "SOURCE_DATE_EPOCH": EPOCH})
    done = subprocess.run([sys.executable, "-m", "pipelines.run", "retail", "--rotations", "2"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "built retail: run " in done.stdout and str(packs / "retail") in done.stdout
    verified = subprocess.run([sys.executable, "-m", "evalpack.cli", "verify", str(packs / "retail")], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=300)
    assert verified.returncode == 0, verified.stdout + verified.stderr

    again = subprocess.run([sys.executable, "-m", "dagster", "job", "execute", "-m", "pipelines.definitions", "-a",
                            "defs", "-j", "build_pack", "--tags", '{"dagster/partition": "retail"}'], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert sorted(p.name for p in (packs / "retail" / "rotations").iterdir()) == ["seed_42", "seed_43", "seed_44"]

    broken = subprocess.run([sys.executable, "-m", "pipelines.run", "nosuchpack"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert broken.returncode == 2 and "nosuchpack.yaml" in broken.stderr and "Traceback" not in broken.stderr
    for override, says in ((["--rotations", "0"], "rotations: at least one rotation is needed"),
                           (["--seed", "-1"], "seed: the seed override '-1' must be an integer")):
        refused = subprocess.run([sys.executable, "-m", "pipelines.run", "retail", *override], cwd=ROOT,
                                 env={**env, "DAGSTER_HOME": str(tmp_path / "never_opened")}, capture_output=True,
                                 text=True, timeout=300)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and says in refused.stderr, refused.stderr
        assert not list((tmp_path / "never_opened").iterdir())  # no instance opened, no run launched


# --------------------------------------------------------------------------- blocking checks


def test_a_rotation_corrupted_after_generation_fails_the_blocking_check_and_stops_the_pack(instance, tmp_path,
                                                                                         monkeypatch):
    module = importlib.import_module("assets.rotations")  # `assets.rotations` is also the asset's name
    write = module.write_rotation

    def write_then_corrupt(spec, plan, folder):
        rows = write(spec, plan, folder)
        if plan.seed == 43:  # what a faulty writer or disk would do, between writing and checking
            add_one_to_an_amount(folder / "rotations" / "seed_43" / "tables" / "orders.parquet")
        return rows

    monkeypatch.setattr(module, "write_rotation", write_then_corrupt)
    result = build(instance, tmp_path, rotations=3)
    assert not result.success
    verdict = checks(result)["rotations_hold_the_answer_key"]
    assert not verdict.passed
    assert verdict.metadata["rotations_affected"].value == ["seed_43"]
    assert sorted(materialized(result)) == ["questions", "rotations", "spec", "verification"]  # nothing after it
    work = tmp_path / "packs" / ".work" / "retail"
    assert not (tmp_path / "packs" / "retail").exists()
    assert not (work / "questions.jsonl").exists() and not (work / "attestation.intoto.json").exists()


def test_a_rotation_corrupted_after_verification_fails_the_pack_check_before_attestation(instance, tmp_path):
    first = build(instance, tmp_path, selection=STAGES[:4], rotations=2)
    assert first.success and checks(first)["rotations_hold_the_answer_key"].passed
    work = tmp_path / "packs" / ".work" / "retail"
    add_one_to_an_amount(work / "rotations" / "seed_42" / "tables" / "orders.parquet")

    rest = build(instance, tmp_path, selection=STAGES[4:], rotations=2)
    assert not rest.success
    verdict = checks(rest)["shipped_questions_verify_on_every_rotation"]
    assert not verdict.passed and "seed_42=" in verdict.metadata["failures"].value
    assert sorted(materialized(rest)) == ["certificate"]
    assert not (work / "attestation.intoto.json").exists()
    assert not (tmp_path / "packs" / "retail").exists()


def test_an_invalid_spec_fails_the_spec_step_with_the_engines_one_line(instance, tmp_path):
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "retail.yaml").write_text((SCHEMAS / "retail.yaml").read_text().replace("rows: 40000", "rows: -5"))
    instance.add_dynamic_partitions("packs", ["retail"])
    result = materialize([*ALL_ASSETS, *ALL_CHECKS], instance=instance, partition_key="retail",
                         resources=resources(tmp_path, schemas), raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "spec"
    description = failure.event_specific_data.user_failure_data.description
    assert description.startswith(f"{schemas / 'retail.yaml'}:") and "rows" in description and "\n" not in description


def test_dagster_never_replaces_a_pack_evalpack_build_wrote(instance, tmp_path):
    """A packs folder that holds CLI-built packs (no Dagster marker) is refused before anything is written."""
    cli_pack = tmp_path / "packs" / "retail"
    cli_pack.mkdir(parents=True)
    (cli_pack / "manifest.json").write_text("{}")
    result = build(instance, tmp_path, rotations=2)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "Dagster did not build" in failure.event_specific_data.user_failure_data.description
    assert sorted(p.name for p in cli_pack.iterdir()) == ["manifest.json"]
    assert EvalpackResource().packs_dir.endswith("packs/dagster")  # its own folder by default


# --------------------------------------------------------------------------- sensor and schedule


def tick(instance: DagsterInstance, schemas: Path, cursor: str | None):
    """One sensor evaluation; applies its partition requests the way the daemon does."""
    # as a context manager: the context enters the instance it opens from the ref, and only its exit
    # leaves Dagster's current-instance state as it was (otherwise a later test can meet a dead instance)
    current = DefsStateStorage.get()
    with build_sensor_context(instance_ref=instance.get_ref(), cursor=cursor, definitions=defs,
                              resources={"evalpack": EvalpackResource(schemas_dir=str(schemas))}) as context:
        data = spec_file_sensor.evaluate_tick(context)
    assert DefsStateStorage.get() is current
    added = [k for r in data.dynamic_partitions_requests or [] for k in r.partition_keys]
    if added:
        instance.add_dynamic_partitions("packs", added)
    return data, added


def test_sensor_registers_new_specs_rebuilds_edited_ones_and_ignores_unchanged_ones(instance, tmp_path):
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    shutil.copy(SCHEMAS / "retail.yaml", schemas)

    data, added = tick(instance, schemas, None)
    sha = hashlib.sha256((schemas / "retail.yaml").read_bytes()).hexdigest()
    assert added == ["retail"]
    assert spec_file_sensor.job_name == "build_pack"
    assert [(r.partition_key, r.tags["dagster/partition"]) for r in data.run_requests] == [("retail", "retail")]
    assert sha in data.run_requests[0].run_key
    first_run_key = data.run_requests[0].run_key

    data, added = tick(instance, schemas, data.cursor)  # nothing changed
    assert (added, data.run_requests) == ([], [])

    shutil.copy(SCHEMAS / "finance.yaml", schemas)  # a new file, picked up on the next tick
    (schemas / "not a pack.yaml").write_text("name: x\n")
    data, added = tick(instance, schemas, data.cursor)
    assert added == ["finance"]
    assert [r.partition_key for r in data.run_requests] == ["finance"]
    assert sorted(instance.get_dynamic_partitions("packs")) == ["finance", "retail"]

    original = (schemas / "retail.yaml").read_text()
    (schemas / "retail.yaml").write_text(original + "# edited\n")
    data, added = tick(instance, schemas, data.cursor)
    edited = hashlib.sha256((schemas / "retail.yaml").read_bytes()).hexdigest()
    assert added == []
    assert [r.partition_key for r in data.run_requests] == ["retail"]
    assert edited in data.run_requests[0].run_key

    data, _ = tick(instance, schemas, data.cursor)
    assert data.run_requests == []

    (schemas / "retail.yaml").write_text(original)  # reverting an edit rebuilds too, under a new run key
    data, _ = tick(instance, schemas, data.cursor)
    assert [r.partition_key for r in data.run_requests] == ["retail"]
    assert sha in data.run_requests[0].run_key
    assert data.run_requests[0].run_key != first_run_key


def test_sensor_skips_an_invalid_spec_saying_where_and_registers_nothing(instance, tmp_path):
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    text = (SCHEMAS / "retail.yaml").read_text()
    (schemas / "broken.yaml").write_text(text.replace("rows: 40000", "rows: lots"), encoding="utf-8")
    assert "rows: lots" in (schemas / "broken.yaml").read_text()
    data, added = tick(instance, schemas, None)
    assert (added, data.run_requests) == ([], [])
    assert f"{schemas / 'broken.yaml'}:" in data.skip_message and "rows" in data.skip_message
    # the file is new: the message says so (it said "no spec file is new or changed" beside the reason)
    assert data.skip_message.startswith("a spec file is new or changed and invalid, so nothing is built: ")
    assert instance.get_dynamic_partitions("packs") == []
    again, _ = tick(instance, schemas, data.cursor)  # still broken: still skipped, still saying why
    reason = data.skip_message.split("nothing is built: ", 1)[1]
    assert again.run_requests == [] and again.skip_message == f"no spec file is new or changed; still invalid: {reason}"
    (schemas / "broken.yaml").write_text(text, encoding="utf-8")  # fixed: registered and built
    fixed, added = tick(instance, schemas, again.cursor)
    assert added == ["broken"] and [r.partition_key for r in fixed.run_requests] == ["broken"]


@pytest.mark.slow
def test_turning_the_sensor_on_again_rebuilds_nothing_that_is_current(instance, tmp_path):
    """The sensor is turned on (a first tick, no cursor), its build runs, and it is turned off and on again: the
    new first tick finds every pack built from its spec's current bytes and starts nothing; an edit still rebuilds."""
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    shutil.copy(SCHEMAS / "retail.yaml", schemas)
    data, added = tick(instance, schemas, None)
    assert added == ["retail"] and [r.partition_key for r in data.run_requests] == ["retail"]
    assert build(instance, tmp_path).success  # the run the sensor asked for (same spec bytes, no overrides)

    for _ in range(2):  # turned on again, with its cursor lost, twice
        data, added = tick(instance, schemas, None)
        assert (added, data.run_requests) == ([], [])
    (schemas / "retail.yaml").write_text((SCHEMAS / "retail.yaml").read_text() + "# edited\n")
    data, _ = tick(instance, schemas, data.cursor)
    assert [r.partition_key for r in data.run_requests] == ["retail"]


def test_weekly_schedule_rebuilds_every_registered_pack_with_a_spec(instance, tmp_path):
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    shutil.copy(SCHEMAS / "retail.yaml", schemas)
    shutil.copy(SCHEMAS / "finance.yaml", schemas)
    instance.add_dynamic_partitions("packs", ["finance", "retail", "gone"])
    monday = dt.datetime(2026, 1, 5, 3, tzinfo=dt.UTC)
    context = build_schedule_context(instance=instance, scheduled_execution_time=monday,
                                     repository_def=defs.get_repository_def(),
                                     resources={"evalpack": EvalpackResource(schemas_dir=str(schemas))})
    data = weekly_rebuild.evaluate_tick(context)
    assert [(r.partition_key, r.run_key) for r in data.run_requests] == [
        ("finance", "weekly:finance:2026-01-05T03:00"), ("retail", "weekly:retail:2026-01-05T03:00")]
    assert weekly_rebuild.cron_schedule == "0 3 * * 1"


def markdown_drops(text: str | None) -> list[str]:
    """What Dagster's UI would not show of a description or a Markdown value: an ``<angle bracketed>`` word outside a
    code span reads as an HTML tag and is dropped ("tagged v<version>" showed as "tagged v")."""
    import re

    return re.findall(r"<[A-Za-z_][^<>]*>", re.sub(r"``[^`]*``|`[^`]*`", "", text or ""))


def test_no_description_the_ui_shows_loses_text_in_angle_brackets():
    from assets.publish import changelog
    from publish.hub import ReleaseCheck

    shown = [(f"asset {spec.key.to_user_string()}", spec.description) for spec in defs.resolve_all_asset_specs()]
    for job in defs.resolve_all_job_defs():
        shown += [(f"job {job.name}", job.description)]
        shown += [(f"op {node.name}", node.description) for node in job.graph.node_defs]
    shown += [(f"sensor {s.name}", s.description) for s in defs.sensors or ()]
    shown += [(f"schedule {s.name}", s.description) for s in defs.schedules or ()]
    shown += [(f"check {c.name}", c.description) for check in ALL_CHECKS for c in check.check_specs]
    shown += [(f"resource field {name}", field.description) for name, field in EvalpackResource.model_fields.items()]
    shown += [("changelog of a first release", changelog(ReleaseCheck(previous=None)))]
    assert len(shown) > 20
    assert {what: markdown_drops(text) for what, text in shown if markdown_drops(text)} == {}
