"""Smoke test: `dagster dev` serves the code location and builds a pack launched through its GraphQL API.

The server runs headless on a free loopback port with a temporary DAGSTER_HOME, and reads specs from
and writes packs to temporary folders (EVALPACK_SCHEMAS_DIR / EVALPACK_PACKS_DIR). It is stopped by
its process id: the whole process group it leads (webserver, daemon, code server, run workers).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from evalpack.core.scoring import run_gold

ROOT = Path(__file__).resolve().parents[2]
LOCATION = {"repositoryLocationName": "evalpack", "repositoryName": "__repository__"}

LOCATION_STATUS = """
query { workspaceOrError { __typename ... on Workspace { locationEntries {
  name loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }
"""
ADD_PARTITION = """
mutation Add($repositorySelector: RepositorySelector!, $partitionsDefName: String!, $partitionKey: String!) {
  addDynamicPartition(repositorySelector: $repositorySelector, partitionsDefName: $partitionsDefName,
                      partitionKey: $partitionKey) {
    __typename ... on AddDynamicPartitionSuccess { partitionKey } ... on PythonError { message }
    ... on DuplicateDynamicPartitionError { partitionName } ... on UnauthorizedError { message } } }
"""
LAUNCH = """
mutation Launch($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message stack }
    ... on RunConfigValidationInvalid { errors { message } } ... on InvalidSubsetError { message } } }
"""
RUN_STATUS = """
query Run($runId: ID!) { runOrError(runId: $runId) { __typename ... on Run { status } } }
"""
FINISHED = {"SUCCESS", "FAILURE", "CANCELED"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(base: str, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(f"{base}/graphql", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.loads(response.read())
    assert "errors" not in answer, answer
    return answer["data"]


def wait_for(what: str, probe, timeout: float, server: subprocess.Popen, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, f"dagster dev exited while waiting for {what}:\n{log.read_text()[-4000:]}"
        try:
            value = probe()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            value = None
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-4000:]}")


def stop(server: subprocess.Popen) -> None:
    """Stop `dagster dev` and everything it started: its process group, by the server's process id."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)  # any straggler left in the group


@pytest.mark.slow
def test_dagster_dev_builds_a_pack_launched_through_graphql(tmp_path):
    home, schemas, packs = tmp_path / "dagster_home", tmp_path / "schemas", tmp_path / "packs"
    home.mkdir()
    schemas.mkdir()
    shutil.copy(ROOT / "schemas" / "retail.yaml", schemas)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "DAGSTER_HOME": str(home), "EVALPACK_SCHEMAS_DIR": str(schemas),
           "EVALPACK_PACKS_DIR": str(packs), "SOURCE_DATE_EPOCH": "1767225600"}
    log = tmp_path / "dagster_dev.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "dagster", "dev", "-w", str(ROOT / "workspace.yaml"),
                                   "-h", "127.0.0.1", "-p", str(port)], cwd=ROOT, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def server_info():
            with urllib.request.urlopen(f"{base}/server_info", timeout=5) as response:
                return json.loads(response.read()) if response.status == 200 else None

        assert "dagster_webserver_version" in wait_for("/server_info", server_info, 180, server, log)

        def location_loaded():
            entries = graphql(base, LOCATION_STATUS)["workspaceOrError"]["locationEntries"]
            entry = next(e for e in entries if e["name"] == "evalpack")
            assert entry["locationOrLoadError"] is None or entry["locationOrLoadError"]["__typename"] != \
                "PythonError", entry
            return entry["loadStatus"] == "LOADED" and entry["locationOrLoadError"] is not None

        wait_for("the evalpack code location", location_loaded, 180, server, log)

        added = graphql(base, ADD_PARTITION, {"repositorySelector": LOCATION, "partitionsDefName": "packs",
                                              "partitionKey": "retail"})["addDynamicPartition"]
        assert added["__typename"] == "AddDynamicPartitionSuccess", added
        launched = graphql(base, LAUNCH, {"executionParams": {
            "selector": {**LOCATION, "jobName": "build_pack"},
            "runConfigData": {"ops": {"spec": {"config": {"rotations": 2}}}},
            "executionMetadata": {"tags": [{"key": "dagster/partition", "value": "retail"}]},
        }})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]

        def finished():
            status = graphql(base, RUN_STATUS, {"runId": run_id})["runOrError"]["status"]
            return status if status in FINISHED else None

        assert wait_for(f"run {run_id}", finished, 420, server, log) == "SUCCESS", log.read_text()[-4000:]
    finally:
        stop(server)

    pack = packs / "retail"
    for name in ("questions.jsonl", "certificate.json", "manifest.json", "verify.py", "attestation.intoto.json"):
        assert (pack / name).is_file(), name
    assert sorted(p.name for p in (pack / "rotations").iterdir()) == ["seed_42", "seed_43"]
    passed, total, _ = run_gold(pack)
    assert total > 0 and passed == total
    assert not (packs / ".work" / "retail").exists()
