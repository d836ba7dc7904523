"""Stage 1: the pack spec, read and validated by the engine (the spec hash is its data version)."""

import warnings
from pathlib import Path

from dagster import AssetExecutionContext, BetaWarning, Config, DataVersion, Failure, MetadataValue, Output, asset
from pydantic import Field

from assets.common import CODE_VERSION, GROUP, PACKS, EvalpackResource
from evalpack.core.errors import EvalpackError
from evalpack.spec.model import Spec
from evalpack.spec.reader import load_spec


class SpecConfig(Config):
    """The same overrides as ``evalpack build --seed/--rotations``; unset: the spec's own values."""

    seed: int | None = Field(default=None, description="Base seed (overrides the spec's seed)")
    rotations: int | None = Field(default=None, description="Number of rotations (overrides the spec)")


def data_version(loaded: Spec, config: SpecConfig) -> DataVersion:
    """The spec file's SHA-256; with run-time overrides, the overrides too (they change every table)."""
    if config.seed is None and config.rotations is None:
        return DataVersion(loaded.sha256)
    return DataVersion(f"{loaded.sha256}+seed={loaded.seed}+rotations={loaded.rotations}")


def spec_metadata(loaded: Spec, path: Path) -> dict:
    return {
        "spec_path": MetadataValue.path(str(path)),
        "spec_sha256": loaded.sha256,
        "pack": loaded.name,
        "version": loaded.version,
        "seeds": MetadataValue.json(list(loaded.seeds())),
        "answers": loaded.answers,
        "declared_rows": MetadataValue.json({t.name: t.rows for t in loaded.tables}),
    }


@asset(partitions_def=PACKS, group_name=GROUP, code_version=CODE_VERSION, kinds={"python", "yaml"})
def spec(context: AssetExecutionContext, config: SpecConfig, evalpack: EvalpackResource) -> Output[Spec]:
    """The validated spec of ``schemas/<pack>.yaml`` (errors name the file, line and key path)."""
    path = evalpack.spec_path(context.partition_key)
    try:
        loaded = load_spec(path, seed=config.seed, rotations=config.rotations)
    except EvalpackError as exc:  # the engine's one line (file:line, key path, what to do), not a traceback
        raise Failure(description=str(exc), allow_retries=False) from None
    context.log.info(f"{path}: pack {loaded.name} {loaded.version}, seeds {list(loaded.seeds())}")
    if loaded.name != context.partition_key:
        context.log.warning(f"{path} names its pack {loaded.name!r}; the pack is written to "
                            f"{evalpack.pack_dir(context.partition_key)} (partitions are named after spec files)")
    with warnings.catch_warnings():  # Output(data_version=...) is beta in Dagster 1.13 (pinned exactly)
        warnings.filterwarnings("ignore", category=BetaWarning, message=".*data_version")
        return Output(loaded, data_version=data_version(loaded, config), metadata=spec_metadata(loaded, path))

