"""The Hub release from Dagster: ``hub_release`` (job ``publish_pack``) against the fake Hub of tests/fakehub.py.

The pack is built by the code location's real ``build_pack`` job and released by its real ``publish_pack`` job,
each run with ``dagster job execute -m pipelines.definitions`` in a subprocess whose environment configures the
resources the way a deployment does (``EVALPACK_PACKS_DIR``, ``EVALPACK_HUB_REPO``, ``HF_TOKEN``, ``HF_ENDPOINT``).
As in test_publish.py, ``HF_ENDPOINT`` is set before huggingface_hub is imported (it reads it at import time),
its caches live in a temporary folder and every other host goes to a dead proxy. The runs share one
``DAGSTER_HOME``, which the test then reads: the materialisation's metadata, the event log, and every byte
the instance stored (the token must be in none of them).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import copy_pack
from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DagsterInstance,
    DagsterRunStatus,
    EnvVar,
    Failure,
    FilesystemIOManager,
    RunsFilter,
    UrlMetadataValue,
    instance_for_test,
    materialize,
)
from dagster_duckdb import DuckDBResource
from fakehub import client_env, git_blob_sha1
from test_dagster import add_one_to_an_amount

from assets import ALL_ASSETS, ALL_CHECKS, EvalpackResource
from assets.publish import HUB_GROUP, HubResource
from evalpack.build import build_pack
from evalpack.pack.diff import diff_packs, load_side
from pipelines.definitions import defs
from pipelines.jobs import publish_pack
from pipelines.resources import hub_resource
from pipelines.schedules import weekly_rebuild
from pipelines.sensors import spec_file_sensor
from publish.layout import build_layout

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
REPO_TEMPLATE = "tester/{pack}-evalpack"
REPO = "tester/retail-evalpack"
EPOCH = "1767225600"


@pytest.fixture(scope="module")
def deployment(hub, tmp_path_factory) -> dict:
    """A deployment's folders and environment: its own DAGSTER_HOME and packs folder, the Hub configured."""
    base = tmp_path_factory.mktemp("dagster_publish")
    home, packs, hf_home = base / "dagster_home", base / "packs", base / "hf_home"
    home.mkdir()
    env = client_env(hub, hf_home, drop=("EVALPACK_", "DAGSTER_"))
    env.update({
        "DAGSTER_HOME": str(home),
        "EVALPACK_SCHEMAS_DIR": str(SCHEMAS),
        "EVALPACK_PACKS_DIR": str(packs),
        "EVALPACK_EXECUTOR": "in_process",
        "EVALPACK_HUB_REPO": REPO_TEMPLATE,
        "SOURCE_DATE_EPOCH": EPOCH,
    })
    with DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("packs", ["retail"])
    config = base / "build.yaml"
    config.write_text(json.dumps({"ops": {"spec": {"config": {"rotations": 2}}}}), encoding="utf-8")
    return {"env": env, "home": home, "packs": packs, "build_config": config}


def run_job(deployment: dict, job: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``dagster job execute`` of the code location's job for partition ``retail``, as an operator would."""
    return subprocess.run([sys.executable, "-m", "dagster", "job", "execute", "-m", "pipelines.definitions",
                           "-j", job, "--tags", json.dumps({"dagster/partition": "retail"}), *args],
                          cwd=ROOT, env=env or deployment["env"], capture_output=True, text=True, timeout=300)


def runs_of(instance: DagsterInstance, job: str) -> list:
    return sorted(instance.get_runs(RunsFilter(job_name=job)), key=lambda r: instance.get_run_record_by_id(
        r.run_id).create_timestamp)


def stored_with(folder: Path, text: str) -> list[str]:
    """The files the Dagster instance keeps (run and event databases, compute logs, storage) that hold ``text``."""
    return [p.relative_to(folder).as_posix() for p in sorted(folder.rglob("*"))
            if p.is_file() and text.encode() in p.read_bytes()]


def commits_and_tags(requests: list) -> tuple[int, int]:
    """(commits, tags) created by these fake Hub requests."""
    posts = [r for r in requests if r.method == "POST"]
    return sum("/commit/" in r.path for r in posts), sum("/tag/" in r.path for r in posts)


# --------------------------------------------------------------------------- the release, through the code location


@pytest.fixture(scope="module")
def released(hub, deployment):
    """retail built by build_pack (the Hub configured, yet untouched), then released by publish_pack."""
    build = run_job(deployment, "build_pack", "-c", str(deployment["build_config"]))
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-6000:]
    build_requests = list(hub.requests)
    hub.clear_requests()
    release = run_job(deployment, "publish_pack")
    assert release.returncode == 0, release.stdout[-3000:] + release.stderr[-6000:]
    release_requests = list(hub.requests)
    return {"build": build, "release": release, "build_requests": build_requests,
            "release_requests": release_requests}


def test_publish_pack_job_releases_the_pack_build_pack_built(hub, deployment, released):
    assert released["build_requests"] == []  # building never talks to the Hub, even with the Hub configured
    pack = deployment["packs"] / "retail"
    assert (pack / "attestation.intoto.json").is_file()

    # the fake Hub: the repo from the template, one commit with the whole layout, the tag v1.0.0 on it
    repo = hub.repos[("dataset", REPO)]
    assert set(repo.tags) == {"v1.0.0"}
    assert commits_and_tags(released["release_requests"]) == (1, 1)
    history = hub.history(REPO)
    assert [c.oid for c in history] == [repo.tags["v1.0.0"], history[1].oid] and history[1].parent is None
    expected = {f.path: git_blob_sha1(f.read_bytes()) for f in build_layout(pack, REPO, hub.url).files}
    assert {p: git_blob_sha1(b) for p, b in hub.files(REPO, "v1.0.0").items() if p != ".gitattributes"} == expected
    assert "rotations/seed_43/tables/orders.parquet" in expected and "data/questions/dev.parquet" in expected
    assert "README.md" in expected and not any(p.endswith(".holdout-key") for p in expected)

    # what the asset's page shows
    with DagsterInstance.from_config(str(deployment["home"])) as instance:
        [build_run] = runs_of(instance, "build_pack")
        [release_run] = runs_of(instance, "publish_pack")
        assert build_run.status == release_run.status == DagsterRunStatus.SUCCESS
        assert release_run.tags["dagster/partition"] == "retail"
        assert instance.fetch_materializations(AssetKey("hub_release"), limit=10).records[0].run_id == \
            release_run.run_id
        built = {e.asset_materialization.asset_key.to_user_string()
                 for e in instance.all_logs(build_run.run_id) if e.asset_materialization}
        assert "pack" in built and "hub_release" not in built  # the build job leaves the Hub alone
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey("hub_release"), asset_partitions=["retail"]), limit=10).records
        assert len(records) == 1
        metadata = records[0].asset_materialization.metadata
        logs = instance.all_logs(release_run.run_id)
    assert isinstance(metadata["repo_url"], UrlMetadataValue)
    assert metadata["repo_url"].value == f"{hub.url}/datasets/{REPO}"
    assert metadata["repo"].value == REPO
    assert metadata["tag"].value == "v1.0.0"
    assert isinstance(metadata["tag_url"], UrlMetadataValue)
    assert metadata["tag_url"].value == f"{hub.url}/datasets/{REPO}/tree/v1.0.0"
    assert metadata["commit_sha"].value == repo.tags["v1.0.0"]
    assert metadata["commit_url"].value.endswith(f"/commit/{repo.tags['v1.0.0']}")
    assert metadata["files"].value == len(expected)
    assert metadata["deleted"].value == 0 and metadata["deleted_files"].value == []
    assert metadata["already_published"].value is False
    assert metadata["private"].value is False
    assert f'load_dataset("{REPO}", "questions", revision="v1.0.0")' in metadata["how_to_load"].value
    assert metadata["changelog"].value.startswith("first release") and metadata["previous_release"].value == ""
    messages = "\n".join(e.user_message for e in logs)
    assert f"tagged v1.0.0 at {repo.tags['v1.0.0'][:12]}" in messages  # publish_pack's steps, in the run's log

    # the token: in no event, no stored byte of the instance, no output; the repo id is (the scan sees them)
    assert stored_with(deployment["home"], REPO) and stored_with(deployment["home"], repo.tags["v1.0.0"])
    assert stored_with(deployment["home"], hub.token) == []
    assert hub.token not in messages
    assert all(hub.token not in repr(e) for e in logs)
    for run in (released["build"], released["release"]):
        assert hub.token not in run.stdout + run.stderr


def test_releasing_the_same_pack_again_sends_no_commit(hub, deployment, released):
    tag_commit = hub.repos[("dataset", REPO)].tags["v1.0.0"]
    hub.clear_requests()
    again = run_job(deployment, "publish_pack")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-6000:]
    assert commits_and_tags(hub.requests) == (0, 0)
    assert hub.repos[("dataset", REPO)].tags == {"v1.0.0": tag_commit}
    with DagsterInstance.from_config(str(deployment["home"])) as instance:
        latest = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey("hub_release"), asset_partitions=["retail"]), limit=1).records[0]
        metadata = latest.asset_materialization.metadata
    assert metadata["already_published"].value is True
    assert metadata["commit_sha"].value == tag_commit and metadata["tag"].value == "v1.0.0"
    assert metadata["changelog"].value == "already published: nothing changed"
    assert stored_with(deployment["home"], hub.token) == []


def test_the_release_gate_fails_the_run_with_the_diff_as_a_table(hub, deployment, released, tmp_path_factory):
    """A rebuild whose January target changed but whose version did not: publish_pack fails before any write,
    the failure's metadata holds the reasons and the diff as a Markdown table, and the tag stays where it was."""
    folder = tmp_path_factory.mktemp("retargeted")
    text = (SCHEMAS / "retail.yaml").read_text(encoding="utf-8")
    old = "{month: 1, target_value: 980000.37}"
    assert text.count(old) == 1
    (folder / "retail.yaml").write_text(text.replace(old, "{month: 1, target_value: 980123.45}"), encoding="utf-8")
    build_pack(folder / "retail.yaml", folder / "built", rotations=2)
    packs = folder / "packs"
    copy_pack(folder / "built", packs / "retail")  # the partition's pack, its answer key beside it
    changed = diff_packs(load_side(deployment["packs"] / "retail"), load_side(packs / "retail"))
    questions = [*changed.answers, *changed.commitments]
    assert questions and not changed.version_changed

    before = dict(hub.repos[("dataset", REPO)].tags)
    hub.clear_requests()
    run = run_job(deployment, "publish_pack", env=dict(deployment["env"], EVALPACK_PACKS_DIR=str(packs)))
    assert run.returncode != 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert [r for r in hub.requests if r.method not in ("GET", "HEAD")] == []  # nothing written
    assert hub.repos[("dataset", REPO)].tags == before
    with DagsterInstance.from_config(str(deployment["home"])) as instance:
        latest = runs_of(instance, "publish_pack")[-1]
        assert latest.status == DagsterRunStatus.FAILURE
        [failure] = [e.dagster_event for e in instance.all_logs(latest.run_id)
                     if e.dagster_event and e.dagster_event.event_type_value == "STEP_FAILURE"]
    data = failure.event_specific_data.user_failure_data
    assert "blocked by the gate against the last release v1.0.0" in data.description
    assert "nothing was sent" in data.description and "gate: warn" in data.description
    metadata = data.metadata
    assert metadata["blocked"].value is True and metadata["gate"].value == "block"
    assert metadata["previous_release"].value == "v1.0.0"
    reasons = metadata["reasons"].value
    table = metadata["diff"].value.splitlines()
    assert table[:2] == ["| question | identity | change | old | new |", "|---|---|---|---|---|"]
    for q in questions:
        assert any(r.startswith("answer") and f"{q.new_id} (key {q.identity})" in r for r in reasons), q
        assert any(row.startswith(f"| {q.new_id} | {q.identity} | answer") for row in table), q
    assert stored_with(deployment["home"], hub.token) == []


# --------------------------------------------------------------------------- a failed build publishes nothing


def test_a_failing_blocking_check_leaves_nothing_to_release(hub, tmp_path, monkeypatch):
    """A rotation corrupted between writing and checking fails rotations_hold_the_answer_key, so no pack is
    finished; publish_pack then refuses, saying to build first, and nothing reaches the Hub."""
    import importlib

    module = importlib.import_module("assets.rotations")
    write = module.write_rotation

    def write_then_corrupt(spec, plan, folder):
        rows = write(spec, plan, folder)
        if plan.seed == 43:
            add_one_to_an_amount(folder / "rotations" / "seed_43" / "tables" / "orders.parquet")
        return rows

    monkeypatch.setattr(module, "write_rotation", write_then_corrupt)
    resources = {"evalpack": EvalpackResource(schemas_dir=str(SCHEMAS), packs_dir=str(tmp_path / "packs")),
                 "io_manager": FilesystemIOManager(base_dir=str(tmp_path / "io")),
                 "duckdb": DuckDBResource(database=":memory:"),
                 "hub": HubResource(repo="tester/blocked", token=hub.token, endpoint=hub.url)}
    config = {"ops": {"spec": {"config": {"rotations": 2}}}}
    hub.clear_requests()
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("packs", ["retail"])
        built = materialize([*ALL_ASSETS, *ALL_CHECKS], instance=instance, partition_key="retail",
                            resources=resources, run_config=config, raise_on_error=False)
        assert not built.success
        failed = [e.event_specific_data for e in built.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        assert [c.check_name for c in failed if not c.passed] == ["rotations_hold_the_answer_key"]
        assert "pack" not in {e.asset_key.to_user_string() for e in built.get_asset_materialization_events()}
        release = publish_pack.execute_in_process(instance=instance, partition_key="retail", resources=resources,
                                                  raise_on_error=False)
    assert not release.success
    [failure] = [e for e in release.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "no finished pack" in failure.event_specific_data.user_failure_data.description
    assert hub.requests == [] and ("dataset", "tester/blocked") not in hub.repos


# --------------------------------------------------------------------------- wiring and configuration (no network)


def test_hub_release_is_its_own_job_downstream_of_pack_and_no_materialize_button_runs_it():
    graph = defs.resolve_asset_graph()
    node = graph.get(AssetKey("hub_release"))
    assert {k.to_user_string() for k in node.parent_keys} == {"pack"}
    assert node.partitions_def.name == "packs" and node.group_name == HUB_GROUP
    # "Materialize all" materialises what is materialisable: hub_release is not; only publish_pack records it
    assert not node.is_materializable
    assert AssetKey("hub_release") not in graph.materializable_asset_keys
    job = defs.resolve_job_def("publish_pack")
    assert [n.definition.name for n in job.graph.nodes] == ["release_to_hub"]
    assert job.partitions_def.name == "packs"
    build = defs.resolve_job_def("build_pack").asset_layer.selected_asset_keys
    assert AssetKey("pack") in build and AssetKey("hub_release") not in build
    assert spec_file_sensor.job_name == weekly_rebuild.job_name == "build_pack"  # automation never publishes


def test_the_hub_resource_is_read_from_the_environment(monkeypatch):
    for name in ("EVALPACK_HUB_REPO", "EVALPACK_HUB_HOLDOUT_REPO", "HF_TOKEN", "HF_ENDPOINT", "EVALPACK_HUB_PRIVATE"):
        monkeypatch.delenv(name, raising=False)
    unset = hub_resource()
    assert (unset.repo, unset.holdout_repo, unset.token, unset.endpoint, unset.private) == (None, None, None, None,
                                                                                              False)
    with pytest.raises(Failure, match="EVALPACK_HUB_REPO"):
        unset.repo_for("retail")

    monkeypatch.setenv("EVALPACK_HUB_REPO", REPO_TEMPLATE)
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value_0123456789")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("EVALPACK_HUB_PRIVATE", "true")
    monkeypatch.setenv("EVALPACK_HUB_HOLDOUT_REPO", "tester/{pack}-key")
    wired = hub_resource()
    # the definitions hold the variables' names, resolved in the run's process, never the values
    assert [type(v) for v in (wired.repo, wired.holdout_repo, wired.token, wired.endpoint)] == [EnvVar] * 4
    assert (wired.repo, wired.holdout_repo, wired.token, wired.endpoint) == (
        "EVALPACK_HUB_REPO", "EVALPACK_HUB_HOLDOUT_REPO", "HF_TOKEN", "HF_ENDPOINT")
    assert "hf_secret_value_0123456789" not in repr(wired)
    assert wired.private is True
    assert HubResource(repo=REPO_TEMPLATE).repo_for("finance") == "tester/finance-evalpack"
    assert HubResource(repo=REPO, holdout_repo="tester/{pack}-key").holdout_repo_for("retail") == "tester/retail-key"
    assert HubResource(repo=REPO).holdout_repo_for("retail") is None


def test_without_a_repo_the_release_fails_saying_what_to_set(hub, tmp_path):
    resources = {"evalpack": EvalpackResource(schemas_dir=str(SCHEMAS), packs_dir=str(tmp_path / "packs")),
                 "hub": HubResource(endpoint=hub.url)}
    hub.clear_requests()
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("packs", ["retail"])
        result = publish_pack.execute_in_process(instance=instance, partition_key="retail", resources=resources,
                                                 raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "EVALPACK_HUB_REPO" in failure.event_specific_data.user_failure_data.description
    assert hub.requests == []
