"""The fake Hub's large-file path (issue 18): Parquet goes through Git LFS as on the real Hub.

The real ``huggingface_hub`` and ``datasets`` clients run in subprocesses whose environment comes from
``fakehub.client_env`` (``HF_ENDPOINT`` on the fake Hub, ``HF_HUB_DISABLE_XET=1``, caches in temporary
folders, every other host behind a dead proxy), as in test_publish.py; the test reads the fake Hub's
state and recorded requests to prove which path each file took.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fakehub import LFS_THRESHOLD, client_env, git_blob_sha1, lfs_pointer, lfs_tracked

ROOT = Path(__file__).resolve().parents[2]
REPO = "tester/lfs-check"
MODEL = "tester/lfs-model"
BATCH = f"/datasets/{REPO}.git/info/lfs/objects/batch"
VERIFY = f"/datasets/{REPO}.git/info/lfs/objects/verify"
README = f"""---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train.parquet
---
# {REPO}
"""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run(env: dict, script: str, *args: str) -> dict:
    """Run ``script`` with the real clients; it prints one JSON line last."""
    proc = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy


def call(method: str, url: str, body: bytes = b"", headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body or None, method=method, headers=headers or {})
    try:
        with opener().open(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> dict[str, Path]:
    """The files to upload: a Parquet written with pyarrow, a small JSON, a card with a ``configs:`` block, and
    for the model repo a binary file just over the size threshold and a small one."""
    folder = tmp_path_factory.mktemp("lfs_files")
    table = pa.table({"id": list(range(500)), "name": [f"row {i}" for i in range(500)]})
    pq.write_table(table, folder / "train.parquet")
    (folder / "meta.json").write_text(json.dumps({"rows": 500}), encoding="utf-8")
    (folder / "README.md").write_text(README, encoding="utf-8")
    (folder / "big.bin").write_bytes(b"\x01" * (LFS_THRESHOLD + 1))
    (folder / "small.bin").write_bytes(b"\x01" * 100)
    return {p.name: p for p in folder.iterdir()}


@pytest.fixture(scope="module")
def env(hub, tmp_path_factory) -> dict[str, str]:
    return client_env(hub, tmp_path_factory.mktemp("hf_home"))


UPLOAD = r"""
import json, sys
from pathlib import Path
from huggingface_hub import CommitOperationAdd, HfApi
folder = Path(sys.argv[1])
api = HfApi()
api.create_repo("tester/lfs-check", repo_type="dataset")
info = api.create_commit("tester/lfs-check", [
    CommitOperationAdd("data/train.parquet", str(folder / "train.parquet")),
    CommitOperationAdd("meta.json", str(folder / "meta.json")),
    CommitOperationAdd("README.md", str(folder / "README.md")),
], commit_message="data", repo_type="dataset")
api.create_repo("tester/lfs-model")
model = api.create_commit("tester/lfs-model", [
    CommitOperationAdd("weights/big.bin", str(folder / "big.bin")),
    CommitOperationAdd("small.bin", str(folder / "small.bin")),
], commit_message="weights")
print(json.dumps({"commit": info.oid, "model": model.oid}))
"""


@pytest.fixture(scope="module")
def uploaded(hub, env, local) -> dict:
    hub.clear_requests()
    out = run(env, UPLOAD, str(local["train.parquet"].parent))
    out["requests"] = list(hub.requests)
    return out


READ = r"""
import hashlib, json, os, sys
from pathlib import Path
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
repo, cache = sys.argv[1], sys.argv[2]
api = HfApi()
def lfs(info):
    return None if info.lfs is None else {"sha256": info.lfs.sha256, "size": info.lfs.size,
                                          "pointer_size": info.lfs.pointer_size}
def entry(f):
    return {"blob_id": f.blob_id, "size": f.size, "lfs": lfs(f)}
tree = {f.path: entry(f) for f in api.list_repo_tree(repo, repo_type="dataset", recursive=True) if hasattr(f, "lfs")}
paths = {f.path: entry(f) for f in api.get_paths_info(repo, ["data/train.parquet", "meta.json"], repo_type="dataset")}
siblings = {s.rfilename: {"blob_id": s.blob_id, "size": s.size, "lfs": lfs(s)}
            for s in api.dataset_info(repo, files_metadata=True).siblings}
def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
one = hf_hub_download(repo, "data/train.parquet", repo_type="dataset", cache_dir=cache + "/one")
snap = snapshot_download(repo, repo_type="dataset", cache_dir=cache + "/snap")
local = snapshot_download(repo, repo_type="dataset", local_dir=cache + "/local")
again = snapshot_download(repo, repo_type="dataset", local_dir=cache + "/local")  # checks etag == sha256
print(json.dumps({
    "tree": tree, "paths": paths, "siblings": siblings,
    "download": digest(one), "blob_name": os.path.basename(os.path.realpath(one)),
    "snapshot": {p: digest(Path(snap) / p) for p in ("data/train.parquet", "meta.json", "README.md")},
    "local_dir": digest(Path(local) / "data/train.parquet"), "again": again == local,
}))
"""

LOAD = r"""
import json, sys
from datasets import load_dataset
repo = sys.argv[1]
by_card = load_dataset(repo, split="train")
by_path = load_dataset("parquet", data_files=f"hf://datasets/{repo}/data/train.parquet", split="train")
print(json.dumps({"card": by_card.to_dict(), "path": by_path.to_dict()}))
"""


@pytest.fixture(scope="module")
def read(hub, env, uploaded, tmp_path_factory) -> dict:
    hub.clear_requests()
    out = run(env, READ, REPO, str(tmp_path_factory.mktemp("read")))
    out["requests"] = list(hub.requests)
    return out


# --------------------------------------------------------------------------- the upload


def test_parquet_goes_through_the_lfs_batch_and_the_json_inline(hub, uploaded, local):
    parquet, meta = local["train.parquet"].read_bytes(), local["meta.json"].read_bytes()
    oid = sha256(parquet)
    big = f"/upload/{sha256(local['big.bin'].read_bytes())}"
    requests = [r for r in uploaded["requests"] if MODEL not in r.path and r.path != big]  # the dataset's
    steps = [(r.method, r.path, r.origin, r.status) for r in requests]
    batch = steps.index(("POST", BATCH, "hub", 200))
    put = steps.index(("PUT", f"/upload/{oid}", "storage", 200))
    verify = steps.index(("POST", VERIFY, "hub", 200))
    commit = steps.index(("POST", f"/api/datasets/{REPO}/commit/main", "hub", 200))
    assert batch < put < verify < commit  # batch, upload to storage, verify, then the commit with lfsFile
    assert [r for r in requests if r.method == "PUT"] == [requests[put]]  # the Parquet only: JSON and card inline
    assert hub.lfs_objects[oid] == parquet  # the stored object, keyed by sha256
    assert hub.lfs_paths(REPO) == {"data/train.parquet": oid}
    assert sha256(meta) not in hub.lfs_objects and sha256(local["README.md"].read_bytes()) not in hub.lfs_objects
    files = hub.files(REPO)
    assert files["data/train.parquet"] == parquet and files["meta.json"] == meta
    assert hub.history(REPO)[0].oid == uploaded["commit"]


def test_model_repos_use_the_unprefixed_batch_url_and_big_files_go_lfs(hub, uploaded, local):
    big = local["big.bin"].read_bytes()
    steps = [(r.method, r.path, r.origin) for r in uploaded["requests"]]
    assert ("POST", f"/{MODEL}.git/info/lfs/objects/batch", "hub") in steps
    assert ("PUT", f"/upload/{sha256(big)}", "storage") in steps
    assert hub.lfs_paths(MODEL, repo_type="model") == {"weights/big.bin": sha256(big)}  # over 10 MiB: LFS
    assert hub.files(MODEL, repo_type="model")["small.bin"] == local["small.bin"].read_bytes()  # small: inline


@pytest.mark.parametrize(("path", "tracked"), [
    ("data/x.parquet", True), ("x.parquet", True), ("a/b/c.arrow", True), ("x.json", False),
    ("parquet", False), ("x.parquet.json", False),
])
def test_the_default_gitattributes_track_parquet_and_arrow(path, tracked):
    from fakehub import GITATTRIBUTES

    assert lfs_tracked(GITATTRIBUTES, path) is tracked


def test_gitattributes_rules_later_lines_win_and_slashes_anchor():
    rules = b"*.bin filter=lfs diff=lfs merge=lfs -text\nkeep/*.bin -filter\n/top.txt filter=lfs\n"
    assert lfs_tracked(rules, "a/w.bin") and not lfs_tracked(rules, "keep/w.bin")
    assert lfs_tracked(rules, "top.txt") and not lfs_tracked(rules, "sub/top.txt")


# --------------------------------------------------------------------------- reading it back


def test_tree_paths_info_and_siblings_report_lfs(read, local):
    parquet, meta = local["train.parquet"].read_bytes(), local["meta.json"].read_bytes()
    pointer = lfs_pointer(sha256(parquet), len(parquet))
    lfs = {"sha256": sha256(parquet), "size": len(parquet), "pointer_size": len(pointer)}
    expected = {"data/train.parquet": {"blob_id": git_blob_sha1(pointer), "size": len(parquet), "lfs": lfs},
                "meta.json": {"blob_id": git_blob_sha1(meta), "size": len(meta), "lfs": None}}
    assert read["paths"] == expected
    assert {p: read["tree"][p] for p in expected} == expected
    assert {p: read["siblings"][p] for p in expected} == expected
    assert pointer.startswith(b"version https://git-lfs.github.com/spec/v1\noid sha256:")


def test_downloads_return_identical_bytes(read, local):
    want = {p: sha256(local[Path(p).name].read_bytes()) for p in ("data/train.parquet", "meta.json", "README.md")}
    assert read["download"] == read["local_dir"] == want["data/train.parquet"]
    assert read["blob_name"] == want["data/train.parquet"]  # the cache names the blob by its etag: the sha256
    assert read["snapshot"] == want
    assert read["again"]


def test_resolve_redirects_lfs_files_to_storage(hub, read, uploaded):
    parquet = [r for r in read["requests"] if "/resolve/" in r.path and r.path.endswith("/data/train.parquet")]
    assert parquet and all(r.status == 302 and r.origin == "hub" for r in parquet)
    oid = hub.lfs_paths(REPO)["data/train.parquet"]
    assert any(r.origin == "storage" and r.path == f"/objects/{oid}" and r.status == 200 for r in read["requests"])
    meta = [r for r in read["requests"] if r.path.endswith("/meta.json") and "/resolve/" in r.path]
    assert meta and all(r.status == 200 for r in meta)  # a regular file is served directly

    commit = uploaded["commit"]
    url = f"{hub.url}/datasets/{REPO}/resolve/main/data/train.parquet"

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    request = urllib.request.Request(url, method="HEAD")
    try:
        urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect).open(request, timeout=30)
        raise AssertionError("no redirect")
    except urllib.error.HTTPError as err:
        headers = err.headers
        assert err.code == 302
    data = hub.files(REPO)["data/train.parquet"]
    assert headers["X-Linked-Etag"] == f'"{oid}"' and headers["X-Linked-Size"] == str(len(data))
    assert headers["X-Repo-Commit"] == commit
    assert headers["ETag"] == f'"{git_blob_sha1(lfs_pointer(oid, len(data)))}"'
    assert headers["Location"].startswith(hub.storage_url + f"/objects/{oid}?sig=")
    assert not any(h.lower().startswith("x-xet") for h in headers)  # Xet is never advertised
    status, body = call("GET", headers["Location"], headers={"Range": "bytes=0-3"})
    assert (status, body) == (206, data[:4])
    assert call("GET", f"{hub.storage_url}/objects/{oid}?sig=forged")[0] == 403


def test_load_dataset_reads_the_rows(env, uploaded, local):
    out = run(env, LOAD, REPO)
    rows = pq.read_table(local["train.parquet"]).to_pydict()
    assert out["card"] == rows and out["path"] == rows


# --------------------------------------------------------------------------- uploading again


AGAIN = r"""
import json, sys
from pathlib import Path
from huggingface_hub import CommitOperationAdd, HfApi
folder = Path(sys.argv[1])
api = HfApi()
info = api.create_commit("tester/lfs-check", [
    CommitOperationAdd("data/train.parquet", str(folder / "train.parquet")),
    CommitOperationAdd("data/copy.parquet", str(folder / "train.parquet")),
], commit_message="again", repo_type="dataset")
print(json.dumps({"commit": info.oid}))
"""


def test_the_same_content_again_skips_the_upload(hub, env, uploaded, read, local):
    parquet = local["train.parquet"].read_bytes()
    hub.clear_requests()
    run(env, AGAIN, str(local["train.parquet"].parent))
    steps = [(r.method, r.path, r.origin) for r in hub.requests]
    assert ("POST", BATCH, "hub") in steps  # asked ...
    assert not [s for s in steps if s[2] == "storage"] and ("POST", VERIFY, "hub") not in steps  # ... nothing sent
    assert hub.lfs_paths(REPO) == {"data/train.parquet": sha256(parquet), "data/copy.parquet": sha256(parquet)}
    assert hub.files(REPO)["data/copy.parquet"] == parquet


# --------------------------------------------------------------------------- what the fake refuses


def test_an_lfs_file_without_its_object_is_refused(hub, uploaded):
    missing = sha256(b"never uploaded")
    head = hub.repos[("dataset", REPO)].branches["main"]
    body = "\n".join(json.dumps(line) for line in [
        {"key": "header", "value": {"summary": "pointer only", "parentCommit": head}},
        {"key": "lfsFile", "value": {"path": "data/ghost.parquet", "algo": "sha256", "oid": missing, "size": 14}},
    ]).encode()
    auth = {"Authorization": f"Bearer {hub.token}", "Content-Type": "application/x-ndjson"}
    status, answer = call("POST", f"{hub.url}/api/datasets/{REPO}/commit/main", body, auth)
    assert status == 422 and b"LFS pointer pointed to a file that does not exist" in answer
    assert hub.repos[("dataset", REPO)].branches["main"] == head


def test_storage_checks_the_signature_the_sha256_and_the_size(hub, uploaded):
    content = b"some parquet bytes"
    auth = {"Authorization": f"Bearer {hub.token}", "Content-Type": "application/vnd.git-lfs+json"}
    payload = {"operation": "upload", "transfers": ["basic", "multipart"], "hash_algo": "sha256",
               "objects": [{"oid": sha256(content), "size": len(content)}], "ref": {"name": "main"}}
    status, answer = call("POST", hub.url + BATCH, json.dumps(payload).encode(), auth)
    assert status == 200
    batch = json.loads(answer)
    assert batch["transfer"] == "basic"
    actions = batch["objects"][0]["actions"]
    href = actions["upload"]["href"]
    assert href.startswith(hub.storage_url) and "chunk_size" not in actions["upload"].get("header", {})
    assert actions["verify"]["href"] == hub.url + VERIFY
    assert call("PUT", href, content + b"!")[0] == 400  # not the announced size
    assert call("PUT", href, content[::-1])[0] == 400  # not the announced sha256
    assert call("PUT", href.replace("sig=", "sig=0"), content)[0] == 403
    verify = json.dumps({"oid": sha256(content), "size": len(content)}).encode()
    assert call("POST", hub.url + VERIFY, verify, auth)[0] == 404  # nothing stored yet
    assert sha256(content) not in hub.lfs_objects
    assert call("PUT", href, content)[0] == 200
    assert call("POST", hub.url + VERIFY, verify, auth)[0] == 200
    status, answer = call("POST", hub.url + BATCH, json.dumps(payload).encode(), auth)
    assert "actions" not in json.loads(answer)["objects"][0]  # stored: no actions
    assert call("POST", hub.url + BATCH, json.dumps(payload).encode())[0] == 401  # writes need the token


def test_a_client_with_xet_on_stops_at_the_xet_token_endpoint(hub, tmp_path):
    """huggingface_hub 2.4 takes Xet whenever hf_xet is installed and HF_HUB_DISABLE_XET is unset, whatever the
    server says; the fake does not speak Xet and says so (client_env turns Xet off)."""
    env = client_env(hub, tmp_path / "hf_home")
    del env["HF_HUB_DISABLE_XET"]
    script = (
        "from huggingface_hub import CommitOperationAdd, HfApi\n"
        "api = HfApi()\n"
        "api.create_repo('tester/xet-on', repo_type='dataset')\n"
        "api.create_commit('tester/xet-on', [CommitOperationAdd('x.parquet', b'PAR1' * 64)], commit_message='x',"
        " repo_type='dataset')\n"
    )
    hub.clear_requests()
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0
    assert "xet-write-token" in proc.stderr and "501" in proc.stderr
    assert ("GET", "/api/datasets/tester/xet-on/xet-write-token/main", 501) in [
        (r.method, r.path, r.status) for r in hub.requests]
    assert hub.lfs_paths("tester/xet-on") == {} and not any(r.origin == "storage" for r in hub.requests)
