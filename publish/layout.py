"""Lay a built pack out as a Hugging Face dataset repo (no network here): the pack folder is the repo.

Every file of the pack goes up unchanged at its pack path, and nothing else: the card's ``configs:``
block (``evalpack.pack.card.hub_configs``, written at build time) already points at the pack's own files,
``rotations/seed_<n>/tables/<table>.parquet`` for each table's config (one split per rotation) and
``data/questions/<split>.parquet`` for the ``questions`` config (:mod:`evalpack.pack.hubfiles`), so a download
of a tag is the pack exactly as built and verifies as it is, and ``load_dataset(PACK_DIR, "orders")``
reads the same rows locally as ``load_dataset(REPO, "orders", revision=TAG)`` does from the Hub.

Why this shape (huggingface_hub 2.4, datasets 5.2): all splits of one config share one schema, so
tables are configs and rotations are splits; split names must match ``\\w+(\\.\\w+)*`` (``seed_42``);
``datasets`` picks one reader for the whole repo from the first config's files, so the questions are
Parquet too. The holdout's answer key is never in the pack (it is a folder beside it), so it cannot go
up with it. ``publish.card.hub_card`` refuses a pack whose card names other files.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from evalpack.core.errors import EvalpackError
from evalpack.core.layout import PackLayout
from evalpack.core.scoring import load_questions
from evalpack.pack.card import QUESTIONS_CONFIG, Config, hub_configs, part_of, rotated_answers, total_rows
from publish.card import hub_card
from publish.errors import PublishError

DEFAULT_ENDPOINT = "https://huggingface.co"
SPLIT_NAME = re.compile(r"^\w+(\.\w+)*$")
CONFIG_NAME = re.compile(r"^[A-Za-z0-9_][\w.-]*$")
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")
PARQUET_OPTIONS = {"compression": "zstd", "use_dictionary": True, "write_statistics": True}

@dataclass(frozen=True)
class HubFile:
    """One file of the repo: a file of the pack (``source``) at its pack path."""

    path: str
    size: int
    source: Path

    def read_bytes(self) -> bytes:
        return self.source.read_bytes()

    def git_oid(self) -> str:
        """The git blob SHA-1 (what the Hub reports for a regular file)."""
        data = self.read_bytes()
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    def sha256(self) -> str:
        """The SHA-256 of the bytes (what the Hub reports for an LFS/Xet file)."""
        return hashlib.sha256(self.read_bytes()).hexdigest()


@dataclass(frozen=True)
class HubLayout:
    """Everything that goes up for one pack version, and what the card says about it."""

    pack: Path
    repo_id: str
    endpoint: str
    manifest: dict
    questions: tuple[dict, ...]
    configs: tuple[Config, ...]
    files: tuple[HubFile, ...]

    @property
    def name(self) -> str:
        return self.manifest["pack"]

    @property
    def version(self) -> str:
        return str(self.manifest["version"])

    @property
    def tag(self) -> str:
        return version_tag(self.version)

    @property
    def rotations(self) -> list[str]:
        return list(self.manifest["rotations"])

    @property
    def total_rows(self) -> int:
        """Rows across every config and split that ``load_dataset`` can return (tables + questions)."""
        return total_rows(self.configs)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def repo_url(self) -> str:
        return f"{self.endpoint.rstrip('/')}/datasets/{self.repo_id}"

    def file(self, path: str) -> HubFile:
        return next(f for f in self.files if f.path == path)


def version_tag(version: str) -> str:
    """The Hub tag of a pack version: ``v<version>``."""
    return f"v{version}"


def check_repo_id(repo_id: str) -> str:
    if not REPO_ID.match(repo_id or "") or "--" in repo_id or ".." in repo_id:
        raise PublishError(f"--repo {repo_id!r}: expected OWNER/NAME (letters, digits, '-', '_', '.'; "
                           f"no '--' or '..'; at most 96 characters each)")
    return repo_id


def read_manifest(pack: Path) -> dict:
    """The pack's manifest.json as evalpack reads it everywhere (:meth:`PackLayout.read_manifest`: bounded, its types
    checked), with the fields a publish needs; PublishError naming the file and what to do otherwise."""
    path = PackLayout(pack).manifest
    if not Path(pack).is_dir():
        raise PublishError(f"{pack}: no such pack folder; build one with `evalpack build SPEC -o {pack}`")
    if not path.is_file():
        raise PublishError(f"{path}: missing; {pack} is not a built pack (run `evalpack build`)")
    try:
        manifest = PackLayout(pack).read_manifest()
    except EvalpackError as exc:
        raise PublishError(f"{exc}; rebuild the pack") from None
    for key in ("pack", "version", "rotations", "tables", "answers"):
        if key not in manifest:
            raise PublishError(f"{path}: no `{key}`; rebuild the pack with this evalpack")
    return manifest


def folder_files(folder: Path) -> tuple[HubFile, ...]:
    """Every regular file under ``folder`` (links skipped) as a file of a repo, at its relative path, sorted."""
    return tuple(HubFile(p.relative_to(folder).as_posix(), p.stat().st_size, p)
                 for p in sorted(Path(folder).rglob("*")) if p.is_file() and not p.is_symlink())


def build_layout(pack: str | Path, repo_id: str, endpoint: str | None = None) -> HubLayout:
    """The repo layout of a built pack (its own README.md is the card). Raises PublishError if it cannot go up."""
    pack = Path(pack)
    repo_id = check_repo_id(repo_id)
    endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
    manifest = read_manifest(pack)
    if manifest.get("repo") and manifest["repo"] != repo_id:
        raise PublishError(f"{pack}: its card names the repo {manifest['repo']} (the spec's `repo:`), not {repo_id}; "
                           f"publish to {manifest['repo']}, or set `repo: {repo_id}` in the spec and rebuild")
    rotations = list(manifest["rotations"])
    if not rotations:
        raise PublishError(f"{pack}/manifest.json: no rotations; rebuild the pack")
    for rotation in rotations:
        if not SPLIT_NAME.match(rotation):
            raise PublishError(f"{pack}: rotation {rotation!r} is not a valid Hub split name (\\w+(\\.\\w+)*)")
    try:
        questions = load_questions(pack)
    except (OSError, ValueError) as exc:
        raise PublishError(f"{pack}/questions.jsonl: unreadable ({exc}); rebuild the pack") from exc
    rotated = rotated_answers(manifest)
    if not rotated and any(isinstance(q.get("expected_answer"), dict) for q in questions):
        raise PublishError(f"{pack}: questions.jsonl has per-rotation answers but manifest.json says answers are "
                           f"{manifest['answers']!r}; rebuild the pack")
    for table in manifest["tables"]:
        if table == QUESTIONS_CONFIG:
            raise PublishError(f"{pack}: a table named {table!r} would clash with the questions config on the "
                               f"Hub; rename the table in the spec and rebuild")
        if not CONFIG_NAME.match(table):
            raise PublishError(f"{pack}: table name {table!r} is not usable as a Hub config name")

    configs = hub_configs(manifest)  # the layout the card's configs block states, computed the same way
    hub_card(pack, configs)  # the pack's README.md goes up unchanged; refuse one that names other files
    files = list(folder_files(pack))
    present = {f.path for f in files}
    for config in configs:
        for split in config.splits:
            part = [q for q in questions if part_of(q) == split.part]
            if config.name == QUESTIONS_CONFIG and split.rows != len(part):
                raise PublishError(f"{pack}/questions.jsonl: {len(part)} {split.part} questions, manifest.json says "
                                   f"{split.rows} shipped; rebuild the pack")
            if split.path not in present:
                raise PublishError(f"{pack}/{split.path}: missing, though the card's `{config.name}` config reads it; "
                                   "the pack is incomplete or was built before packs held their Hub files: rebuild it")

    name = repo_id.split("/")[1]
    for f in files:
        if "/" not in f.path and f.path.endswith(".py") and f.path[:-3] == name:
            raise PublishError(f"--repo {repo_id}: a root file {f.path} named like the repo makes `datasets` refuse "
                               f"to load it; choose another repo name")
    return HubLayout(pack, repo_id, endpoint, manifest, tuple(questions), configs,
                     tuple(sorted(files, key=lambda f: f.path)))
