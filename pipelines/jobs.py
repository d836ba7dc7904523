"""Jobs: ``build_pack`` materialises every evalpack asset (and runs every check) for one pack partition;
``publish_pack`` releases a finished pack on the Hugging Face Hub (``hub_release``).

Their partitions (``packs``) come from the selected assets. ``build_pack`` is what the sensor and the
schedule run; it selects the ``evalpack`` group only, so a rebuild never publishes: a Hub tag is never
moved, so a release is a run someone asks for (after bumping the spec's version for new content).
"""

from dagster import AssetSelection, define_asset_job

from assets.common import GROUP
from assets.publish import hub_release

build_pack = define_asset_job(
    name="build_pack",
    selection=AssetSelection.groups(GROUP),
    description="Build one pack: spec -> rotations (in parallel) -> questions -> verification -> near-miss -> "
                "certificate and manifest -> attestation -> packs/<pack>. Blocking checks stop a bad pack.",
)

publish_pack = define_asset_job(
    name="publish_pack",
    selection=AssetSelection.assets(hub_release),
    description="Publish the finished packs/<pack> to the Hugging Face Hub dataset repo $EVALPACK_HUB_REPO: "
                "re-verified first, one commit, then the tag v<version> (the same content again sends nothing; "
                "a tag is never moved). Run build_pack first.",
)
