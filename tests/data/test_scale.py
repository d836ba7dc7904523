"""Parallel rotations give the same bytes as a serial build (issue 10)."""

from __future__ import annotations

from pathlib import Path

from evalpack.build import build_pack
from evalpack.core.cache import CACHE_ENV

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def _files(pack: Path) -> dict[str, bytes]:
    return {p.relative_to(pack).as_posix(): p.read_bytes() for p in sorted(pack.rglob("*")) if p.is_file()}


def test_parallel_build_is_byte_identical_to_serial(tmp_path, monkeypatch):
    from concurrent.futures import ProcessPoolExecutor

    from evalpack import build

    pools = []

    class CountedPool(ProcessPoolExecutor):
        def __init__(self, *args, **kwargs):
            pools.append(kwargs.get("max_workers"))
            super().__init__(*args, **kwargs)

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    monkeypatch.setattr(build, "PARALLEL_MIN_ROWS", 0)  # finance is small: force the worker processes
    monkeypatch.setattr(build, "ProcessPoolExecutor", CountedPool)
    serial = build_pack(SCHEMAS / "finance.yaml", tmp_path / "serial", rotations=3, jobs=1).path
    parallel = build_pack(SCHEMAS / "finance.yaml", tmp_path / "parallel", rotations=3, jobs=2).path
    assert pools == [2]  # only the parallel build started workers
    a, b = _files(serial), _files(parallel)
    assert sorted(a) == sorted(b)
    assert [name for name in a if a[name] != b[name]] == []
    assert any(name.endswith(".parquet") for name in a) and "attestation.intoto.json" in a


def test_rotations_loaded_compressed_build_the_same_bytes(tmp_path, monkeypatch):
    """Large rotations are checked on compressed in-memory tables: forced on a small spec, the pack is
    byte for byte the one built on plain tables."""
    from evalpack.checks import verification as verify

    loaded = []
    compress = verify._load_compressed
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    monkeypatch.setenv(CACHE_ENV, "off")  # every check runs on the tables as loaded, none comes from the cache
    # one rotation: each is loaded and checked alike, and two cold builds of three took 40 s of the suite
    plain = build_pack(SCHEMAS / "retail.yaml", tmp_path / "plain", rotations=1).path
    monkeypatch.setattr(verify, "COMPRESS_MIN_ROWS", 0)
    monkeypatch.setattr(verify, "_load_compressed", lambda con, views: loaded.append(compress(con, views)) or loaded[-1])
    packed = build_pack(SCHEMAS / "retail.yaml", tmp_path / "packed", rotations=1).path
    assert loaded == [True]
    a, b = _files(plain), _files(packed)
    assert sorted(a) == sorted(b)
    assert [name for name in a if a[name] != b[name]] == []
