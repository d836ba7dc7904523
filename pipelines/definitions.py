"""The evalpack code location: ``dagster dev`` (workspace.yaml or [tool.dagster]) loads ``defs`` from here."""

from dagster import Definitions

from assets import ALL_ASSETS, ALL_CHECKS
from assets.publish import hub_release
from pipelines.executors import executor
from pipelines.jobs import build_pack, publish_pack
from pipelines.resources import resources
from pipelines.schedules import weekly_rebuild
from pipelines.sensors import spec_file_sensor

defs = Definitions(
    assets=[*ALL_ASSETS, hub_release],
    asset_checks=ALL_CHECKS,
    jobs=[build_pack, publish_pack],
    sensors=[spec_file_sensor],
    schedules=[weekly_rebuild],
    resources=resources(),
    executor=executor(),
)
