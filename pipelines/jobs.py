"""Jobs: ``build_pack`` materialises every evalpack asset (and runs every check) for one pack partition;
``publish_pack`` releases a finished pack on the Hugging Face Hub (recording ``hub_release``).

``build_pack`` is what the sensor and the schedule run; it selects the ``evalpack`` group only. Publishing is
an op job, not an asset selection: ``hub_release`` is declared as an asset that only this job records, so no
"Materialize all" ever publishes. A Hub tag is never moved, so a release is a run someone asks for (after
bumping the spec's version for new content).
"""

from dagster import AssetSelection, define_asset_job, job

from assets.common import GROUP, PACKS
from assets.publish import release_to_hub

build_pack = define_asset_job(
    name="build_pack",
    selection=AssetSelection.groups(GROUP),
    description="Build one pack: spec -> questions -> rotations (tables, then checks, one step each) -> "
                "verification -> certificate and manifest -> attestation -> `<packs_dir>/<pack>`. Blocking checks "
                "stop a bad pack.",
)


@job(partitions_def=PACKS, description="Publish the finished `<packs_dir>/<pack>` to the Hugging Face Hub dataset "
                                       "repo $EVALPACK_HUB_REPO: re-verified first, one commit, then the tag "
                                       "`v<version>` (the same content again sends nothing; a tag is never moved). "
                                       "Run build_pack first.")
def publish_pack():
    release_to_hub()
