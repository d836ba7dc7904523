"""The release (its own job, ``publish_pack``): the finished pack published on the Hugging Face Hub as tag ``v<version>``.

``hub_release`` is an asset that no "Materialize" button builds: it is declared here (an ``AssetSpec``
downstream of ``pack``, group ``hub``) and recorded by the ``release_to_hub`` op of the ``publish_pack``
job, the only way to publish. A tag is never moved, so publishing is a release someone asks for, not a
side effect of "Materialize all", a sensor or a schedule (a rebuild with a fresh attestation but the same
version would be refused by the Hub and fail the run). ``publish.publish_pack`` re-verifies the finished
folder (attestation, hashes, gold SQL) before any request, so what goes up is the verified pack.

``publish_pack`` also runs the release gate against the last released version: when it blocks, the run fails
with the gate's reasons and the diff as a table in the failure's metadata; on success the materialisation
carries the changes since that version (``changelog``). With ``holdout_repo`` set, the answer key beside the
pack goes to that repo, private, under the same tag.

The repo and the credentials come from ``HubResource``; ``pipelines.resources`` configures it from
``EVALPACK_HUB_REPO``, ``HF_TOKEN``, ``HF_ENDPOINT`` and ``EVALPACK_HUB_PRIVATE`` (and, for ``holdout_repo``,
``EVALPACK_HUB_HOLDOUT_REPO``). The token is handed to ``publish_pack`` only: it is never logged and never
put in metadata.
"""

import json

from dagster import (
    AssetMaterialization,
    AssetSpec,
    ConfigurableResource,
    Failure,
    MetadataValue,
    OpExecutionContext,
    op,
)
from pydantic import Field

from assets.common import PACKS, EvalpackResource
from assets.pack import pack
from evalpack.core.layout import PackLayout
from evalpack.pack.diff import PackDiff, QuestionChange
from publish import PackRefused, PublishError, PublishResult, publish_pack
from publish.hub import ReleaseBlocked, ReleaseCheck

HUB_GROUP = "hub"
PACK_PLACEHOLDER = "{pack}"


class HubResource(ConfigurableResource):
    """The Hugging Face Hub dataset repo packs are released to, and the token that can write it."""

    repo: str | None = Field(default=None, description="Dataset repo OWNER/NAME; '{pack}' is replaced by the pack "
                                                       "key (one repo per pack). Unset: hub_release fails, saying so")
    token: str | None = Field(default=None, description="A token that can write the repo; unset: the "
                                                        "huggingface_hub login (`hf auth login`)")
    endpoint: str | None = Field(default=None, description="The Hub's URL; unset: $HF_ENDPOINT, else "
                                                           "https://huggingface.co")
    private: bool = Field(default=False, description="Create the repo private (an existing public repo is refused)")
    holdout_repo: str | None = Field(default=None, description="Dataset repo OWNER/NAME for the holdout answer key "
                                                               "('{pack}' as in repo), created private; unset: the "
                                                               "key stays beside the pack")

    def repo_for(self, pack_key: str) -> str:
        """The repo id for one pack: ``repo`` with ``{pack}`` replaced by the pack key."""
        if not self.repo:
            raise Failure(description="no Hub repo configured: set EVALPACK_HUB_REPO to OWNER/NAME (or "
                                      "OWNER/{pack}-evalpack for one repo per pack) where the code location runs, "
                                      "reload it, and launch the publish_pack job again", allow_retries=False)
        return self.repo.replace(PACK_PLACEHOLDER, pack_key)

    def holdout_repo_for(self, pack_key: str) -> str | None:
        """The answer key's repo id for one pack (None: not configured)."""
        return self.holdout_repo.replace(PACK_PLACEHOLDER, pack_key) if self.holdout_repo else None

    def scrub(self, text: str) -> str:
        return text.replace(self.token, "***") if self.token else text


def _cell(value: object, limit: int = 80) -> str:
    """One Markdown table cell: on one line, pipes escaped, cut to ``limit`` characters."""
    text = " ".join(("" if value is None else value if isinstance(value, str) else json.dumps(value)).split())
    text = text if len(text) <= limit else text[:limit - 3] + "..."
    return text.replace("\\", "\\\\").replace("|", "\\|")


def diff_table(diff: PackDiff) -> str:
    """The diff as a Markdown table: one row per question finding (question id, identity, what changed, old,
    new), then the near-miss survival rate, tables, columns and row counts."""
    kinds: tuple[tuple[str, tuple[QuestionChange, ...]], ...] = (
        ("split moved", diff.split_moves), ("answer changed", diff.answers),
        ("answer or gold SQL changed (committed)", diff.commitments), ("re-worded", diff.reworded),
        ("added", diff.added), ("removed", diff.removed), ("not compared", diff.not_compared))
    rows = ["| question | identity | change | old | new |", "|---|---|---|---|---|"]
    for what, changes in kinds:
        for q in changes:
            ids = q.old_id if q.new_id in (None, q.old_id) else q.new_id if q.old_id is None else \
                f"{q.old_id} -> {q.new_id}"
            rows.append(f"| {_cell(ids)} | {_cell(q.identity)} | {what} | {_cell(q.old)} | {_cell(q.new)} |")
    nm = diff.near_miss
    if nm.operators:
        pct = [None if v is None else f"{v:.2f}%" for v in (nm.old_pct, nm.new_pct)]
        rows.append(f"| | | near-miss survival | {_cell(pct[0])} | {_cell(pct[1])} |")
    rows += [f"| | {_cell(t)} | table added | | |" for t in diff.tables_added]
    rows += [f"| | {_cell(t)} | table removed | | |" for t in diff.tables_removed]
    rows += [f"| | {_cell(f'{c.table}.{c.column}')} | column | {_cell(c.old)} | {_cell(c.new)} |" for c in diff.columns]
    rows += [f"| | {_cell(f'{r.table} {r.rotation}')} | rows | {_cell(r.old)} | {_cell(r.new)} |" for r in diff.rows]
    if diff.version_changed:
        rows.append(f"| | | version | {_cell(diff.old_version)} | {_cell(diff.new_version)} |")
    return "\n".join(rows)


def changelog(check: ReleaseCheck | None) -> str:
    """The changes since the last release, as Markdown."""
    if check is None:
        return "already published: nothing changed"
    if check.previous is None:
        return "first release: no earlier `v<semver>` tag on the repo"
    if check.diff is None:
        return f"not compared with {check.previous}: {check.note}"
    reasons = check.decision.reasons if check.decision else ()
    warned = "\n\n" + "\n".join(f"- gate ({check.decision.policy}): {r}" for r in reasons) if reasons else ""
    return f"**Changes since {check.previous}**{warned}\n\n```\n" + "\n".join(check.changes) + "\n```"


def release_metadata(result: PublishResult, private: bool) -> dict:
    load = (f'```python\nfrom datasets import load_dataset\nquestions = load_dataset("{result.repo_id}", '
            f'"questions", revision="{result.tag}")\n```')
    holdout = result.holdout
    return {
        "repo": result.repo_id,
        "repo_url": MetadataValue.url(result.repo_url),
        "tag": result.tag,
        "tag_url": MetadataValue.url(result.tag_url),
        "commit_sha": result.commit_sha,
        "commit_url": MetadataValue.url(f"{result.repo_url}/commit/{result.commit_sha}"),
        "files": result.files,
        "deleted": len(result.deleted),
        "deleted_files": MetadataValue.json(list(result.deleted)),
        "already_published": result.already_published,
        "private": private,
        "how_to_load": MetadataValue.md(load),
        "previous_release": (result.check.previous if result.check else None) or "",
        "changelog": MetadataValue.md(changelog(result.check)),
        **({"holdout_repo": holdout.repo_id, "holdout_tag_url": MetadataValue.url(f"{holdout.repo_url}/tree/"
                                                                                  f"{holdout.tag}"),
            "holdout_commit_sha": holdout.commit_sha} if holdout else {}),
    }


hub_release = AssetSpec(
    "hub_release", deps=[pack], group_name=HUB_GROUP, partitions_def=PACKS, kinds={"huggingface"},
    description="The finished pack on the Hub dataset repo, tagged `v<version>`: recorded by the publish_pack job "
                "(never by Materialize)")


@op(description="Re-verify the finished pack and publish it to the Hub: one commit, then the tag `v<version>` "
                "(the same content again is a no-op; a tag is never moved to other content).")
def release_to_hub(context: OpExecutionContext, evalpack: EvalpackResource, hub: HubResource) -> None:
    key = context.partition_key
    repo = hub.repo_for(key)
    folder = evalpack.pack_dir(key)
    if not PackLayout(folder).manifest.is_file():
        raise Failure(description=f"{folder}: no finished pack {key!r}; run build_pack for this partition first "
                                  "(the pack asset writes it once every blocking check passed)", allow_retries=False)
    holdout_repo = hub.holdout_repo_for(key)
    context.log.info(f"publishing {folder} to {repo}" + (" (private)" if hub.private else "")
                     + (f", its holdout answer key to {holdout_repo} (private)" if holdout_repo else ""))
    try:
        result = publish_pack(folder, repo, private=hub.private, token=hub.token or None,
                              endpoint=hub.endpoint or None, public_key=evalpack.public_key,
                              holdout_repo=holdout_repo, log=lambda line: context.log.info(hub.scrub(line)))
    except ReleaseBlocked as exc:
        check = exc.check
        raise Failure(description=hub.scrub(str(exc)), allow_retries=False, metadata={
            "blocked": True, "exit_code": exc.exit_code, "previous_release": check.previous or "",
            "gate": check.decision.policy if check.decision else "",
            "reasons": MetadataValue.json([hub.scrub(r) for r in (check.decision.reasons if check.decision else ())]),
            "diff": MetadataValue.md(hub.scrub(diff_table(check.diff)) if check.diff else ""),
        }) from None
    except PackRefused as exc:
        raise Failure(description=hub.scrub(str(exc)), allow_retries=False, metadata={
            "refused": True, "failures": MetadataValue.json([hub.scrub(f) for f in exc.verification.failures])},
        ) from None
    except PublishError as exc:
        raise Failure(description=hub.scrub(str(exc)), allow_retries=False,
                      metadata={"exit_code": exc.exit_code}) from None
    context.log.info(f"{result.repo_url} {result.tag} at {result.commit_sha[:12]}"
                     + (" (already published: nothing sent)" if result.already_published else ""))
    context.log_event(AssetMaterialization(asset_key=hub_release.key, partition=key,
                                           metadata=release_metadata(result, hub.private)))
