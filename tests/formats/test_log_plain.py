"""`formats.log.decode_plain` (the bulk load's column decoder) against `decode_run_end` (the record-by-record
decoder): the same records, the same refusals, the same errors at the same offsets; and `scan_records`
with ``payloads=False``."""

from __future__ import annotations

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from formats.errors import CorruptionError
from formats.log import decode_plain, decode_run_end, encode_record, scan_records

BASE = 6  # what follows the file header

keys = st.binary(min_size=1, max_size=300)  # bin8 keys, and longer ones that are not plain
values = st.one_of(st.none(), st.binary(max_size=70_000))  # nil, bin8, bin16 and bin32 values
plain_keys = st.binary(min_size=1, max_size=255)
plain_values = st.one_of(st.none(), st.binary(max_size=300), st.binary(min_size=256, max_size=66_000))


def columns(buf: bytes) -> list[tuple] | None:
    cols = decode_plain(buf, BASE, "p.log")
    if cols is None:
        return None
    ks, ke, vs, ve = (c.tolist() for c in cols)
    return [(buf[a:b], None if c < 0 else buf[c:d]) for a, b, c, d in zip(ks, ke, vs, ve, strict=True)]


def records(buf: bytes) -> list[tuple]:
    run, _has_tx, end = decode_run_end(buf, BASE, "p.log", 0, 0)
    assert end == len(buf)
    return [(r[2], r[3]) for r in run]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(plain_keys, plain_values), max_size=40))
def test_plain_records_decode_as_record_by_record(recs) -> None:
    buf = b"".join(encode_record(k, v) for k, v in recs)
    assert columns(buf) == records(buf) == [(k, v) for k, v in recs]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(keys, values, st.sampled_from([None, 5, "tx"])), min_size=1, max_size=20),
)
def test_a_record_that_is_not_plain_sends_the_caller_to_the_record_reader(recs) -> None:
    buf = b"".join(
        encode_record(k, v, ttl=7 if t == 5 else None, tx=t if t == "tx" else None) for k, v, t in recs
    )
    plain = all(t is None and len(k) <= 255 and (v is None or len(v) <= 0xFFFF) for k, v, t in recs)
    got = columns(buf)
    if plain:
        assert got == records(buf)
    else:
        assert got is None


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(plain_keys, plain_values), min_size=1, max_size=12), st.data())
def test_a_damaged_byte_raises_what_the_record_reader_raises(recs, data) -> None:
    buf = bytearray(b"".join(encode_record(k, v) for k, v in recs))
    i = data.draw(st.integers(0, len(buf) - 1))
    buf[i] ^= data.draw(st.integers(1, 255))
    buf = bytes(buf)
    try:
        run, _has_tx, end = decode_run_end(buf, BASE, "p.log", 0, 0)
    except CorruptionError as e:
        with pytest.raises(CorruptionError) as got:
            decode_plain(buf, BASE, "p.log")
        assert got.value.args == e.args
        return
    # a damaged length the header checksum did not catch (1 in 2**32) or a torn-looking tail: never
    # handed out as complete plain records that the record reader would not give
    cols = columns(buf)
    assert cols is None or (end == len(buf) and cols == [(r[2], r[3]) for r in run])


def test_torn_tail_and_empty() -> None:
    rec = encode_record(b"k", b"v")
    assert columns(b"") == []
    assert columns(rec + rec[:-1]) is None  # the caller's bytes must end at a record boundary


def test_scan_without_payloads_checks_headers_only() -> None:
    good = encode_record(b"a", b"1") + encode_record(b"b", b"2")
    bad_payload = bytearray(good)
    bad_payload[-1] ^= 1
    seen: list[int] = []
    assert scan_records(bytes(bad_payload), BASE, "p.log", seen.append, payloads=False) == len(good)
    assert seen == [BASE, BASE + len(good) // 2]
    with pytest.raises(CorruptionError, match="record checksum mismatch"):
        scan_records(bytes(bad_payload), BASE, "p.log", [].append)
    bad_head = bytearray(good)
    bad_head[len(good) // 2 + 1] ^= 1  # the second record's length
    with pytest.raises(CorruptionError, match="header checksum mismatch"):
        scan_records(bytes(bad_head), BASE, "p.log", [].append, payloads=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=16, max_size=16), min_size=1, max_size=50))
def test_head_checks_are_xxh3_of_the_first_12_bytes(heads) -> None:
    from formats.log import _head_checks

    got = _head_checks(b"".join(heads)).tolist()
    assert got == [xxhash.xxh3_64_intdigest(h[:12]) & 0xFFFFFFFF for h in heads]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 300)), min_size=1, max_size=12), st.integers(0, 40))
def test_the_walk_takes_the_steps_of_the_record_reader(runs, cut) -> None:
    """Runs of equal-length records (which `_walk` guesses and checks by column) and changes of length;
    the walk finds the positions a record-by-record reader steps through, torn tail included."""
    from formats.log import _walk

    recs = [encode_record(b"k%d" % i, b"v" * size) for i, (count, size) in enumerate(runs) for _ in range(count * 70)]
    buf = b"".join(recs)
    buf = buf[: max(0, len(buf) - cut)]
    want, pos = [], 0
    for r in recs:
        if pos + 16 > len(buf):
            break
        want.append(pos)
        pos += len(r)
    positions, end, _heads, bad = _walk(buf)
    assert positions.tolist() == want and end == pos and not bad.any()
