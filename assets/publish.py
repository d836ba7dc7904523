"""The release (its own job, ``publish_pack``): the finished pack published on the Hugging Face Hub as tag ``v<version>``.

``hub_release`` is an asset that no "Materialize" button builds: it is declared here (an ``AssetSpec``
downstream of ``pack``, group ``hub``) and recorded by the ``release_to_hub`` op of the ``publish_pack``
job, the only way to publish. A tag is never moved, so publishing is a release someone asks for, not a
side effect of "Materialize all", a sensor or a schedule (a rebuild with a fresh attestation but the same
version would be refused by the Hub and fail the run). ``publish.publish_pack`` re-verifies the finished
folder (attestation, hashes, gold SQL) before any request, so what goes up is the verified pack.

The repo and the credentials come from ``HubResource``; ``pipelines.resources`` configures it from
``EVALPACK_HUB_REPO``, ``HF_TOKEN``, ``HF_ENDPOINT`` and ``EVALPACK_HUB_PRIVATE``. The token is handed
to ``publish_pack`` only: it is never logged and never put in metadata.
"""

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
from evalpack.layout import PackLayout
from publish import PackRefused, PublishError, PublishResult, publish_pack

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

    def repo_for(self, pack_key: str) -> str:
        """The repo id for one pack: ``repo`` with ``{pack}`` replaced by the pack key."""
        if not self.repo:
            raise Failure(description="no Hub repo configured: set EVALPACK_HUB_REPO to OWNER/NAME (or "
                                      "OWNER/{pack}-evalpack for one repo per pack) where the code location runs, "
                                      "reload it, and materialise hub_release again", allow_retries=False)
        return self.repo.replace(PACK_PLACEHOLDER, pack_key)

    def scrub(self, text: str) -> str:
        return text.replace(self.token, "***") if self.token else text


def release_metadata(result: PublishResult, private: bool) -> dict:
    load = (f'```python\nfrom datasets import load_dataset\nquestions = load_dataset("{result.repo_id}", '
            f'"questions", revision="{result.tag}")\n```')
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
    }


hub_release = AssetSpec(
    "hub_release", deps=[pack], group_name=HUB_GROUP, partitions_def=PACKS, kinds={"huggingface"},
    description="The finished pack on the Hub dataset repo, tagged v<version>: recorded by the publish_pack job "
                "(never by Materialize)")


@op(description="Re-verify the finished pack and publish it to the Hub: one commit, then the tag v<version> "
                "(the same content again is a no-op; a tag is never moved to other content).")
def release_to_hub(context: OpExecutionContext, evalpack: EvalpackResource, hub: HubResource) -> None:
    key = context.partition_key
    repo = hub.repo_for(key)
    folder = evalpack.pack_dir(key)
    if not PackLayout(folder).manifest.is_file():
        raise Failure(description=f"{folder}: no finished pack {key!r}; run build_pack for this partition first "
                                  "(the pack asset writes it once every blocking check passed)", allow_retries=False)
    context.log.info(f"publishing {folder} to {repo}" + (" (private)" if hub.private else ""))
    try:
        result = publish_pack(folder, repo, private=hub.private, token=hub.token or None,
                              endpoint=hub.endpoint or None, public_key=evalpack.public_key,
                              log=lambda line: context.log.info(hub.scrub(line)))
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
