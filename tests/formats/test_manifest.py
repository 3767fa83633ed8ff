"""Manifest codec (formats/manifest.py): round-trips with real SsTableInfo, layout, version and damage."""

from __future__ import annotations

import dataclasses
import struct

import msgpack
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from formats.errors import CorruptionError, FormatVersionError
from formats.manifest import HEADER, Checkpoint, ExternalDb, Manifest, SortedRun, SstEntry, decode, encode
from formats.sst import write_sst

TS0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def infos(tmp_path_factory):
    """SsTableInfo of real SSTs: v1 with TTL rows, v1 without, v0, zlib."""
    d = tmp_path_factory.mktemp("ssts")
    specs = [
        ([(b"a", 9, TS0, TS0 + 5, b"x"), (b"b", 8, TS0, None, None)], {}),
        ([(b"c", 7, TS0 + 1, None, b"y" * 100)], {"compression": "zlib"}),
        ([(b"d", 6, None, None, b"z"), (b"e", 5, None, None, None)], {"format_version": 0}),
        ([(b"f%03d" % i, 100 + i, TS0 + i, None, b"w") for i in range(50)], {"block_bytes": 64}),
    ]
    return [
        write_sst(d / f"{i}.sst", rows, creation_timestamp=TS0 + i, sync=False, **kw)
        for i, (rows, kw) in enumerate(specs)
    ]


def full_manifest(infos) -> Manifest:
    return Manifest(
        writer_epoch=3,
        compactor_epoch=2,
        next_sst_id=17,
        next_run_id=4,
        last_seq=2**40,
        wal_replay_from=12,
        clock_watermark=TS0 + 99,
        l0=(SstEntry("000016.sst", infos[0]), SstEntry("000015.sst", infos[1])),
        runs=(
            SortedRun(3, (SstEntry("000010.sst", infos[2]), SstEntry("000011.sst", infos[3]))),
            SortedRun(1, (SstEntry("000002.sst", infos[3]),)),
        ),
        seq_tracker=b"\x00\x01\x02tracker",
        time_seq=b"\xffbins",
    )


def test_round_trip_with_l0_and_runs(infos):
    m = full_manifest(infos)
    got = decode(encode(m))
    assert got == m
    assert got.l0[0].info == infos[0] and isinstance(got.l0[0].info.row_features, tuple)
    assert got.runs[0].ssts[1].info.first_key == b"f000"
    assert [e.name for e in got.all_ssts()] == [
        "000016.sst",
        "000015.sst",
        "000010.sst",
        "000011.sst",
        "000002.sst",
    ]
    assert got.runs[0].size == infos[2].file_size + infos[3].file_size


def test_default_manifest_round_trips():
    assert decode(encode(Manifest())) == Manifest()


@settings(max_examples=50, deadline=None)
@given(
    ints=st.lists(st.integers(0, 2**63 - 1), min_size=7, max_size=7),
    blobs=st.tuples(st.binary(max_size=200), st.binary(max_size=200)),
    l0=st.lists(st.integers(0, 3), max_size=5),
    runs=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3), max_size=4),
)
def test_round_trip_random(infos, ints, blobs, l0, runs):
    m = Manifest(
        *ints,
        l0=tuple(SstEntry(f"{i}-{j}.sst", infos[i]) for j, i in enumerate(l0)),
        runs=tuple(
            SortedRun(r, tuple(SstEntry(f"r{r}-{j}.sst", infos[i]) for j, i in enumerate(run)))
            for r, run in enumerate(runs)
        ),
        seq_tracker=blobs[0],
        time_seq=blobs[1],
    )
    assert decode(encode(m), "m") == m


checkpoints = st.lists(
    st.builds(
        Checkpoint,
        id=st.uuids().map(str),
        manifest_id=st.integers(1, 2**63 - 1),
        seq=st.integers(0, 2**63 - 1),
        ts=st.integers(-(2**63), 2**63 - 1),
        name=st.none() | st.text(max_size=20),
        expires_at=st.none() | st.integers(-(2**63), 2**63 - 1),
    ),
    max_size=4,
).map(tuple)
externals = st.lists(
    st.builds(ExternalDb, root=st.text(min_size=1, max_size=30), checkpoint_id=st.uuids().map(str),
              names=st.lists(st.text(min_size=1, max_size=12), max_size=5).map(tuple)),
    max_size=3,
).map(tuple)


@settings(max_examples=80, deadline=None)
@given(cps=checkpoints, ext=externals)
def test_checkpoints_and_external_round_trip(infos, cps, ext):
    m = full_manifest(infos).replace(checkpoints=cps, external=ext)
    buf = encode(m)
    assert decode(buf, "m") == m
    # version 2 only when a checkpoint or an external SST needs it: a manifest with neither is the
    # version-1 file it always was
    assert HEADER.unpack_from(buf, 0)[1] == (2 if cps or ext else 1)
    if not (cps or ext):
        assert buf == encode(full_manifest(infos))


def test_checkpoint_layout(infos):
    cp = Checkpoint("c1", 7, 42, TS0, "nightly", TS0 + 1000)
    ext = ExternalDb("s3://b/src", "c0", ("a.sst", "b.sst"))
    buf = encode(full_manifest(infos).replace(checkpoints=(cp,), external=(ext,)))
    assert buf[4:6] == b"\x00\x02"
    d = msgpack.unpackb(buf[10:-8], raw=False)
    assert d["checkpoints"] == [{"id": "c1", "manifest_id": 7, "seq": 42, "ts": TS0, "name": "nightly",
                                 "expires_at": TS0 + 1000}]
    assert d["external"] == [{"root": "s3://b/src", "checkpoint_id": "c0", "names": ["a.sst", "b.sst"]}]


def test_malformed_checkpoint_is_corruption(infos):
    cp = Checkpoint("c1", 7, 42, TS0)
    buf = encode(full_manifest(infos).replace(checkpoints=(cp,)))
    d = msgpack.unpackb(buf[10:-8], raw=False)
    d["checkpoints"][0]["seq"] = "42"
    payload = msgpack.packb(d, use_bin_type=True)
    body = HEADER.pack(b"LSMM", 2, len(payload)) + payload
    with pytest.raises(CorruptionError, match="checkpoint"):
        decode(body + struct.pack(">Q", xxhash.xxh3_64_intdigest(body)))


def test_layout(infos):
    m = full_manifest(infos)
    buf = encode(m)
    magic, version, length = HEADER.unpack_from(buf, 0)
    assert buf[:4] == b"LSMM" and magic == b"LSMM"
    assert buf[4:6] == b"\x00\x01" and version == 1  # u16 format_version, big-endian
    assert HEADER.size == 10 and len(buf) == 10 + length + 8
    assert struct.unpack(">Q", buf[-8:])[0] == xxhash.xxh3_64_intdigest(buf[:-8])
    d = msgpack.unpackb(buf[10:-8], raw=False)
    assert set(d) == {
        "writer_epoch",
        "compactor_epoch",
        "next_sst_id",
        "next_run_id",
        "last_seq",
        "wal_replay_from",
        "clock_watermark",
        "l0",
        "runs",
        "seq_tracker",
        "time_seq",
    }
    assert d["l0"][0]["name"] == "000016.sst"
    assert d["l0"][0]["info"] == {**infos[0].to_dict(), "row_features": list(infos[0].row_features)}
    assert d["runs"][0]["id"] == 3 and len(d["runs"][0]["ssts"]) == 2
    assert isinstance(d["seq_tracker"], bytes)  # msgpack bin, not str


def with_header(buf: bytes, magic: bytes = b"LSMM", version: int = 1) -> bytes:
    """`buf` with the header changed and the checksum recomputed: a well-formed file of another kind."""
    body = HEADER.pack(magic, version, len(buf) - 18) + buf[10:-8]
    return body + struct.pack(">Q", xxhash.xxh3_64_intdigest(body))


@pytest.mark.parametrize("version", [3, 9, 0xFFFF])
def test_newer_version_is_a_format_version_error(infos, version):
    buf = with_header(encode(full_manifest(infos)), version=version)
    with pytest.raises(FormatVersionError, match="newer") as ei:
        decode(buf, "manifest/00000000000000000007.manifest")
    assert ei.value.path == "manifest/00000000000000000007.manifest"
    assert str(version) in str(ei.value)


def test_version_zero_is_rejected(infos):
    with pytest.raises(FormatVersionError):
        decode(with_header(encode(full_manifest(infos)), version=0))


def test_helper_is_faithful(infos):
    m = full_manifest(infos)
    assert with_header(encode(m)) == encode(m)


def test_bad_magic(infos):
    for buf in (with_header(encode(full_manifest(infos)), magic=b"LSMX"), b"PK\x03\x04" + bytes(40)):
        with pytest.raises(CorruptionError, match="magic") as ei:
            decode(buf, "f")
        assert (ei.value.path, ei.value.offset) == ("f", 0)


def test_every_truncation_is_corruption(infos):
    buf = encode(full_manifest(infos))
    for cut in range(len(buf)):
        with pytest.raises(CorruptionError) as ei:
            decode(buf[:cut], "f")
        assert ei.value.path == "f"


def test_trailing_bytes_are_corruption():
    with pytest.raises(CorruptionError, match="length"):
        decode(encode(Manifest()) + b"\x00")


def test_bad_checksum(infos):
    buf = encode(full_manifest(infos))
    end = len(buf) - 8
    for at in (12, end - 1, end, len(buf) - 1):
        bad = buf[:at] + bytes([buf[at] ^ 0x01]) + buf[at + 1 :]
        with pytest.raises(CorruptionError, match="checksum") as ei:
            decode(bad, "f")
        assert ei.value.offset == end


@pytest.mark.parametrize(
    "payload",
    [
        msgpack.packb([1, 2, 3]),  # not a map
        msgpack.packb({"l0": [], "runs": [{"id": 1}]}),  # a run without ssts
        msgpack.packb({"l0": [{"name": "x", "info": {"format_version": 1}}], "runs": []}),  # partial info
        msgpack.packb({"runs": []}),  # no l0
        b"\xc1",  # reserved msgpack byte
    ],
)
def test_undecodable_payload_with_a_good_checksum_is_corruption(payload):
    body = HEADER.pack(b"LSMM", 1, len(payload)) + payload
    buf = body + struct.pack(">Q", xxhash.xxh3_64_intdigest(body))
    with pytest.raises(CorruptionError, match="undecodable") as ei:
        decode(buf, "f")
    assert ei.value.offset == HEADER.size


def test_unknown_payload_keys_are_ignored(infos):
    """A same-version writer may add keys (forward compatible within version 1)."""
    d = msgpack.unpackb(encode(full_manifest(infos))[10:-8], raw=False)
    d["future_field"] = 1
    payload = msgpack.packb(d, use_bin_type=True)
    body = HEADER.pack(b"LSMM", 1, len(payload)) + payload
    assert decode(body + struct.pack(">Q", xxhash.xxh3_64_intdigest(body))) == full_manifest(infos)


def test_replace_and_entry_size(infos):
    m = full_manifest(infos).replace(last_seq=5)
    assert m.last_seq == 5 and m.writer_epoch == 3
    assert m.l0[0].size == infos[0].file_size > 0
    assert dataclasses.replace(m, l0=()).all_ssts()[0].name == "000010.sst"
