"""The pack built by the Dagster job on a dask.distributed cluster (issue 10): the steps run in dask worker
processes, and the pack is byte-identical to the one ``evalpack build`` writes.

The test starts a real ``LocalCluster`` (two worker processes), then runs ``build_pack`` the way an operator
would: ``dagster job execute`` in a subprocess (the run coordinator) with ``EVALPACK_EXECUTOR=dask`` and
``EVALPACK_DASK_SCHEDULER`` pointing at the cluster, on a persistent instance in a temporary DAGSTER_HOME.
Where each step ran is read back from three independent records: the process ids the workers report to
``client.run(os.getpid)``, the pid Dagster stamps on every event (written to the instance's event log by the
process that ran the step), and the scheduler's own task stream (which worker ran which task).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus
from dask.distributed import Client, LocalCluster, get_task_stream

from evalpack.build import build_pack

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
EPOCH = "1767225600"  # 2026-01-01T00:00:00Z: fixes the attestation's times (SOURCE_DATE_EPOCH)
# two rotations: steps fan out to both workers as with three, each rotation step a process start of its own
ROTATIONS = [f"rotations.check_rotation[seed_{s}]" for s in (42, 43)]


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def step_events(instance: DagsterInstance, run_id: str, kind: DagsterEventType) -> dict[str, object]:
    """step key -> its event of ``kind`` in the run's event log (as the process that ran the step wrote it)."""
    return {e.dagster_event.step_key: e.dagster_event for e in instance.all_logs(run_id, of_type=kind)}


@pytest.mark.slow
def test_build_pack_on_a_dask_cluster_runs_steps_in_workers_and_matches_evalpack_build(tmp_path, monkeypatch):
    home, packs = tmp_path / "dagster_home", tmp_path / "packs"
    home.mkdir()
    # step logs are not captured: the capture's `tail -F` helpers, started in the dask workers, outlive its 30 s
    # clean-up under pytest-xdist (a minute lost per step); this test is about where the steps run
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\ncompute_logs:\n"
                                       "  module: dagster._core.storage.noop_compute_log_manager\n"
                                       "  class: NoOpComputeLogManager\n")
    # set before the cluster starts: its worker processes inherit them (workers load the code location themselves)
    for name, value in {"DAGSTER_HOME": home, "EVALPACK_PACKS_DIR": packs, "EVALPACK_SCHEMAS_DIR": SCHEMAS,
                        "SOURCE_DATE_EPOCH": EPOCH, "EVALPACK_EXECUTOR": "dask"}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("EVALPACK_SIGNING_KEY", raising=False)
    (tmp_path / "run.yaml").write_text("ops:\n  spec:\n    config:\n      rotations: 2\n")

    with (LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as cluster,
          Client(cluster) as client, DagsterInstance.from_config(str(home)) as instance):
        workers: dict[str, int] = client.run(os.getpid)  # dask worker address -> its process id
        assert len(set(workers.values())) == 2 and os.getpid() not in workers.values()
        instance.add_dynamic_partitions("packs", ["retail"])
        env = {**os.environ, "EVALPACK_DASK_SCHEDULER": cluster.scheduler_address}
        log = tmp_path / "dagster.log"
        with get_task_stream(client=client) as stream, log.open("w") as out:
            run = subprocess.Popen([sys.executable, "-m", "dagster", "job", "execute", "-m", "pipelines.definitions",
                                    "-a", "defs", "-j", "build_pack", "-c", str(tmp_path / "run.yaml"),
                                    "--tags", json.dumps({"dagster/partition": "retail"})],
                                   cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
            try:
                code = run.wait(timeout=240)
            finally:
                if run.poll() is None:  # timed out: stop the process this test started, then fail
                    run.kill()
                    run.wait()
            assert code == 0, log.read_text()[-5000:]
        tasks = {t["key"]: t["worker"] for t in stream.data}  # dask task key -> address of the worker that ran it

        (record,) = instance.get_run_records()
        assert record.dagster_run.status == DagsterRunStatus.SUCCESS
        run_id = record.dagster_run.run_id
        (engine,) = [e.dagster_event for e in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)
                     if (e.dagster_event.message or "").startswith("Executing steps on dask cluster")]
        started = step_events(instance, run_id, DagsterEventType.STEP_START)
        on_worker = step_events(instance, run_id, DagsterEventType.STEP_WORKER_STARTED)
        successes = step_events(instance, run_id, DagsterEventType.STEP_SUCCESS)

    # (a) the run coordinator is the `dagster job execute` process; it used this cluster
    assert engine.pid == run.pid
    assert engine.engine_event_data.metadata["scheduler"].value == cluster.scheduler_address
    assert set(ROTATIONS) <= set(successes) and set(started) == set(successes)
    for key, event in started.items():  # every step, rotations included, ran in one of the cluster's workers
        assert event.pid in workers.values(), (key, event.pid, workers)
        assert event.pid not in (os.getpid(), run.pid)
        address = on_worker[key].engine_event_data.metadata["dask_worker"].value
        assert workers[address] == event.pid  # the worker the step reports is the process that ran it
        assert tasks[f"build_pack-{run_id}-{key}"] == address  # and the one dask's scheduler gave the task to

    # (b) byte-identical, file by file, to `evalpack build schemas/retail.yaml -o X --rotations 2`
    cli = tmp_path / "cli" / "retail"
    build_pack(SCHEMAS / "retail.yaml", cli, rotations=2)
    ours, theirs = files_of(packs / "retail"), files_of(cli)
    assert "attestation.intoto.json" in ours and any(name.endswith(".parquet") for name in ours)
    assert sorted(ours) == sorted(theirs)
    assert [name for name in ours if ours[name] != theirs[name]] == []
