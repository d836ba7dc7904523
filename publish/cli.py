"""``evalpack publish PACK --repo OWNER/NAME [--private] [--dry-run] [--public-key KEY] [--holdout-repo OWNER/NAME]``:
registered as a subcommand of ``evalpack`` through the ``evalpack.commands`` entry point (pyproject.toml), so the
engine's CLI never imports this layer.

Exit codes: 0 published (or already published with the same content, or a dry run of a verified
pack); 1 refused (the pack fails verification or is not signed by --public-key, the release gate blocks, the
tag exists with other content, the Hub said no); 2 bad input (no pack, bad repo id, no token, a pack that
cannot be laid out, a holdout without its answer key beside the pack when --holdout-repo is given).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from evalpack.core.errors import ERROR_PREFIX
from evalpack.core.scoring import PUBLIC_KEY_ENV, check_report_file, error_text
from publish.revision import fetch_side

if TYPE_CHECKING:
    from publish.layout import HubLayout


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def describe(layout: HubLayout) -> list[str]:
    """The layout as the dry run prints it: configs with their splits, then every file with its size."""
    lines = [f"{layout.name} {layout.version} -> {layout.repo_url} (tag {layout.tag})",
             f"configs ({len(layout.configs)}; default: questions), {layout.total_rows:,} rows:"]
    for config in layout.configs:
        splits = ", ".join(f"{s.name} ({s.rows:,} rows)" for s in config.splits)
        lines.append(f"  {config.name}{' [default]' if config.default else ''}: {splits}")
    lines.append(f"files ({len(layout.files)}, {_size(layout.total_bytes)}):")
    lines += [f"  {_size(f.size):>9}  {f.path}" for f in layout.files]
    return lines


def _repo_of(pack: str | Path) -> str:
    """The repo the pack's spec names (``repo:``, recorded in the manifest and named by its card)."""
    from publish.layout import PublishError, read_manifest

    named = read_manifest(Path(pack)).get("repo")
    if not named:
        raise PublishError(f"{pack}: no --repo given and its spec names no `repo:`; pass --repo OWNER/NAME, or set "
                           "`repo: OWNER/NAME` in the spec and rebuild (the card then names it too)")
    return named


def publish_command(pack: str | Path, repo: str | None, *, private: bool = False, dry_run: bool = False,
                    public_key: str | Path | None = None, holdout_repo: str | None = None) -> int:
    """Re-verify PACK (signed by ``public_key`` when given), then publish it to REPO, gated against the last
    release, and its holdout answer key to ``holdout_repo`` (or, with ``dry_run``, print what would go up).
    Returns the exit code."""
    # loaded here, not with the module: every `evalpack` command registers this one (an entry point), and the
    # Hub client, the pack's checks and the card's Arrow schemas are imports that only a publish needs
    from evalpack.core.scoring import InputError, load_questions
    from publish.hub import PackRefused, checked_key, holdout_key, prepare, release, resolve_endpoint, resolve_token
    from publish.layout import PublishError, check_repo_id, read_manifest

    try:
        read_manifest(Path(pack))  # a pack that is not there is the first thing to say, before any token is looked for
        repo = repo or _repo_of(pack)
        check_repo_id(repo)
        token = None if dry_run else resolve_token()
        try:  # the holdout repo and key before the pack is rerun, which takes a while (a damaged pack: below)
            questions = load_questions(Path(pack))
        except InputError:
            questions = []
        checked_key(Path(pack), questions, repo, holdout_repo)
        layout, verification = prepare(pack, repo, endpoint=resolve_endpoint(), public_key=public_key)
        print(f"{pack}: {verification.summary()}")
        for note in verification.notes:
            print(f"  {note}")
        if dry_run:
            key = holdout_key(layout, holdout_repo)
            for line in describe(layout):
                print(line)
            if key is not None:
                print(f"holdout answer key: {key.folder} ({key.questions} questions, {len(key.files)} files) -> "
                      f"{key.repo_url} (private, tag {key.tag})")
            print("dry run: nothing was sent (the release gate runs when publishing)")
            return 0
        print(f"publishing {layout.name} {layout.version} to {layout.repo_url}")
        result = release(layout, token=token, private=private, holdout_repo=holdout_repo,
                         log=lambda line: print(f"  {line}"))
    except PackRefused as exc:
        print(f"evalpack publish: {exc}", file=sys.stderr)
        print("nothing was sent", file=sys.stderr)
        return exc.exit_code
    except PublishError as exc:
        print(error_text(exc, ERROR_PREFIX), file=sys.stderr)
        return exc.exit_code
    if result.already_published:
        print(f"already published: {result.tag_url} (commit {result.commit_sha})")
    else:
        print(f"published {result.tag_url} (commit {result.commit_sha})")
        if result.deleted:
            print(f"  removed {len(result.deleted)} stale file(s) from main")
    if result.holdout is not None:
        print(f"holdout answer key {'already ' if result.holdout.already_published else ''}published privately: "
              f"{result.holdout.repo_url}/tree/{result.holdout.tag} (commit {result.holdout.commit_sha})")
    print(f'load it: load_dataset("{result.repo_id}", "questions", revision="{result.tag}")')
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """Add ``publish`` to the ``evalpack`` command line (the ``evalpack.commands`` entry point)."""
    p = sub.add_parser("publish", help="publish a verified pack to the Hugging Face Hub")
    p.add_argument("pack")
    p.add_argument("--repo", help="OWNER/NAME of the dataset repo (default: the spec's `repo:`, which the card names)")
    p.add_argument("--private", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="print the layout; make no request")
    p.add_argument("--public-key", default=os.environ.get(PUBLIC_KEY_ENV) or None, metavar="KEY",
                   help=f"PEM public key the pack must be signed with (default ${PUBLIC_KEY_ENV}); an unsigned pack "
                        "or one signed by another key is refused before any request")
    p.add_argument("--holdout-repo", metavar="OWNER/NAME",
                   help="also publish the holdout answer key (PACK.holdout-key beside the pack) to this repo, "
                        "created private, tagged like the pack; without it the key stays local")
    p.set_defaults(func=lambda args: publish_command(args.pack, args.repo, private=args.private,
                                                     dry_run=args.dry_run, public_key=args.public_key,
                                                     holdout_repo=args.holdout_repo))


def add_diff_command(sub: argparse._SubParsersAction) -> None:
    """Add ``diff`` to the ``evalpack`` command line (the ``evalpack.commands`` entry point): it reads Hub
    revisions as well as pack folders, so it lives in this layer."""
    from evalpack.pack.diff import diff_command

    def run(args: argparse.Namespace) -> int:
        check_report_file(args.json)
        return diff_command(fetch_side(args.old), fetch_side(args.new), json_path=args.json)

    d = sub.add_parser("diff", help="compare two versions of a pack (exit 0 same, 1 different, 2 bad input)")
    d.add_argument("old", help="pack folder or hub:OWNER/NAME@REVISION")
    d.add_argument("new", help="pack folder or hub:OWNER/NAME@REVISION")
    d.add_argument("--json", help="write the differences as JSON to this file")
    d.set_defaults(func=run)
