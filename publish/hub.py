"""Publish a verified pack to the Hugging Face Hub: one commit with the whole layout, then the version tag.

``publish_pack`` is the one entry point for code (the Dagster publish asset calls it); the CLI
(``publish.cli.publish_command``) runs the same steps (``prepare``, then ``release``) and prints them. In order:

1. the repo id is checked and the token found (``token`` argument, else ``HF_TOKEN``, else the
   huggingface_hub login) without any request;
2. the pack is re-verified (``publish.check.verify_pack``, with ``public_key`` when given: an unsigned pack or
   one signed by another key fails); a pack that fails is refused with ``PackRefused`` (exit code 1) naming
   every failure, and nothing is sent;
3. the layout is built (``publish.layout.build_layout``), with the pack's own README.md as the card; with a
   holdout repo, the answer key beside the pack (``PACK.holdout-key``) is found and checked against the
   pack's commitments (missing or not matching: exit code 2, nothing sent);
4. read only: the repo's refs; asking for ``private`` on an existing public repo is refused (so is a public
   holdout repo); if the tag ``v<version>`` exists with the same content (every path, git blob SHA-1 or LFS
   SHA-256) the publish is a no-op that returns the existing commit;
5. the release gate, read only: the last released version (the highest ``v<semver>`` tag) is compared with
   the pack (``evalpack.pack.diff``) and ``gate`` decides with the pack's ``gate`` policy and ``gate_margin``
   (manifest.json, from the spec): blocked raises ``ReleaseBlocked`` (exit code 1) naming every reason;
   ``warn`` logs them and goes on. A tag that exists with different content is then refused, because a
   published tag is never moved;
6. ``create_repo(repo_type="dataset", exist_ok=True)``, then one commit on ``main`` with every file of the
   layout plus a delete for every file of ``main`` that is not in the layout (``.gitattributes`` excepted),
   with ``parent_commit`` set to the head that was listed, so a concurrent push fails instead of being
   overwritten;
7. the tag ``v<version>`` on that commit;
8. with a holdout repo, the answer key goes to that repo, created private: one commit, the same tag.
   The key never goes to the public repo.

The endpoint is the ``endpoint`` argument, else ``HF_ENDPOINT``, else https://huggingface.co. The
token is never printed: it is scrubbed from every error message that leaves this module.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from evalpack import __version__
from evalpack.core.errors import EvalpackError
from evalpack.core.scoring import HOLDOUT_FILE, InputError, holdout_key_beside, load_questions, with_holdout_key
from evalpack.pack.diff import (
    DEFAULT_MARGIN_POINTS,
    POLICIES,
    GateResult,
    PackDiff,
    diff_packs,
    format_diff,
    gate,
    load_side,
)
from publish.check import Verification, verify_pack
from publish.layout import (
    DEFAULT_ENDPOINT,
    HubFile,
    HubLayout,
    PublishError,
    build_layout,
    check_repo_id,
    folder_files,
    read_manifest,
    version_tag,
)
from publish.revision import fetch_side

KEPT_REMOTE = {".gitattributes"}
SEMVER_TAG = re.compile(r"v(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")
SHOWN_CHANGES = 40  # diff lines logged before publishing; `evalpack diff` prints them all
Log = Callable[[str], None]


class PackRefused(PublishError):
    """The pack failed re-verification: nothing was sent. ``verification`` names every failure."""

    def __init__(self, pack: Path, verification: Verification) -> None:
        lines = "\n".join(f"  {line}" for line in verification.failures)
        super().__init__(f"{pack}: refused, the pack failed verification ({verification.summary()}):\n{lines}",
                         exit_code=1)
        self.verification = verification


@dataclass(frozen=True)
class ReleaseCheck:
    """The release gate's findings: the last released tag (None: a first release), the diff from it to the pack
    and the gate's decision (None when there was nothing to compare, or the comparison failed: ``note``)."""

    previous: str | None
    diff: PackDiff | None = None
    decision: GateResult | None = None
    note: str | None = None

    @property
    def changes(self) -> tuple[str, ...]:
        """The diff as ``evalpack diff`` prints it (empty without a comparison)."""
        return tuple(format_diff(self.diff)) if self.diff is not None else ()


class ReleaseBlocked(PublishError):
    """The release gate blocked the pack (policy ``block``): nothing was sent. ``check`` has the diff and the
    reasons."""

    def __init__(self, repo_id: str, version: str, check: ReleaseCheck) -> None:
        reasons = check.decision.reasons if check.decision else ()
        hints = []
        if any(r.startswith("holdout leaked") for r in reasons):
            hints.append(f"build again with `--previous` set to the {check.previous} pack (or at the same -o) so "
                         "the holdout stays held out")
        if any(r.startswith("answer") for r in reasons):
            hints.append("bump `version` in the spec and rebuild")
        if any(r.startswith("near-miss") for r in reasons):
            hints.append("make the study strong again, or raise `gate_margin:` in the spec")
        hints.append("or set `gate: warn` in the spec (then rebuild) to publish anyway")
        lines = "\n".join(f"  {r}" for r in reasons)
        super().__init__(f"{repo_id}: release {version} blocked by the gate against the last release "
                         f"{check.previous} ({len(reasons)} reason(s)):\n{lines}\nnothing was sent; "
                         + "; ".join(hints), exit_code=1)
        self.check = check


@dataclass(frozen=True)
class HoldoutKey:
    """A pack's holdout answer key (the folder beside it), checked against the pack and bound for ``repo_id``."""

    folder: Path
    repo_id: str
    endpoint: str
    name: str
    version: str
    questions: int
    files: tuple[HubFile, ...]

    @property
    def tag(self) -> str:
        return version_tag(self.version)

    @property
    def repo_url(self) -> str:
        return f"{self.endpoint.rstrip('/')}/datasets/{self.repo_id}"


@dataclass(frozen=True)
class HoldoutRelease:
    """Where a version's answer key now lives (a private repo)."""

    repo_id: str
    repo_url: str
    tag: str
    commit_sha: str
    files: int
    already_published: bool = False


@dataclass(frozen=True)
class PublishResult:
    """Where a pack version now lives on the Hub."""

    repo_id: str
    repo_url: str  # https://huggingface.co/datasets/OWNER/NAME
    tag: str  # v<version>
    commit_sha: str  # the commit the tag points to
    tag_url: str  # the repo browsed at the tag
    files: int  # files in the published layout
    deleted: tuple[str, ...] = ()  # stale files removed from main by this commit
    already_published: bool = False  # the tag already held exactly this content: nothing was sent
    check: ReleaseCheck | None = None  # the release gate's comparison with the last release (None: no-op)
    holdout: HoldoutRelease | None = None  # the answer key's private release, when a holdout repo was given


def resolve_endpoint(endpoint: str | None = None) -> str:
    """``endpoint``, else ``HF_ENDPOINT``, else the public Hub."""
    return (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def resolve_token(token: str | None = None) -> str:
    """``token``, else ``HF_TOKEN``, else the huggingface_hub login; raises PublishError when there is none."""
    if token:
        return token
    try:
        from huggingface_hub import get_token
    except ImportError as exc:
        raise PublishError(f"publishing needs huggingface_hub, a dependency of evalpack: reinstall evalpack "
                           f"(pip install -e .) ({exc})") from exc
    found = get_token()
    if not found:
        raise PublishError("no Hugging Face token: set HF_TOKEN or run `hf auth login` with a token that can write "
                           "to the repo")
    return found


def _scrub(text: str, token: str | None) -> str:
    return text.replace(token, "***") if token else text


def release_order(tag: str) -> tuple | None:
    """The sort key of a ``v<semver>`` tag in semver precedence (a pre-release before its release, build
    metadata ignored); None for any other tag."""
    match = SEMVER_TAG.fullmatch(tag)
    if match is None:
        return None
    pre = match.group(4)
    ids = () if pre is None else tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return int(match.group(1)), int(match.group(2)), int(match.group(3)), pre is None, ids


def last_release(tags: Iterable[str]) -> str | None:
    """The highest ``v<semver>`` tag of ``tags`` (None: none)."""
    ranked = [(order, tag) for tag in tags if (order := release_order(tag)) is not None]
    return max(ranked)[1] if ranked else None


def _differences(files: Iterable[HubFile], remote: dict) -> list[str]:
    """What differs between the files to publish and a published tree (``path -> RepoFile``)."""
    local = {f.path: f for f in files}
    remote = {p: e for p, e in remote.items() if p not in KEPT_REMOTE}
    out = [f"{p}: new in this pack" for p in sorted(set(local) - set(remote))]
    out += [f"{p}: published, not in this pack" for p in sorted(set(remote) - set(local))]
    for path in sorted(set(local) & set(remote)):
        entry, mine = remote[path], local[path]
        lfs = getattr(entry, "lfs", None)
        same = (lfs.sha256 == mine.sha256()) if lfs else (entry.blob_id == mine.git_oid())
        if not same:
            out.append(f"{path}: content differs")
    return out


def _remote_files(api, repo_id: str, revision: str) -> dict:
    from huggingface_hub.hf_api import RepoFile

    tree = api.list_repo_tree(repo_id, repo_type="dataset", revision=revision, recursive=True)
    return {entry.path: entry for entry in tree if isinstance(entry, RepoFile)}


def prepare(pack: str | Path, repo: str, *, endpoint: str | None = None,
            public_key: str | Path | None = None) -> tuple[HubLayout, Verification]:
    """Steps 2-3 without any network: re-verify (raising PackRefused) and build the layout."""
    pack = Path(pack)
    check_repo_id(repo)
    manifest = read_manifest(pack)
    verification = verify_pack(pack, manifest, public_key)
    if not verification.ok:
        raise PackRefused(pack, verification)
    return build_layout(pack, repo, resolve_endpoint(endpoint)), verification


def has_holdout(layout: HubLayout) -> bool:
    return any(q.get("split") == "holdout" for q in layout.questions)


def holdout_key(layout: HubLayout, holdout_repo: str | None) -> HoldoutKey | None:
    """The answer key beside the pack, bound for ``holdout_repo`` (None: no repo given, or the pack has no
    holdout). No network. PublishError (exit code 2) as :func:`checked_key` says."""
    found = checked_key(layout.pack, layout.questions, layout.repo_id, holdout_repo)
    if found is None:
        return None
    folder, count = found
    return HoldoutKey(folder, holdout_repo, layout.endpoint, layout.name, layout.version, count, folder_files(folder))


def checked_key(pack: Path, questions: list[dict], repo_id: str, holdout_repo: str | None) -> tuple[Path, int] | None:
    """(the answer key's folder beside ``pack``, its holdout questions' count) for ``holdout_repo``, or None (no repo
    given, or no holdout among ``questions``). No network, no verification: ``evalpack publish`` asks it before
    rerunning the pack. PublishError (exit code 2) for a bad repo id, ``repo_id`` itself, or a pack with holdout
    questions whose key is missing beside it or does not match its commitments."""
    if not holdout_repo or not any(q.get("split") == "holdout" for q in questions):
        return None
    try:
        check_repo_id(holdout_repo)
    except PublishError as exc:
        raise PublishError(str(exc).replace("--repo", "--holdout-repo", 1)) from None
    if holdout_repo == repo_id:
        raise PublishError(f"--holdout-repo {holdout_repo}: the public repo itself; the answer key never goes to the "
                           "public repo: name a separate repo (it is created private)")
    folder = holdout_key_beside(pack)
    count = sum(q.get("split") == "holdout" for q in questions)
    if not (folder / HOLDOUT_FILE).is_file():
        raise PublishError(f"{pack}: {count} holdout question(s) but no answer key beside the pack at "
                           f"{folder}; nothing was sent: publish the folder `evalpack build -o` wrote (its key is "
                           "written beside it), or put that version's key there")
    try:
        with_holdout_key(load_questions(pack), folder)
    except InputError as exc:  # another version's key, or an edited one
        raise PublishError(f"{exc}; nothing was sent") from None
    return folder, count


def _client(endpoint: str, token: str):
    try:
        from huggingface_hub import HfApi
    except ImportError as exc:
        raise PublishError(f"publishing needs huggingface_hub, a dependency of evalpack: reinstall evalpack "
                           f"(pip install -e .) ({exc})") from exc
    return HfApi(endpoint=endpoint, token=token, library_name="evalpack", library_version=__version__)


@contextmanager
def _hub_errors(repo_id: str, endpoint: str, token: str) -> Iterator[None]:
    """Hub and network errors as PublishError (exit code 1), the token scrubbed."""
    from huggingface_hub.errors import HfHubHTTPError

    try:
        import httpx2

        network_errors: tuple = (httpx2.HTTPError, OSError)
    except ImportError:
        network_errors = (OSError,)
    try:
        yield
    except HfHubHTTPError as exc:
        raise PublishError(_scrub(f"{repo_id}: the Hub refused a request: {exc}", token), exit_code=1) from None
    except ValueError as exc:  # huggingface_hub raises it for card metadata the Hub rejects
        raise PublishError(_scrub(f"{repo_id}: {exc}", token), exit_code=1) from None
    except network_errors as exc:
        raise PublishError(_scrub(f"{repo_id}: could not reach {endpoint}: {type(exc).__name__}: {exc}", token),
                           exit_code=1) from None


def _refs(api, repo_id: str):
    """The repo's refs, or None when there is no such repo (yet)."""
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        return api.list_repo_refs(repo_id, repo_type="dataset")
    except RepositoryNotFoundError:
        return None


def _moved_tag_error(repo_id: str, tag: str, commit: str, differences: list[str], what: str) -> PublishError:
    shown = "\n".join(f"  {d}" for d in differences[:20])
    more = f"\n  ... and {len(differences) - 20} more" if len(differences) > 20 else ""
    return PublishError(f"{repo_id}: tag {tag} already exists at {commit[:12]} with different content, and a "
                        f"published version is never moved; bump `version` in the spec, rebuild and publish {what} "
                        f"again. Differences:\n{shown}{more}", exit_code=1)


def _commit(api, repo_id: str, files: tuple[HubFile, ...], head: str | None, title: str, description: str,
            tag: str, tag_message: str, say: Log) -> tuple[str, tuple[str, ...]]:
    """Steps 6-7 on one repo: one commit with ``files`` (deleting the rest of ``main`` but .gitattributes) on
    ``head``, then ``tag`` on it. Returns (commit, deleted paths)."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    remote = _remote_files(api, repo_id, head) if head else {}
    stale = sorted(set(remote) - {f.path for f in files} - KEPT_REMOTE)
    operations = [CommitOperationAdd(path_in_repo=f.path,
                                     path_or_fileobj=str(f.source))
                  for f in files]
    operations += [CommitOperationDelete(path_in_repo=p) for p in stale]
    say(f"committing {len(files)} files ({sum(f.size for f in files) / 1e6:.1f} MB)"
        + (f", deleting {len(stale)} stale" if stale else "") + f" to {repo_id}")
    removed = f"\n\nRemoved from main: {', '.join(stale)}." if stale else ""
    commit = api.create_commit(repo_id, operations, commit_message=title, commit_description=description + removed,
                               repo_type="dataset", revision="main", parent_commit=head)
    api.create_tag(repo_id, tag=tag, revision=commit.oid, tag_message=tag_message, repo_type="dataset")
    say(f"tagged {tag} at {commit.oid[:12]}")
    return commit.oid, tuple(stale)


def check_release(layout: HubLayout, tags: dict[str, str], *, token: str, log: Log | None = None) -> ReleaseCheck:
    """Step 5, read only: compare the pack with the last released version among ``tags`` (name -> commit) and
    apply the pack's gate. Raises ReleaseBlocked when the gate blocks; logs the diff and the reasons."""
    say = log or (lambda line: None)
    policy = layout.manifest.get("gate", "block")
    margin = layout.manifest.get("gate_margin", DEFAULT_MARGIN_POINTS)
    if policy not in POLICIES or isinstance(margin, bool) or not isinstance(margin, int | float) or not margin >= 0:
        raise PublishError(f"{layout.pack}/manifest.json: gate {policy!r} with gate_margin {margin!r} is not a "
                           f"release gate ({', '.join(POLICIES)}; points >= 0); rebuild the pack")
    previous = last_release(tags)
    if previous is None:
        say(f"first release: no v<semver> tag on {layout.repo_id} yet, nothing to compare")
        return ReleaseCheck(None)
    source = f"hub:{layout.repo_id}@{previous}"
    try:
        diff = diff_packs(fetch_side(source, endpoint=layout.endpoint, token=token), load_side(layout.pack))
        decision = gate(diff, margin_points=margin, policy=policy)
    except EvalpackError as exc:
        note = _scrub(f"cannot compare with the last release {previous}: {exc}", token)
        if policy == "block":
            raise PublishError(f"{note}; nothing was sent; fix that, or set `gate: warn` in the spec to publish "
                               "without the comparison", exit_code=1) from None
        say(f"gate ({policy}): {note}")
        return ReleaseCheck(previous, note=note)
    check = ReleaseCheck(previous, diff, decision)
    lines = check.changes
    say(f"changes since {previous}:")
    for line in lines[:SHOWN_CHANGES]:
        say(f"  {line}")
    if len(lines) > SHOWN_CHANGES:
        say(f"  ... and {len(lines) - SHOWN_CHANGES} more: evalpack diff {source} {layout.pack}")
    if decision.blocked:
        raise ReleaseBlocked(layout.repo_id, layout.version, check)
    for reason in decision.reasons:
        say(f"gate ({policy}): {reason}")
    if policy == "block":
        say(f"gate: passed against {previous}")
    return check


def upload_layout(layout: HubLayout, *, token: str, private: bool = False, log: Log | None = None) -> PublishResult:
    """Steps 4-7: the network part, for a layout that ``prepare`` built from a verified pack."""
    say = log or (lambda line: None)
    repo_id, tag = layout.repo_id, layout.tag
    api = _client(layout.endpoint, token)
    with _hub_errors(repo_id, layout.endpoint, token):
        refs = _refs(api, repo_id)
        if refs is not None and private and not api.dataset_info(repo_id).private:
            raise PublishError(f"{layout.repo_url} exists and is public, but --private was asked: refusing to "
                               f"publish there; make the repo private on the Hub first, or publish without --private",
                               exit_code=1)
        tags = {t.name: t.target_commit for t in refs.tags} if refs is not None else {}
        differences = _differences(layout.files, _remote_files(api, repo_id, tags[tag])) if tag in tags else []
        if tag in tags and not differences:
            say(f"tag {tag} already holds exactly this pack (commit {tags[tag][:12]}): nothing to send")
            return PublishResult(repo_id, layout.repo_url, tag, tags[tag], f"{layout.repo_url}/tree/{tag}",
                                 len(layout.files), (), True)
        check = check_release(layout, tags, token=token, log=say)
        if tag in tags:
            raise _moved_tag_error(repo_id, tag, tags[tag], differences, "the pack")
        api.create_repo(repo_id, repo_type="dataset", private=True if private else None, exist_ok=True)
        if private and not api.dataset_info(repo_id).private:
            raise PublishError(f"{layout.repo_url} exists and is public, but --private was asked: refusing to "
                               f"publish there; make the repo private on the Hub first, or publish without --private",
                               exit_code=1)
        refs = api.list_repo_refs(repo_id, repo_type="dataset")
        head = next((b.target_commit for b in refs.branches if b.name == "main"), None)
        description = (f"Published by `evalpack publish` (evalpack {__version__}).\n\n"
                       f"Rotations: {', '.join(layout.rotations)}. Questions: {len(layout.questions)}. "
                       f"Files: {len(layout.files)}.")
        oid, stale = _commit(api, repo_id, layout.files, head, f"{layout.name} {tag}", description, tag,
                             f"{layout.name} {layout.version}", say)
    return PublishResult(repo_id, layout.repo_url, tag, oid, f"{layout.repo_url}/tree/{tag}", len(layout.files),
                         stale, False, check)


def check_holdout_repo(key: HoldoutKey, *, token: str) -> None:
    """Read only, before the public release: a holdout repo that exists must be private."""
    api = _client(key.endpoint, token)
    with _hub_errors(key.repo_id, key.endpoint, token):
        if _refs(api, key.repo_id) is not None and not api.dataset_info(key.repo_id).private:
            raise PublishError(f"{key.repo_url} exists and is public: refusing to put the holdout answer key "
                               "there; make it private on the Hub, or name another --holdout-repo; nothing was sent",
                               exit_code=1)


def upload_holdout_key(key: HoldoutKey, *, token: str, log: Log | None = None) -> HoldoutRelease:
    """Step 8: the answer key to its own repo, created private (a public one is refused), one commit, tag
    ``v<version>``; the same key at that tag again is a no-op."""
    say = log or (lambda line: None)
    api = _client(key.endpoint, token)
    with _hub_errors(key.repo_id, key.endpoint, token):
        api.create_repo(key.repo_id, repo_type="dataset", private=True, exist_ok=True)
        if not api.dataset_info(key.repo_id).private:
            raise PublishError(f"{key.repo_url} exists and is public: refusing to put the holdout answer key there; "
                               "make it private on the Hub, or name another --holdout-repo", exit_code=1)
        refs = api.list_repo_refs(key.repo_id, repo_type="dataset")
        tags = {t.name: t.target_commit for t in refs.tags}
        if key.tag in tags:
            differences = _differences(key.files, _remote_files(api, key.repo_id, tags[key.tag]))
            if differences:
                raise _moved_tag_error(key.repo_id, key.tag, tags[key.tag], differences, "the pack and its key")
            say(f"holdout key: tag {key.tag} of {key.repo_id} already holds exactly this key: nothing to send")
            return HoldoutRelease(key.repo_id, key.repo_url, key.tag, tags[key.tag], len(key.files), True)
        head = next((b.target_commit for b in refs.branches if b.name == "main"), None)
        description = (f"Holdout answer key of {key.name} {key.version} ({key.questions} questions), published by "
                       f"`evalpack publish --holdout-repo` (evalpack {__version__}). Private: never make it public.")
        oid, _ = _commit(api, key.repo_id, key.files, head, f"{key.name} {key.tag} holdout key", description,
                         key.tag, f"{key.name} {key.version} holdout key", say)
    return HoldoutRelease(key.repo_id, key.repo_url, key.tag, oid, len(key.files), False)


def release(layout: HubLayout, *, token: str, private: bool = False, holdout_repo: str | None = None,
            log: Log | None = None) -> PublishResult:
    """Steps 3 (the key) to 8 for a layout ``prepare`` built: the public release, gated, then the answer key to
    ``holdout_repo`` (private). Without ``holdout_repo`` a pack's key stays where it is (logged)."""
    say = log or (lambda line: None)
    key = holdout_key(layout, holdout_repo)
    if key is None and has_holdout(layout):  # no holdout repo given
        folder = holdout_key_beside(layout.pack)
        kept = (folder / HOLDOUT_FILE).is_file()
        say(f"holdout answer key stays local at {folder} (not published; --holdout-repo OWNER/NAME, or "
            "EVALPACK_HUB_HOLDOUT_REPO for the Dagster publish asset, sends it to a private repo)" if kept else
            f"no holdout answer key at {folder}: keep this version's key safe, nobody can score its holdout without it")
    elif key is None and holdout_repo:
        say(f"no holdout questions: nothing to send to {holdout_repo}")
    if key is not None:
        check_holdout_repo(key, token=token)
    result = upload_layout(layout, token=token, private=private, log=log)
    if key is not None:
        result = replace(result, holdout=upload_holdout_key(key, token=token, log=log))
    return result


def publish_pack(pack: Path, repo: str, *, private: bool = False, token: str | None = None,
                 endpoint: str | None = None, public_key: str | Path | None = None,
                 holdout_repo: str | None = None, log: Log | None = None) -> PublishResult:
    """Re-verify ``pack`` and publish it to the dataset repo ``repo`` (OWNER/NAME) as tag ``v<version>``, gated
    against the last release; with ``holdout_repo``, its answer key to that repo (private), same tag.

    Raises ``PackRefused`` (exit code 1) for a pack that fails verification (with ``public_key``: unsigned, or
    signed by another key), before any request; ``ReleaseBlocked`` (exit code 1) when the release gate blocks,
    before any write; ``PublishError`` for a bad repo id, a missing token or answer key (exit code 2), a tag
    that exists with other content or a Hub error (exit code 1). Publishing the same pack again returns the
    existing tag's commit with ``already_published=True``. ``log`` receives one line per step.
    """
    check_repo_id(repo)
    token = resolve_token(token)
    layout, _ = prepare(pack, repo, endpoint=endpoint, public_key=public_key)
    return release(layout, token=token, private=private, holdout_repo=holdout_repo, log=log)
