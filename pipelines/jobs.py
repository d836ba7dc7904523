"""Jobs: ``build_pack`` materialises every evalpack asset (and runs every check) for one pack partition.

Its partitions (``packs``) come from the selected assets.
"""

from dagster import AssetSelection, define_asset_job

from assets.common import GROUP

build_pack = define_asset_job(
    name="build_pack",
    selection=AssetSelection.groups(GROUP),
    description="Build one pack: spec -> rotations (in parallel) -> questions -> verification -> near-miss -> "
                "certificate and manifest -> attestation -> packs/<pack>. Blocking checks stop a bad pack.",
)
