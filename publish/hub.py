"""Publish a verified pack to the Hugging Face Hub: one commit with the whole layout, then the version tag.

``publish_pack`` is the one entry point for code (the Dagster publish asset calls it); the CLI
(``publish.cli.publish_command``) prints the same steps. In order:

1. the repo id is checked and the token found (``token`` argument, else ``HF_TOKEN``, else the
   huggingface_hub login) without any request;
2. the pack is re-verified (``publish.check.verify_pack``); a pack that fails is refused with
   ``PackRefused`` (exit code 1) naming every failure, and nothing is sent;
3. the layout is built (``publish.layout.build_layout``), with the pack's own README.md as the card;
4. ``create_repo(repo_type="dataset", exist_ok=True)``; asking for ``private`` on an existing public
   repo is refused rather than silently publishing in public;
5. if the tag ``v<version>`` exists: same content (every path, git blob SHA-1 or LFS SHA-256) is a
   no-op that returns the existing commit; different content is refused, because a published tag is
   never moved;
6. one commit on ``main`` with every file of the layout plus a delete for every file of ``main`` that
   is not in the layout (``.gitattributes`` excepted), with ``parent_commit`` set to the head that was
   listed, so a concurrent push fails instead of being overwritten;
7. the tag ``v<version>`` on that commit.

The endpoint is the ``endpoint`` argument, else ``HF_ENDPOINT``, else https://huggingface.co. The
token is never printed: it is scrubbed from every error message that leaves this module.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evalpack import __version__
from publish.check import Verification, verify_pack
from publish.layout import DEFAULT_ENDPOINT, HubLayout, PublishError, build_layout, check_repo_id, read_manifest

KEPT_REMOTE = {".gitattributes"}
Log = Callable[[str], None]


class PackRefused(PublishError):
    """The pack failed re-verification: nothing was sent. ``verification`` names every failure."""

    def __init__(self, pack: Path, verification: Verification) -> None:
        lines = "\n".join(f"  {line}" for line in verification.failures)
        super().__init__(f"{pack}: refused, the pack failed verification ({verification.summary()}):\n{lines}",
                         exit_code=1)
        self.verification = verification


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


def _differences(layout: HubLayout, remote: dict) -> list[str]:
    """What differs between the layout and a published tree (``path -> RepoFile``)."""
    local = {f.path: f for f in layout.files}
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


def upload_layout(layout: HubLayout, *, token: str, private: bool = False, log: Log | None = None) -> PublishResult:
    """Steps 4-7: the network part, for a layout that ``prepare`` built from a verified pack."""
    say = log or (lambda line: None)
    try:
        from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError as exc:
        raise PublishError(f"publishing needs huggingface_hub, a dependency of evalpack: reinstall evalpack "
                           f"(pip install -e .) ({exc})") from exc
    try:
        import httpx2

        network_errors: tuple = (httpx2.HTTPError, OSError)
    except ImportError:
        network_errors = (OSError,)

    repo_id, tag = layout.repo_id, layout.tag
    api = HfApi(endpoint=layout.endpoint, token=token, library_name="evalpack", library_version=__version__)
    try:
        api.create_repo(repo_id, repo_type="dataset", private=True if private else None, exist_ok=True)
        if private and not api.dataset_info(repo_id).private:
            raise PublishError(f"{layout.repo_url} exists and is public, but --private was asked: refusing to "
                               f"publish there; make the repo private on the Hub first, or publish without --private",
                               exit_code=1)
        refs = api.list_repo_refs(repo_id, repo_type="dataset")
        tags = {t.name: t.target_commit for t in refs.tags}
        if tag in tags:
            differences = _differences(layout, _remote_files(api, repo_id, tags[tag]))
            if differences:
                shown = "\n".join(f"  {d}" for d in differences[:20])
                more = f"\n  ... and {len(differences) - 20} more" if len(differences) > 20 else ""
                raise PublishError(f"{repo_id}: tag {tag} already exists at {tags[tag][:12]} with different content, "
                                   f"and a published version is never moved; bump `version` in the spec, rebuild "
                                   f"and publish again. Differences:\n{shown}{more}", exit_code=1)
            say(f"tag {tag} already holds exactly this pack (commit {tags[tag][:12]}): nothing to send")
            return PublishResult(repo_id, layout.repo_url, tag, tags[tag], f"{layout.repo_url}/tree/{tag}",
                                 len(layout.files), (), True)
        head = next((b.target_commit for b in refs.branches if b.name == "main"), None)
        remote = _remote_files(api, repo_id, head) if head else {}
        stale = sorted(set(remote) - {f.path for f in layout.files} - KEPT_REMOTE)
        operations = [CommitOperationAdd(path_in_repo=f.path,
                                         path_or_fileobj=str(f.source) if f.source is not None else f.content)
                      for f in layout.files]
        operations += [CommitOperationDelete(path_in_repo=p) for p in stale]
        say(f"committing {len(layout.files)} files ({layout.total_bytes / 1e6:.1f} MB)"
            + (f", deleting {len(stale)} stale" if stale else "") + f" to {repo_id}")
        removed = f"\n\nRemoved from main: {', '.join(stale)}." if stale else ""
        description = (f"Published by `evalpack publish` (evalpack {__version__}).\n\n"
                       f"Rotations: {', '.join(layout.rotations)}. Questions: {len(layout.questions)}. "
                       f"Files: {len(layout.files)}.{removed}")
        commit = api.create_commit(repo_id, operations, commit_message=f"{layout.name} {tag}",
                                   commit_description=description, repo_type="dataset", revision="main",
                                   parent_commit=head)
        api.create_tag(repo_id, tag=tag, revision=commit.oid, tag_message=f"{layout.name} {layout.version}",
                       repo_type="dataset")
        say(f"tagged {tag} at {commit.oid[:12]}")
    except HfHubHTTPError as exc:
        raise PublishError(_scrub(f"{repo_id}: the Hub refused a request: {exc}", token), exit_code=1) from None
    except ValueError as exc:  # huggingface_hub raises it for card metadata the Hub rejects
        raise PublishError(_scrub(f"{repo_id}: {exc}", token), exit_code=1) from None
    except network_errors as exc:
        raise PublishError(_scrub(f"{repo_id}: could not reach {layout.endpoint}: {type(exc).__name__}: {exc}",
                                  token), exit_code=1) from None
    return PublishResult(repo_id, layout.repo_url, tag, commit.oid, f"{layout.repo_url}/tree/{tag}",
                         len(layout.files), tuple(stale), False)


def publish_pack(pack: Path, repo: str, *, private: bool = False, token: str | None = None,
                 endpoint: str | None = None, public_key: str | Path | None = None,
                 log: Log | None = None) -> PublishResult:
    """Re-verify ``pack`` and publish it to the dataset repo ``repo`` (OWNER/NAME) as tag ``v<version>``.

    Raises ``PackRefused`` (exit code 1) for a pack that fails verification, before any request;
    ``PublishError`` for a bad repo id, a missing token (exit code 2), a tag that exists with other
    content or a Hub error (exit code 1). Publishing the same pack again returns the existing tag's
    commit with ``already_published=True``. ``log`` receives one line per step.
    """
    check_repo_id(repo)
    token = resolve_token(token)
    layout, _ = prepare(pack, repo, endpoint=endpoint, public_key=public_key)
    return upload_layout(layout, token=token, private=private, log=log)
