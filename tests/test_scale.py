"""Parallel rotations give the same bytes as a serial build (issue 10)."""

from __future__ import annotations

from pathlib import Path

from evalpack.build import build_pack

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


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
