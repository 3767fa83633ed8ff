"""A source adapter is one module implementing lsm.sources.Source: this one, a tiny one over a text file,
passes verify_source and is ingested through `lsm ingest --source package.module:Factory`."""

from __future__ import annotations

from collections.abc import Iterator

import lsm
from lsm.sources import Source, SourceRecord, verify_source
from lsm.sources.protocol import check_range
from tests.tools._cli import ROOT, one_line_error, run_lsm

ADAPTER = f"{__name__}:LinesSource"


class LinesSource:
    """Records from a text file, one ``PARTITION KEY VALUE`` line each (VALUE ``-``: a delete); a
    record's offset is its index among its partition's lines."""

    def __init__(self, path: str) -> None:
        self.name = path
        self.path = path

    def _parts(self) -> dict[int, list[tuple[bytes, bytes | None]]]:
        out: dict[int, list[tuple[bytes, bytes | None]]] = {}
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                p, key, value = line.split()
                out.setdefault(int(p), []).append((key.encode(), None if value == "-" else value.encode()))
        return out

    def partitions(self) -> list[int]:
        return sorted(self._parts())

    def end(self, partition: int) -> int:
        return len(self._parts().get(partition, []))

    def read(self, partition: int, start: int, stop: int | None = None) -> Iterator[SourceRecord]:
        check_range(partition, start, stop)
        rows = self._parts().get(partition, [])
        return iter(
            [SourceRecord(partition, i, k, v) for i, (k, v) in enumerate(rows) if i >= start][
                : None if stop is None else max(0, stop - start)
            ]
        )


def NotASource(path: str) -> object:  # noqa: N802 - named as a factory class would be
    return object()


def test_an_adapter_by_import_path_passes_verify_source_and_ingests(tmp_path) -> None:
    src = tmp_path / "records.txt"
    src.write_text("0 a 1\n1 b 2\n0 a 3\n0 c -\n")
    assert isinstance(LinesSource(str(src)), Source) and verify_source(LinesSource(str(src))) == []
    db = str(tmp_path / "db")
    r = run_lsm("ingest", db, str(src), "--name", "lines", "--source", ADAPTER, "--json", cwd=ROOT)
    assert r.code == 0, r.err
    assert r.json()["records"] == 4 and r.json()["frontier"] == {"0": 3, "1": 1}
    with lsm.DB.open(db, read_only=True) as d:
        assert (d.get(b"a"), d.get(b"b"), d.get(b"c")) == (b"3", b"2", None)
    with open(src, "a") as f:
        f.write("1 d 4\n")
    r = run_lsm("ingest", db, str(src), "--name", "lines", "--source", ADAPTER, "--json", cwd=ROOT)
    assert r.json()["records"] == 1  # resumed from the durable frontier


def test_database_log_by_name_and_bad_source_kinds(tmp_path) -> None:
    up = str(tmp_path / "up")
    with lsm.DB.open(up) as u:
        u.put(b"k", b"v")
    db = str(tmp_path / "db")
    r = run_lsm("ingest", db, up, "--name", "up", "--source", "database-log", "--json")
    assert r.code == 0 and r.json()["records"] == 1, r.err
    for kind, said in [
        ("kafka", "unknown source 'kafka'"),
        ("no_such_module_xyz:Factory", "cannot import no_such_module_xyz"),
        (f"{__name__}:Missing", "has no callable Missing"),
        (f"{__name__}:NotASource", "object is not a lsm.sources.Source"),
    ]:
        bad = run_lsm("ingest", str(tmp_path / "db2"), up, "--name", "x", "--source", kind, cwd=ROOT)
        assert said in one_line_error(bad, 2), kind
    assert not (tmp_path / "db2").exists()  # refused before the store was opened (or created)
