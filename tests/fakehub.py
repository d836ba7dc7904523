"""An in-memory fake of the Hugging Face Hub, for tests: standard library only, loopback only.

It serves what the real ``huggingface_hub`` and ``datasets`` clients call when a pack is published
and loaded, with the response shapes and headers those clients read (checked against
huggingface_hub 2.4 / datasets 5.2):

- ``POST /api/repos/create`` (409 with the repo URL when it exists);
- ``GET /api/{type}s/{id}[/revision/{rev}]`` (repo info: sha, siblings, cardData, private);
- ``POST /api/validate-yaml`` (the README front matter must be a YAML mapping);
- ``POST /api/{type}s/{id}/preupload/{rev}``: ``uploadMode: lfs`` for a path the repo's ``.gitattributes``
  marks ``filter=lfs`` (the initial one, ``GITATTRIBUTES``, marks ``*.parquet`` and ``*.arrow``) and for
  a file over 10 MiB, ``regular`` otherwise; ``shouldIgnore: false``; ``oid`` of the file already at that
  path (its sha256 if it is an LFS file, else its git blob SHA-1), so the client skips unchanged files;
- ``POST /[{type}s/]{id}.git/info/lfs/objects/batch`` (the Git LFS batch API, ``operation: upload``):
  always answers ``transfer: basic``; per object an ``upload`` action (a signed PUT URL on the fake's
  storage origin, see below) and a ``verify`` action, or no ``actions`` when the repo already holds the
  object; ``POST /[{type}s/]{id}.git/info/lfs/objects/verify`` (404 unless the object was stored);
- ``PUT {storage}/upload/{sha256}?...&sig=``: the presigned-URL upload (no Authorization, as to S3): the
  body must have that sha256 and the announced size; stored in ``FakeHub.lfs_objects``;
- ``POST /api/{type}s/{id}/commit/{rev}`` (NDJSON: header, file, deletedFile, deletedFolder, lfsFile;
  ``parentCommit`` is enforced; an ``lfsFile`` whose object (sha256, size) the repo does not hold is
  refused, as the Hub refuses a pointer to a missing object);
- ``GET /api/{type}s/{id}/refs``, ``POST /api/{type}s/{id}/tag/{rev}`` (409 when the tag exists),
  ``DELETE /api/{type}s/{id}/tag/{tag}``;
- ``GET /api/{type}s/{id}/commits/{rev}``;
- ``GET /api/{type}s/{id}/tree/{rev}[/{path}]`` (``recursive``, ``expand``) and
  ``POST /api/{type}s/{id}/paths-info/{rev}`` (form encoded, as the client sends it): an LFS file's
  ``oid`` is the git SHA-1 of its pointer file and it carries ``lfs: {oid (sha256), size, pointerSize}``;
  ``GET /api/{type}s/{id}?blobs=true`` gives siblings ``blobId``, ``size`` and ``lfs`` the same way;
- ``HEAD``/``GET`` ``/[{type}s/]{id}/resolve/{rev}/{path}``: a regular file is served with
  ``X-Repo-Commit``, ``ETag`` (the git blob SHA-1), ``Content-Length`` and byte ranges; an LFS file is a
  302 to the storage origin carrying ``X-Repo-Commit``, ``X-Linked-Etag`` (the sha256, which the client
  takes as the file's etag), ``X-Linked-Size`` and ``ETag`` (the pointer's SHA-1), as the real Hub
  redirects to its CDN; ``GET``/``HEAD {storage}/objects/{sha256}?sig=`` serves the bytes (ranges too);
- ``/api/{type}s/{id}/xet-{read,write}-token/...``: 501, naming ``HF_HUB_DISABLE_XET`` (see below).

The storage origin (``FakeHub.storage_url``) is a second loopback server, another port: the client
treats it as a CDN or S3 (a different origin), so it stops the metadata HEAD at the 302, downloads from
the ``Location`` without the token, and PUTs uploads there without it, as against the real Hub.

Xet. huggingface_hub 2.4 decides between Xet and LFS on the client alone, with no negotiation:
``_commit_api._upload_files`` takes the Xet path whenever ``utils._runtime.is_xet_available()`` is
true, that is ``hf_xet`` is installed and ``HF_HUB_DISABLE_XET`` is not set (``upload_folder`` likewise
switches to the Xet pipeline); only a buffered-IO addition falls back to LFS. The LFS batch call it
makes otherwise offers ``transfers: [basic, multipart]``, never ``xet``. Xet uploads need the CAS
protocol, which this fake does not speak, and there is no answer that makes the client fall back, so
the clients must run with ``HF_HUB_DISABLE_XET=1`` (``client_env`` sets it): the upload then takes the
LFS basic path above. The fake never advertises Xet anywhere (no ``xetHash`` in tree entries, no
``X-Xet-Hash`` or ``Link: xet-auth`` on resolve, ``transfer: basic`` in the batch answer), so downloads
take plain HTTP even where Xet is on, and its Xet token endpoints answer 501 with that explanation.

Errors carry ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``) the way the
clients map them to exceptions. Writes need ``Authorization: Bearer <token>``. Every request is
recorded in ``FakeHub.requests`` (method, path, query, status, and ``origin``: ``hub`` or
``storage``), so a test can prove that nothing was sent, or which path a file took: the stored LFS
objects are ``FakeHub.lfs_objects`` (sha256 -> bytes) and ``FakeHub.lfs_paths()`` names a revision's
LFS files.
"""

from __future__ import annotations

import base64
import bisect
import fnmatch
import hashlib
import hmac
import itertools
import json
import os
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import yaml

TYPES = {"datasets": "dataset", "models": "model", "spaces": "space"}
PREFIX = {"dataset": "datasets/", "model": "", "space": "spaces/"}
GITATTRIBUTES = b"*.parquet filter=lfs diff=lfs merge=lfs -text\n*.arrow filter=lfs diff=lfs merge=lfs -text\n"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
LFS_THRESHOLD = 10 * 1024 * 1024  # a file over this size is an LFS file whatever .gitattributes says
LFS_JSON = "application/vnd.git-lfs+json"


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob (what the Hub reports as ``oid`` / ``ETag`` of a regular file)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The Git LFS pointer file that git stores in place of an LFS file's content."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def lfs_tracked(gitattributes: bytes, path: str) -> bool:
    """Whether ``.gitattributes`` gives ``path`` ``filter=lfs`` (the last matching line that sets or unsets
    ``filter`` wins; a pattern without a slash matches the file name at any depth)."""
    tracked = False
    for line in gitattributes.decode("utf-8", "replace").splitlines():
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        pattern, attrs = parts[0], parts[1:]
        if "/" in pattern.rstrip("/"):
            hit = fnmatch.fnmatchcase(path, pattern.lstrip("/"))
        else:
            hit = fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], pattern)
        if not hit:
            continue
        for attr in attrs:
            if attr.startswith("filter="):
                tracked = attr == "filter=lfs"
            elif attr in ("-filter", "!filter"):
                tracked = False
    return tracked


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    status: int
    origin: str = "hub"  # or "storage": the fake's LFS storage / CDN origin
    # Requests are listed in the order they arrived, not the order they finished: a client may send the next
    # request once it has the answer, before the handler thread that answered has logged it.
    arrived: int = field(default=0, compare=False, repr=False)


@dataclass
class Commit:
    oid: str
    parent: str | None
    files: dict[str, bytes]
    title: str
    message: str
    date: datetime
    lfs: dict[str, str] = field(default_factory=dict)  # path -> sha256 of the files committed as LFS files

    def blob_oid(self, path: str) -> str:
        """The git object id of ``path``: of its pointer file for an LFS file, of its content otherwise."""
        data = self.files[path]
        return git_blob_sha1(lfs_pointer(self.lfs[path], len(data)) if path in self.lfs else data)


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    created: datetime
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    lfs_oids: set[str] = field(default_factory=set)  # sha256 of the LFS objects uploaded to this repo

    def resolve(self, revision: str) -> Commit | None:
        oid = self.branches.get(revision) or self.tags.get(revision)
        if oid is None and re.fullmatch(r"[0-9a-f]{7,40}", revision):
            found = [c for c in self.commits if c.startswith(revision)]
            oid = found[0] if len(found) == 1 else None
        return self.commits.get(oid) if oid else None


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}


class FakeHub:
    """The fake Hub's state and servers. ``start()`` (or ``with FakeHub() as hub``) binds two free loopback
    ports: ``url`` is the Hub endpoint, ``storage_url`` the LFS storage / CDN origin."""

    def __init__(self, token: str = "hf_fake_write_token", user: str = "tester") -> None:
        self.token = token
        self.user = user
        self.repos: dict[tuple[str, str], Repo] = {}
        self.requests: list[Request] = []
        self.lfs_objects: dict[str, bytes] = {}  # sha256 -> bytes, every LFS object uploaded (any repo)
        self.lock = threading.RLock()
        self._counter = itertools.count(1)
        self._arrivals = itertools.count(1)
        self._secret = os.urandom(16)  # signs the storage URLs, as a presigned S3 / CDN URL is signed
        self._server: ThreadingHTTPServer | None = None
        self._storage: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> str:
        hub = self

        class Handler(_Handler):
            fake = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._storage = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        for name, server in (("fakehub", self._server), ("fakehub-storage", self._storage)):
            server.daemon_threads = True
            thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self.url

    def __enter__(self) -> FakeHub:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        for server in (self._server, self._storage):
            if server is not None:
                server.shutdown()
                server.server_close()
        self._server = self._storage = None
        self._threads.clear()

    @property
    def url(self) -> str:
        assert self._server is not None, "FakeHub.start() first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def storage_url(self) -> str:
        """The LFS storage / CDN origin: another port, so another origin to the client."""
        assert self._storage is not None, "FakeHub.start() first"
        host, port = self._storage.server_address[:2]
        return f"http://{host}:{port}"

    # -- inspection helpers for tests --------------------------------------------------------------

    def clear_requests(self) -> None:
        with self.lock:
            self.requests.clear()

    def files(self, repo_id: str, revision: str = "main", repo_type: str = "dataset") -> dict[str, bytes]:
        with self.lock:
            commit = self.repos[(repo_type, repo_id)].resolve(revision)
            assert commit is not None, f"no revision {revision} in {repo_id}"
            return dict(commit.files)

    def lfs_paths(self, repo_id: str, revision: str = "main", repo_type: str = "dataset") -> dict[str, str]:
        """The files of that revision committed as LFS files: path -> sha256."""
        with self.lock:
            commit = self.repos[(repo_type, repo_id)].resolve(revision)
            assert commit is not None, f"no revision {revision} in {repo_id}"
            return dict(commit.lfs)

    def history(self, repo_id: str, revision: str = "main", repo_type: str = "dataset") -> list[Commit]:
        with self.lock:
            repo = self.repos[(repo_type, repo_id)]
            return list(self._walk(repo, repo.resolve(revision)))

    # -- model -------------------------------------------------------------------------------------

    def _now(self) -> datetime:
        return EPOCH + timedelta(seconds=next(self._counter))

    def _commit(self, repo: Repo, parent: Commit | None, files: dict[str, bytes], title: str,
                message: str = "", lfs: dict[str, str] | None = None) -> Commit:
        date = self._now()
        commit = Commit("", parent.oid if parent else None, files, title, message, date, dict(lfs or {}))
        digest = hashlib.sha1()
        digest.update((parent.oid if parent else "root").encode())
        digest.update(title.encode() + message.encode() + date.isoformat().encode())
        for path in sorted(files):
            digest.update(path.encode() + b"\0" + commit.blob_oid(path).encode())
        commit.oid = digest.hexdigest()
        repo.commits[commit.oid] = commit
        return commit

    @staticmethod
    def _walk(repo: Repo, commit: Commit | None):
        while commit is not None:
            yield commit
            commit = repo.commits.get(commit.parent) if commit.parent else None

    def _repo(self, repo_type: str, repo_id: str, authorized: bool) -> Repo:
        repo = self.repos.get((repo_type, repo_id))
        if repo is None or (repo.private and not authorized):
            raise HubError(404, "Repository not found", "RepoNotFound")
        return repo

    @staticmethod
    def _revision(repo: Repo, revision: str) -> Commit:
        commit = repo.resolve(revision)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit

    def _base(self, repo: Repo) -> str:
        return f"{self.url}/{PREFIX[repo.repo_type]}{repo.repo_id}"

    def _sign(self, *parts: str) -> str:
        return hmac.new(self._secret, "\0".join(parts).encode(), hashlib.sha256).hexdigest()

    def _upload_href(self, repo: Repo, oid: str, size: int) -> str:
        query = urlencode({"repo_type": repo.repo_type, "repo_id": repo.repo_id, "size": size,
                           "sig": self._sign("upload", repo.repo_type, repo.repo_id, oid, str(size))})
        return f"{self.storage_url}/upload/{oid}?{query}"

    def _download_href(self, oid: str) -> str:
        return f"{self.storage_url}/objects/{oid}?sig={self._sign('download', oid)}"


def _folders(paths) -> set[str]:
    out = set()
    for path in paths:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            out.add("/".join(parts[:i]))
    return out


def _tree_oid(commit: Commit, folder: str) -> str:
    digest = hashlib.sha1(folder.encode())
    for path in sorted(p for p in commit.files if p.startswith(folder + "/")):
        digest.update(path.encode() + commit.blob_oid(path).encode())
    return digest.hexdigest()


def _iso(date: datetime) -> str:
    return date.strftime("%Y-%m-%dT%H:%M:%S.") + f"{date.microsecond // 1000:03d}Z"


def _card_data(files: dict[str, bytes]) -> dict | None:
    text = files.get("README.md", b"").decode("utf-8", "replace")
    match = re.match(r"^---\s*\n(.*?)\n---\s*\n", text, re.S)
    if not match:
        return None
    data = yaml.safe_load(match.group(1))
    return data if isinstance(data, dict) else None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeHub
    protocol_version = "HTTP/1.1"
    server_version = "FakeHub/1.0"

    def log_message(self, format, *args):
        return

    # -- plumbing ----------------------------------------------------------------------------------

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _authorized(self) -> bool:
        auth = self.headers.get("Authorization", "")
        return auth == f"Bearer {self.fake.token}"

    def _require_write(self) -> None:
        if not self._authorized():
            raise HubError(401, "Invalid credentials in Authorization header", None,
                           {"X-Error-Message": "Invalid credentials in Authorization header"})

    def _send(self, method: str, status: int, body: bytes = b"", headers: dict | None = None,
              content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if method != "HEAD" and body:
            self.wfile.write(body)

    def _json(self, method: str, data, status: int = 200, headers: dict | None = None) -> None:
        self._send(method, status, json.dumps(data).encode(), headers)

    def _dispatch(self, method: str) -> None:
        split = urlsplit(self.path)
        arrived = next(self.fake._arrivals)
        status = 500
        try:
            body = self._body()
            status = self._route(method, split.path, parse_qs(split.query), body)
        except HubError as err:
            status = err.status
            headers = dict(err.headers)
            if err.code:
                headers["X-Error-Code"] = err.code
            headers.setdefault("X-Error-Message", err.message)
            self._json(method, {"error": err.message}, err.status, headers)
        except Exception as exc:  # a bug in the fake: answer 500 with the reason rather than hang
            status = 500
            self._json(method, {"error": f"fake hub: {type(exc).__name__}: {exc}"}, 500)
        finally:
            origin = "storage" if self.server is self.fake._storage else "hub"
            with self.fake.lock:
                bisect.insort(self.fake.requests, Request(method, split.path, split.query, status, origin, arrived),
                              key=lambda request: request.arrived)

    # -- routes ------------------------------------------------------------------------------------

    def _route(self, method: str, path: str, query: dict, body: bytes) -> int:
        raw = path.strip("/").split("/")
        seg = [unquote(s) for s in raw]
        fake = self.fake
        if self.server is fake._storage:
            return self._storage_route(method, seg, query, body)
        lfs = self._match_lfs(raw)
        if lfs and method == "POST":
            repo_type, repo_id, action = lfs
            self._require_write()
            with fake.lock:
                repo = fake._repo(repo_type, repo_id, True)
                if action == "batch":
                    return self._lfs_batch(method, repo, json.loads(body or b"{}"))
                if action == "verify":
                    return self._lfs_verify(method, repo, json.loads(body or b"{}"))
        if seg[:3] == ["api", "repos", "create"] and method == "POST":
            return self._create_repo(method, json.loads(body or b"{}"))
        if seg[:2] == ["api", "validate-yaml"] and method == "POST":
            return self._validate_yaml(method, json.loads(body or b"{}"))
        if seg[:2] == ["api", "whoami-v2"]:
            if not self._authorized():
                raise HubError(401, "Invalid credentials in Authorization header")
            self._json(method, {"type": "user", "name": fake.user, "orgs": []})
            return 200
        if len(seg) >= 4 and seg[0] == "api" and seg[1] in TYPES:
            repo_type, repo_id = TYPES[seg[1]], f"{seg[2]}/{seg[3]}"
            action = seg[4] if len(seg) > 4 else None
            with fake.lock:
                repo = fake._repo(repo_type, repo_id, self._authorized())
                if action is None and method == "GET":
                    return self._info(method, repo, "main", query)
                if action == "revision" and method == "GET":
                    return self._info(method, repo, "/".join(seg[5:]), query)
                if action in ("xet-read-token", "xet-write-token"):
                    raise HubError(501, "this fake Hub does not speak Xet: it serves LFS only. Run the client "
                                        "with HF_HUB_DISABLE_XET=1 (tests/fakehub.py client_env sets it)")
                if action == "refs" and method == "GET":
                    return self._refs(method, repo)
                if action == "preupload" and method == "POST":
                    self._require_write()
                    return self._preupload(method, repo, seg[5], json.loads(body))
                if action == "commit" and method == "POST":
                    self._require_write()
                    return self._commit(method, repo, seg[5], body)
                if action == "tag" and method == "POST":
                    self._require_write()
                    return self._create_tag(method, repo, seg[5], json.loads(body or b"{}"))
                if action == "tag" and method == "DELETE":
                    self._require_write()
                    if repo.tags.pop(seg[5], None) is None:
                        raise HubError(404, f"Invalid rev id: {seg[5]}", "RevisionNotFound")
                    self._json(method, {})
                    return 200
                if action == "commits" and method == "GET":
                    return self._commits(method, repo, seg[5])
                if action == "tree" and method == "GET":
                    return self._tree(method, repo, seg[5], unquote("/".join(raw[6:])), query)
                if action == "paths-info" and method == "POST":
                    return self._paths_info(method, repo, seg[5], parse_qs(body.decode()))
        resolve = self._match_resolve(raw)
        if resolve and method in ("GET", "HEAD"):
            repo_type, repo_id, revision, filename = resolve
            with fake.lock:
                repo = fake._repo(repo_type, repo_id, self._authorized())
                commit = fake._revision(repo, revision)
                data = commit.files.get(filename)
                sha256 = commit.lfs.get(filename)
            if data is None:
                raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": commit.oid})
            if sha256 is not None:  # the real Hub redirects an LFS file to its CDN, the metadata on the 302
                location = fake._download_href(sha256)
                self._send(method, 302, b"", {
                    "Location": location, "X-Repo-Commit": commit.oid, "X-Linked-Etag": f'"{sha256}"',
                    "X-Linked-Size": str(len(data)), "ETag": f'"{commit.blob_oid(filename)}"'}, "text/plain")
                return 302
            return self._serve_file(method, data, {"X-Repo-Commit": commit.oid,
                                                   "ETag": f'"{git_blob_sha1(data)}"'})
        raise HubError(404, f"fake hub has no route for {method} {path}")

    @staticmethod
    def _repo_url(head: list[str]):
        """``[{type}s/]{owner}/{name}`` (URL segments) -> (repo type, repo id), a model without the prefix."""
        if len(head) == 3 and head[0] in TYPES:
            return TYPES[head[0]], f"{unquote(head[1])}/{unquote(head[2])}"
        if len(head) == 2:
            return "model", f"{unquote(head[0])}/{unquote(head[1])}"
        return None

    def _match_lfs(self, raw: list[str]):
        """``[{type}s/]{owner}/{name}.git/info/lfs/objects/{batch,verify}`` -> (repo type, repo id, action)."""
        if len(raw) < 6 or raw[-4:-1] != ["info", "lfs", "objects"] or not raw[-5].endswith(".git"):
            return None
        repo = self._repo_url([*raw[:-5], raw[-5][: -len(".git")]])
        return (*repo, raw[-1]) if repo else None

    def _match_resolve(self, raw: list[str]):
        if "resolve" not in raw:
            return None
        i = raw.index("resolve")
        rest = raw[i + 1:]
        repo = self._repo_url(raw[:i])
        if len(rest) < 2 or repo is None:
            return None
        return (*repo, unquote(rest[0]), unquote("/".join(rest[1:])))

    def _create_repo(self, method: str, payload: dict) -> int:
        self._require_write()
        repo_type = payload.get("type") or "model"
        name, org = payload["name"], payload.get("organization") or self.fake.user
        repo_id = f"{org}/{name}"
        fake = self.fake
        with fake.lock:
            url = f"{fake.url}/{PREFIX[repo_type]}{repo_id}"
            if (repo_type, repo_id) in fake.repos:
                self._json(method, {"error": "You already created this repo", "url": url}, 409)
                return 409
            repo = Repo(repo_type, repo_id, payload.get("visibility") == "private", fake._now())
            initial = fake._commit(repo, None, {".gitattributes": GITATTRIBUTES}, "initial commit")
            repo.branches["main"] = initial.oid
            fake.repos[(repo_type, repo_id)] = repo
        self._json(method, {"url": url, "name": repo_id})
        return 200

    def _validate_yaml(self, method: str, payload: dict) -> int:
        text = payload.get("content", "")
        match = re.match(r"^---\s*\n(.*?)\n---\s*\n", text, re.S)
        errors = []
        if match:
            try:
                data = yaml.safe_load(match.group(1))
                if not isinstance(data, dict):
                    errors.append({"message": "metadata must be a YAML mapping"})
            except yaml.YAMLError as exc:
                errors.append({"message": f"invalid YAML: {exc}"})
        status = 400 if errors else 200
        self._json(method, {"errors": errors, "warnings": []}, status)
        return status

    def _info(self, method: str, repo: Repo, revision: str, query: dict) -> int:
        commit = self.fake._revision(repo, revision)
        siblings = [{"rfilename": p} for p in sorted(commit.files)]
        if query.get("blobs", ["false"])[0].lower() in ("true", "1"):
            for sibling in siblings:
                path = sibling["rfilename"]
                sibling.update(blobId=commit.blob_oid(path), size=len(commit.files[path]))
                if path in commit.lfs:
                    sibling["lfs"] = {"sha256": commit.lfs[path], "size": len(commit.files[path]),
                                      "pointerSize": len(lfs_pointer(commit.lfs[path], len(commit.files[path])))}
        owner = repo.repo_id.split("/")[0]
        self._json(method, {
            "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "author": owner,
            "sha": commit.oid,
            "lastModified": _iso(commit.date),
            "createdAt": _iso(repo.created),
            "private": repo.private,
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "cardData": _card_data(commit.files),
            "siblings": siblings,
        })
        return 200

    def _refs(self, method: str, repo: Repo) -> int:
        def refs(kind, items):
            return [{"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": oid} for n, oid in sorted(items.items())]

        self._json(method, {"branches": refs("heads", repo.branches), "converts": [],
                            "tags": refs("tags", repo.tags), "pullRequests": []})
        return 200

    def _preupload(self, method: str, repo: Repo, revision: str, payload: dict) -> int:
        commit = self.fake._revision(repo, revision)
        gitattributes = commit.files.get(".gitattributes", b"")
        files = []
        for item in payload.get("files", []):
            path = item["path"]
            lfs = int(item.get("size") or 0) > LFS_THRESHOLD or lfs_tracked(gitattributes, path)
            if path in commit.lfs:
                oid = commit.lfs[path]  # the client compares an LFS file by its sha256
            else:
                oid = git_blob_sha1(commit.files[path]) if path in commit.files else None
            files.append({"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False,
                          "oid": oid})
        self._json(method, {"files": files, "commitOid": commit.oid})
        return 200

    def _lfs_batch(self, method: str, repo: Repo, payload: dict) -> int:
        fake = self.fake
        if payload.get("operation") != "upload":
            raise HubError(422, "this fake Hub's LFS batch endpoint serves operation 'upload' only")
        if "basic" not in payload.get("transfers", ["basic"]):
            raise HubError(422, "no transfer adapter in common: this fake Hub offers 'basic' only")
        if payload.get("hash_algo", "sha256") != "sha256":
            raise HubError(422, "hash_algo must be sha256")
        ref = (payload.get("ref") or {}).get("name")
        if ref is not None and repo.resolve(ref.removeprefix("refs/heads/")) is None:
            raise HubError(404, f"Invalid rev id: {ref}", "RevisionNotFound")
        objects = []
        for item in payload.get("objects", []):
            oid, size = item.get("oid"), item.get("size")
            if not (isinstance(oid, str) and re.fullmatch(r"[0-9a-f]{64}", oid) and isinstance(size, int)
                    and size >= 0):
                objects.append({"oid": str(oid), "size": size if isinstance(size, int) else 0,
                                "error": {"code": 422, "message": "oid must be a sha256 and size an integer"}})
                continue
            entry = {"oid": oid, "size": size, "authenticated": True}
            if oid in repo.lfs_oids and len(fake.lfs_objects[oid]) == size:
                objects.append(entry)  # already stored: no actions, the client skips the upload
                continue
            verify = f"{fake._base(repo)}.git/info/lfs/objects/verify"
            entry["actions"] = {
                "upload": {"href": fake._upload_href(repo, oid, size), "expires_in": 900},
                "verify": {"href": verify, "header": {"Authorization": self.headers.get("Authorization", "")},
                           "expires_in": 900},
            }
            objects.append(entry)
        self._send(method, 200, json.dumps({"transfer": "basic", "objects": objects, "hash_algo": "sha256"}
                                           ).encode(), content_type=LFS_JSON)
        return 200

    def _lfs_verify(self, method: str, repo: Repo, payload: dict) -> int:
        oid, size = payload.get("oid"), payload.get("size")
        if oid not in repo.lfs_oids or len(self.fake.lfs_objects[oid]) != size:
            raise HubError(404, f"LFS object {oid} (size {size}) was not uploaded to {repo.repo_id}")
        self._send(method, 200, b"{}", content_type=LFS_JSON)
        return 200

    def _storage_route(self, method: str, seg: list[str], query: dict, body: bytes) -> int:
        """The LFS storage / CDN origin: presigned uploads and signed downloads, no Authorization."""
        fake = self.fake
        if len(seg) == 2 and seg[0] == "upload" and method == "PUT":
            oid = seg[1]
            repo_type, repo_id = query.get("repo_type", [""])[0], query.get("repo_id", [""])[0]
            size = query.get("size", [""])[0]
            if not hmac.compare_digest(query.get("sig", [""])[0], fake._sign("upload", repo_type, repo_id, oid, size)):
                raise HubError(403, "SignatureDoesNotMatch")
            if len(body) != int(size):
                raise HubError(400, f"upload of {oid}: {len(body)} bytes, the batch announced {size}")
            if hashlib.sha256(body).hexdigest() != oid:
                raise HubError(400, f"upload of {oid}: the content's sha256 is {hashlib.sha256(body).hexdigest()}")
            with fake.lock:
                repo = fake.repos.get((repo_type, repo_id))
                if repo is None:
                    raise HubError(404, "NoSuchBucket")
                fake.lfs_objects[oid] = body
                repo.lfs_oids.add(oid)
            self._send(method, 200, b"", {"ETag": f'"{hashlib.md5(body).hexdigest()}"'}, "text/plain")
            return 200
        if len(seg) == 2 and seg[0] == "objects" and method in ("GET", "HEAD"):
            oid = seg[1]
            if not hmac.compare_digest(query.get("sig", [""])[0], fake._sign("download", oid)):
                raise HubError(403, "SignatureDoesNotMatch")
            with fake.lock:
                data = fake.lfs_objects.get(oid)
            if data is None:
                raise HubError(404, "NoSuchKey")
            return self._serve_file(method, data, {"ETag": f'"{oid}"'})
        raise HubError(404, f"fake hub storage has no route for {method} /{'/'.join(quote(s) for s in seg)}")

    def _commit(self, method: str, repo: Repo, branch: str, body: bytes) -> int:
        if branch not in repo.branches:
            raise HubError(404 if repo.resolve(branch) is None else 400,
                           f"Invalid rev id: {branch} (commits go to a branch)", "RevisionNotFound")
        head = repo.commits[repo.branches[branch]]
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "the commit payload must start with a header line")
        header = lines[0]["value"]
        parent = header.get("parentCommit")
        if parent is not None and parent != head.oid:
            raise HubError(412, "A commit has happened since. Please refresh and try again.")
        files, lfs = dict(head.files), dict(head.lfs)
        for line in lines[1:]:
            key, value = line["key"], line["value"]
            if key == "file":
                if value.get("encoding") != "base64":
                    raise HubError(400, "file content must be base64")
                files[value["path"]] = base64.b64decode(value["content"])
                lfs.pop(value["path"], None)
            elif key == "lfsFile":
                oid, size = value.get("oid"), value.get("size")
                if value.get("algo", "sha256") != "sha256":
                    raise HubError(400, f"lfsFile {value.get('path')}: algo must be sha256")
                stored = self.fake.lfs_objects.get(oid) if oid in repo.lfs_oids else None
                if stored is None or (size is not None and size != len(stored)):
                    raise HubError(422, f"Your push was rejected because an LFS pointer pointed to a file that "
                                        f"does not exist: {value.get('path')} (sha256 {oid}, size {size})")
                files[value["path"]], lfs[value["path"]] = stored, oid
            elif key == "deletedFile":
                if files.pop(value["path"], None) is None:
                    raise HubError(404, f"A file with this name doesn't exist: {value['path']}", "EntryNotFound")
                lfs.pop(value["path"], None)
            elif key == "deletedFolder":
                prefix = value["path"].rstrip("/") + "/"
                gone = [p for p in files if p.startswith(prefix)]
                if not gone:
                    raise HubError(404, f"A folder with this name doesn't exist: {value['path']}", "EntryNotFound")
                for p in gone:
                    del files[p]
                    lfs.pop(p, None)
            else:
                raise HubError(400, f"unknown commit operation {key!r}")
        commit = self.fake._commit(repo, head, files, header.get("summary", ""), header.get("description", ""),
                                   lfs)
        repo.branches[branch] = commit.oid
        self._json(method, {"success": True, "commitOid": commit.oid, "commitUrl": f"{self.fake._base(repo)}"
                            f"/commit/{commit.oid}", "hookOutput": "", "pullRequestUrl": None})
        return 200

    def _create_tag(self, method: str, repo: Repo, revision: str, payload: dict) -> int:
        commit = self.fake._revision(repo, revision)
        tag = payload["tag"]
        if tag in repo.tags or tag in repo.branches:
            raise HubError(409, f"Tag {tag} already exists")
        repo.tags[tag] = commit.oid
        self._json(method, {})
        return 200

    def _commits(self, method: str, repo: Repo, revision: str) -> int:
        commit = self.fake._revision(repo, revision)
        self._json(method, [{"id": c.oid, "title": c.title, "message": c.message, "date": _iso(c.date),
                             "authors": [{"user": self.fake.user}]} for c in self.fake._walk(repo, commit)])
        return 200

    def _entry(self, commit: Commit, path: str, expand: bool) -> dict:
        if path in commit.files:
            size = len(commit.files[path])
            entry = {"type": "file", "oid": commit.blob_oid(path), "size": size, "path": path}
            if path in commit.lfs:
                sha256 = commit.lfs[path]
                entry["lfs"] = {"oid": sha256, "size": size, "pointerSize": len(lfs_pointer(sha256, size))}
        else:
            entry = {"type": "directory", "oid": _tree_oid(commit, path), "size": 0, "path": path}
        if expand:
            entry["lastCommit"] = {"id": commit.oid, "title": commit.title, "date": _iso(commit.date)}
        return entry

    def _tree(self, method: str, repo: Repo, revision: str, path: str, query: dict) -> int:
        commit = self.fake._revision(repo, revision)
        recursive = query.get("recursive", ["false"])[0].lower() in ("true", "1")
        expand = query.get("expand", ["false"])[0].lower() in ("true", "1")
        path = path.strip("/")
        folders = _folders(commit.files)
        if path and path in commit.files:
            self._json(method, [self._entry(commit, path, expand)])
            return 200
        if path and path not in folders:
            raise HubError(404, f"{path} does not exist on {revision}", "EntryNotFound",
                           {"X-Repo-Commit": commit.oid})
        prefix = path + "/" if path else ""
        names = set()
        for p in list(commit.files) + sorted(folders):
            if not p.startswith(prefix) or p == path:
                continue
            rest = p[len(prefix):]
            names.add(p if recursive else prefix + rest.split("/")[0])
        dirs = sorted(n for n in names if n in folders)
        files = sorted(n for n in names if n not in folders)
        self._json(method, [self._entry(commit, n, expand) for n in dirs + files])
        return 200

    def _paths_info(self, method: str, repo: Repo, revision: str, form: dict) -> int:
        commit = self.fake._revision(repo, revision)
        expand = form.get("expand", ["False"])[0].lower() in ("true", "1")
        folders = _folders(commit.files)
        out = [self._entry(commit, p.strip("/"), expand) for p in form.get("paths", [])
               if p.strip("/") in commit.files or p.strip("/") in folders]
        self._json(method, out)
        return 200

    def _serve_file(self, method: str, data: bytes, headers: dict) -> int:
        headers = dict(headers, **{"Accept-Ranges": "bytes"})
        wanted = self.headers.get("Range")
        if wanted:
            match = re.fullmatch(r"bytes=(\d*)-(\d*)", wanted.strip())
            if not match or (not match.group(1) and not match.group(2)):
                raise HubError(416, "bad range")
            if match.group(1):
                start = int(match.group(1))
                end = int(match.group(2)) if match.group(2) else len(data) - 1
            else:
                start, end = max(len(data) - int(match.group(2)), 0), len(data) - 1
            end = min(end, len(data) - 1)
            if start >= len(data) or start > end:
                raise HubError(416, "range not satisfiable", None, {"Content-Range": f"bytes */{len(data)}"})
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            self._send(method, 206, data[start:end + 1], headers, "application/octet-stream")
            return 206
        self._send(method, 200, data, headers, "application/octet-stream")
        return 200


DEAD_PROXY = "http://127.0.0.1:9"  # every host but loopback goes here, so nothing reaches the real Hub


def client_env(hub: FakeHub, hf_home: Path, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """An environment for subprocesses whose huggingface_hub and datasets clients talk only to ``hub``.

    Variables starting with HF_, HUGGINGFACE_ or any prefix in ``drop`` are removed from this
    process's environment first; the project root is put on PYTHONPATH."""
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", *drop))}
    env.update({
        "HF_ENDPOINT": hub.url,
        "HF_TOKEN": hub.token,
        "HF_HOME": str(hf_home),
        "HF_DATASETS_CACHE": str(hf_home / "datasets"),
        "HF_HUB_OFFLINE": "0",
        "HF_DATASETS_OFFLINE": "0",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
        "HTTP_PROXY": DEAD_PROXY, "HTTPS_PROXY": DEAD_PROXY, "ALL_PROXY": DEAD_PROXY,
        "http_proxy": DEAD_PROXY, "https_proxy": DEAD_PROXY, "all_proxy": DEAD_PROXY,
        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    })
    return env
