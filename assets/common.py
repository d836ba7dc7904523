"""What every evalpack asset shares: the pack partitions, the settings resource and the pack folders.

The partitions definition lives here, not in ``pipelines/``, because the asset decorators need it
and imports only go down the layers (assets -> pipelines, never back).

Dagster writes its packs to a folder of its own (``packs/dagster/`` of this checkout unless
``EVALPACK_PACKS_DIR`` says otherwise), never to where ``evalpack build -o packs/<name>`` writes:
the pack asset replaces a finished pack only inside a folder that Dagster created and marked.
"""

import os
import re
import warnings
from pathlib import Path

from dagster import (
    ConfigurableResource,
    DynamicPartitionsDefinition,
    Failure,
    InitResourceContext,
    PreviewWarning,
    asset_check,
)
from pydantic import Field, PrivateAttr

from evalpack import __version__
from evalpack.build import RotationsChecked

REPO = Path(__file__).resolve().parents[1]
GROUP = "evalpack"
CODE_VERSION = __version__
WORK = ".work"
#: The file that marks a packs folder as Dagster's own (created with the folder; never inside a pack).
OWNED = ".dagster-packs"

#: One partition per spec file ``schemas/<key>.yaml``; the sensor adds them, the UI can too.
PACKS = DynamicPartitionsDefinition(name="packs")

#: A spec file stem that can be a partition key and a folder name.
PACK_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def checked_key(pack: str) -> str:
    """``pack`` when it can name a spec file and a folder (a partition added by hand could be anything)."""
    if not PACK_KEY.fullmatch(pack):
        raise ValueError(f"pack partition {pack!r}: a pack key is letters, digits, '_', '.', '-' and starts with a "
                         "letter, digit or '_' (it names schemas/<key>.yaml and packs/<key>)")
    return pack


class EvalpackResource(ConfigurableResource):
    """Where specs are read and packs are written, and the keys and thresholds of a build."""

    schemas_dir: str = Field(default=str(REPO / "schemas"),
                             description="Folder of pack specs; partition `<key>` reads `<schemas_dir>/<key>.yaml`")
    packs_dir: str = Field(default=str(REPO / "packs" / "dagster"),
                           description="Dagster's own folder of finished packs (`<packs_dir>/<key>`) and working "
                                       "folders (`<packs_dir>/.work/<key>`); never the folder `evalpack build` writes")
    near_miss_threshold: float | None = Field(
        default=None, description="Highest acceptable share of near-miss mutants matching on every rotation; "
                                  "default: the threshold the near-miss study reports")
    signing_key: str | None = Field(default=None,
                                    description="Private key (PEM) signing attestations; default $EVALPACK_SIGNING_KEY")
    public_key: str | None = Field(default=None,
                                   description="Public key (PEM) the attestation check demands; unset: not checked")

    # the rotations each pack's run has checked in this process (Dagster sets a resource up once per run and process)
    _checked: dict[str, RotationsChecked] = PrivateAttr(default_factory=dict)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._checked = {}

    def rotations_checked(self, pack: str) -> RotationsChecked:
        """What this run has checked of ``pack``'s rotations in this process (:class:`evalpack.build.RotationsChecked`)."""
        return self._checked.setdefault(pack, RotationsChecked())

    def spec_path(self, pack: str) -> Path:
        return Path(self.schemas_dir) / f"{checked_key(pack)}.yaml"

    def work_dir(self, pack: str) -> Path:
        """The working folder a pack is assembled in, step by step (a sibling of the finished packs)."""
        return Path(self.packs_dir) / WORK / checked_key(pack)

    def pack_dir(self, pack: str) -> Path:
        return Path(self.packs_dir) / checked_key(pack)

    def placed(self, pack: str, path: Path) -> Path:
        """Where ``path`` (inside the pack's working folder, or anywhere else: unchanged) is once the pack step has
        moved that folder into place: what the UI's metadata links, since the working folder is gone by the time
        anyone follows the link."""
        try:
            return self.pack_dir(pack) / Path(path).relative_to(self.work_dir(pack))
        except ValueError:
            return Path(path)

    def current_dir(self, pack: str) -> Path:
        """The working folder while a build is under way, else the finished pack (checks rerun later)."""
        work = self.work_dir(pack)
        return work if work.is_dir() else self.pack_dir(pack)

    def require_work_dir(self, pack: str) -> Path:
        work = self.work_dir(pack)
        if not work.is_dir():
            raise FileNotFoundError(f"{work}: no working folder for pack {pack!r}; materialise rotations "
                                    "(or the whole build_pack job) for this partition first")
        return work

    def claim_packs_dir(self) -> Path:
        """``packs_dir``, created and marked as Dagster's if new; refused when it holds packs Dagster did not make
        (``evalpack build`` output), so that a Dagster build never replaces a pack built from the command line."""
        root = Path(self.packs_dir)
        if (root / OWNED).is_file():
            return root
        if root.is_dir() and any(p.name != WORK for p in root.iterdir()):
            raise Failure(description=f"{root}: holds packs that Dagster did not build (no {OWNED} marker); point "
                                      "EVALPACK_PACKS_DIR at a folder of Dagster's own (default: packs/dagster/)",
                          allow_retries=False)
        root.mkdir(parents=True, exist_ok=True)
        (root / OWNED).write_text("Packs built by the evalpack Dagster code location; `evalpack build` writes "
                                  "elsewhere.\n", encoding="utf-8")
        return root

    def signing_key_path(self) -> str | None:
        return self.signing_key or os.environ.get("EVALPACK_SIGNING_KEY") or None


def pack_check(*, asset, blocking: bool):
    """``@asset_check`` partitioned by pack, so every pack has its own check status.

    Partitioned asset checks are a preview feature of Dagster 1.13 (pinned exactly in pyproject.toml);
    the PreviewWarning is silenced for these decorations only.
    """

    def decorate(fn):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=PreviewWarning, message=".*partitions_def on an AssetCheckSpec")
            return asset_check(asset=asset, blocking=blocking, partitions_def=PACKS)(fn)

    return decorate
