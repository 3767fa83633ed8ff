"""Tests for formats/gorilla.py: hand-computed streams, extremes, modes, truncation, and a bit-by-bit
reference model that the fast codec must agree with."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formats import gorilla
from formats.gorilla import GorillaError, decode, encode, fits_narrow

U64_MAX = 2**64 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def hx(*parts: str) -> bytes:
    """Bytes from hex pieces, kept apart in the source so each field can be read on its own."""
    return bytes.fromhex("".join(parts))


# -- an independent, deliberately naive model of the grammar ------------------------------------------


def model_encode(values: list[int], wide: bool) -> bytes:
    """Bit-by-bit encoder written straight from the grammar in the module docstring."""
    bits = format(len(values), "032b")
    if values:
        pats = [v % 2**64 for v in values]
        bits += format(pats[0], "064b")
        prev_delta = 0
        for a, b in zip(pats, pats[1:], strict=False):
            delta = (b - a) % 2**64
            d = (delta - prev_delta) % 2**64
            if d >= 2**63:
                d -= 2**64
            prev_delta = delta
            if d == 0:
                bits += "0"
            elif -63 <= d <= 63:
                bits += "10" + format(d % 2**7, "07b")
            elif -255 <= d <= 255:
                bits += "110" + format(d % 2**9, "09b")
            elif -2047 <= d <= 2047:
                bits += "1110" + format(d % 2**12, "012b")
            elif wide:
                bits += "1111" + format(d % 2**64, "064b")
            else:
                assert -(2**31) <= d < 2**31
                bits += "1111" + format(d % 2**32, "032b")
    bits += "0" * (-len(bits) % 8)
    return bytes(int(bits[i : i + 8], 2) for i in range(0, len(bits), 8))


def model_fits_narrow(values: list[int]) -> bool:
    pats = [v % 2**64 for v in values]
    prev_delta = 0
    for a, b in zip(pats, pats[1:], strict=False):
        delta = (b - a) % 2**64
        d = (delta - prev_delta) % 2**64
        d = d - 2**64 if d >= 2**63 else d
        prev_delta = delta
        if not -(2**31) <= d < 2**31:
            return False
    return True


u64 = st.integers(min_value=0, max_value=U64_MAX)
i64 = st.integers(min_value=I64_MIN, max_value=I64_MAX)
extremes = st.sampled_from([0, 1, 2, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 2, U64_MAX])


@st.composite
def steady_u64(draw: st.DrawFn) -> list[int]:
    """Mostly regular series (as a tracker sees them), sometimes with big jumps."""
    start = draw(u64)
    steps = draw(
        st.lists(
            st.one_of(st.integers(0, 100), st.integers(0, 5000), st.integers(0, 2**40), st.just(0)),
            max_size=200,
        )
    )
    out = [start]
    for step in steps:
        out.append((out[-1] + step) % 2**64)
    return out


any_u64_lists = st.one_of(st.lists(u64, max_size=60), st.lists(extremes, max_size=60), steady_u64())


# -- hand-computed streams ------------------------------------------------------------------------


def test_empty_stream_is_just_the_count() -> None:
    # count = 0 -> 00 00 00 00; no first value, no codes, nothing to pad.
    assert encode([]) == bytes.fromhex("00000000")
    assert decode(bytes.fromhex("00000000")) == ([], 4)


def test_single_value_is_count_and_first_value() -> None:
    # count = 1 -> 00000001; first = 5 as 64 bits -> 0000000000000005; no codes.
    assert encode([5]) == hx("00000001", "0000000000000005")
    assert decode(encode([5])) == ([5], 12)


def test_four_values_by_hand() -> None:
    # [10, 20, 30, 41]: count 4 -> 00000004, first 10 -> 000000000000000a.
    # deltas 10, 10, 11 (prev_delta starts at 0) -> delta-of-deltas 10, 0, 1:
    #   d=10 -> '10' + 0001010  = 100001010
    #   d=0  -> '0'
    #   d=1  -> '10' + 0000001  = 100000001
    # bits 100001010 0 100000001 (19) + 5 zero bits of padding:
    #   10000101 00100000 00100000 -> 85 20 20
    buf = hx("00000004", "000000000000000a", "852020")
    assert encode([10, 20, 30, 41]) == buf
    assert decode(buf) == ([10, 20, 30, 41], len(buf))


def test_negative_and_wider_codes_by_hand() -> None:
    # [10, 5]: d = -5 -> '10' + 7-bit two's complement 1111011 = 101111011, padded:
    #   10111101 10000000 -> bd 80
    assert encode([10, 5]) == hx("00000002", "000000000000000a", "bd80")
    # [0, 1000]: d = 1000 > 255 -> '1110' + 001111101000 = 1110 0011 1110 1000 -> e3 e8
    assert encode([0, 1000]) == hx("00000002", "0000000000000000", "e3e8")
    # [0, 5000]: d = 5000 > 2047 -> '1111' + 32 bits 0x00001388, 36 bits + 4 of padding:
    #   1111 0000 | 0000 0000 | 0000 0001 | 0011 1000 | 1000 0000 -> f0 00 01 38 80
    assert encode([0, 5000]) == hx("00000002", "0000000000000000", "f000013880")
    # the same in wide mode: '1111' + 64 bits 0x0000000000001388, 68 bits + 4 of padding, by nibbles
    #   f 0 0 0 0 0 0 0 0 0 0 0 0 1 3 8 8 0 -> f0 00 00 00 00 00 01 38 80
    assert encode([0, 5000], wide=True) == hx("00000002", "0000000000000000", "f00000000000013880")


@pytest.mark.parametrize(
    ("d", "prefix", "code_bits"),
    [
        (0, "0", 1),
        (1, "10", 9),
        (63, "10", 9),
        (-63, "10", 9),
        (64, "110", 12),
        (-64, "110", 12),
        (255, "110", 12),
        (-255, "110", 12),
        (256, "1110", 16),
        (2047, "1110", 16),
        (-2047, "1110", 16),
        (2048, "1111", 36),
        (-2048, "1111", 36),
        (2**31 - 1, "1111", 36),
        (-(2**31), "1111", 36),
    ],
)
def test_code_boundaries(d: int, prefix: str, code_bits: int) -> None:
    values = [2**40, 2**40 + d]  # one code whose d is the plain delta
    buf = encode(values)
    assert len(buf) == 12 + (code_bits + 7) // 8
    bits = format(int.from_bytes(buf[12:], "big"), f"0{(len(buf) - 12) * 8}b")
    assert bits.startswith(prefix)
    assert decode(buf) == (values, len(buf))
    assert buf == model_encode(values, wide=False)


# -- extremes, modes, signedness ------------------------------------------------------------------


def test_u64_extremes_round_trip_in_wide_mode() -> None:
    values = [0, U64_MAX, 0, 2**63, 2**63 - 1, U64_MAX, U64_MAX, 1, 0]
    assert not fits_narrow(values)
    buf = encode(values, wide=True)
    assert decode(buf, wide=True) == (values, len(buf))


def test_wraparound_deltas_are_small() -> None:
    # 2**64 - 2 -> 2**64 - 1 -> 0 -> 1: deltas are all +1 modulo 2**64, so d = 1, 0, 0.
    values = [U64_MAX - 1, U64_MAX, 0, 1]
    assert fits_narrow(values)
    buf = encode(values)
    assert len(buf) == 12 + 2  # 9 + 1 + 1 bits
    assert decode(buf) == (values, len(buf))


def test_signed_values_round_trip() -> None:
    values = [I64_MIN, I64_MAX, -1, 0, 1, I64_MIN, -5, -10, -15]
    buf = encode(values, wide=True, signed=True)
    assert decode(buf, wide=True, signed=True) == (values, len(buf))
    # The same bits read as unsigned are the two's complement patterns.
    assert decode(buf, wide=True)[0] == [v % 2**64 for v in values]
    small = [-3, -2, -1, 0, 1, 2]
    assert decode(encode(small, signed=True), signed=True)[0] == small


def test_value_ranges_are_checked() -> None:
    with pytest.raises(ValueError):
        encode([-1])
    with pytest.raises(ValueError):
        encode([2**64])
    with pytest.raises(ValueError):
        encode([2**63], signed=True)
    with pytest.raises(ValueError):
        encode([I64_MIN - 1], signed=True)


@pytest.mark.parametrize("d", [2**31, -(2**31) - 1, 2**40, -(2**62), 2**63 - 1])
def test_narrow_mode_refuses_a_dod_over_32_bits(d: int) -> None:
    values = [2**63, (2**63 + d) % 2**64]
    assert not fits_narrow(values)
    with pytest.raises(ValueError, match="32 bits"):
        encode(values)
    buf = encode(values, wide=True)
    assert decode(buf, wide=True) == (values, len(buf))


def test_huge_negative_dod_after_a_huge_positive_one() -> None:
    # delta +2**62 then -2**62: the second d is -2**63, the most negative i64.
    values = [0, 2**62, 0]
    buf = encode(values, wide=True)
    assert decode(buf, wide=True) == (values, len(buf))
    assert buf == model_encode(values, wide=True)


def test_fits_narrow_edges() -> None:
    assert fits_narrow([])
    assert fits_narrow([U64_MAX])
    assert fits_narrow([0, 2**31 - 1])
    assert not fits_narrow([0, 2**31])
    assert fits_narrow([2**31, 0])  # d = -2**31
    assert not fits_narrow([2**31 + 1, 0])


# -- decoding in a larger buffer, truncation, corruption --------------------------------------------


def test_decode_at_an_offset_returns_the_end() -> None:
    first = encode([1, 2, 3])
    second = encode([7, 7, 7, 7000], signed=True)
    buf = b"junk" + first + second + b"tail"
    values, pos = decode(buf, 4)
    assert values == [1, 2, 3] and pos == 4 + len(first)
    values, pos = decode(buf, pos, signed=True)
    assert values == [7, 7, 7, 7000] and pos == len(buf) - 4


def test_truncated_header_and_first_value() -> None:
    buf = encode([1, 2, 3])
    for cut in range(len(buf)):
        with pytest.raises(GorillaError):
            decode(buf[:cut])
    with pytest.raises(GorillaError):
        decode(buf, len(buf) + 1)
    with pytest.raises(GorillaError):
        decode(buf, -1)


def test_gorilla_error_is_a_value_error() -> None:
    assert issubclass(GorillaError, ValueError)


def test_nonzero_padding_is_rejected() -> None:
    buf = bytearray(encode([10, 20, 30, 41]))
    buf[-1] |= 0x01  # a padding bit
    with pytest.raises(GorillaError, match="padding"):
        decode(bytes(buf))


def test_count_larger_than_the_codes() -> None:
    buf = bytearray(encode([10, 20, 30, 41]))
    buf[3] = 200  # claims 200 values; the 15 code bits left cannot hold 199 codes
    with pytest.raises(GorillaError, match="truncated"):
        decode(bytes(buf))


def test_a_long_code_cut_by_the_end_of_the_buffer() -> None:
    buf = encode([0, 0, 5000])  # codes: '0', then '1111' + 32 bits
    with pytest.raises(GorillaError):
        decode(buf[:-2])


# -- properties -----------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(any_u64_lists)
def test_matches_the_model_and_round_trips(values: list[int]) -> None:
    narrow = model_fits_narrow(values)
    assert fits_narrow(values) == narrow
    wide_buf = encode(values, wide=True)
    assert wide_buf == model_encode(values, wide=True)
    assert decode(wide_buf, wide=True) == (values, len(wide_buf))
    if narrow:
        buf = encode(values)
        assert buf == model_encode(values, wide=False)
        assert decode(buf) == (values, len(buf))
    else:
        with pytest.raises(ValueError):
            encode(values)


@settings(max_examples=150, deadline=None)
@given(st.lists(i64, max_size=40))
def test_signed_round_trip(values: list[int]) -> None:
    buf = encode(values, wide=True, signed=True)
    assert decode(buf, wide=True, signed=True) == (values, len(buf))


@settings(max_examples=100, deadline=None)
@given(any_u64_lists, st.booleans(), st.binary(max_size=16))
def test_every_prefix_is_rejected_and_trailing_bytes_are_left(
    values: list[int], wide: bool, tail: bytes
) -> None:
    wide = wide or not fits_narrow(values)
    buf = encode(values, wide=wide)
    for cut in range(len(buf)):
        with pytest.raises(GorillaError):
            decode(buf[:cut], wide=wide)
    assert decode(buf + tail, wide=wide) == (values, len(buf))


def test_long_stream_round_trips() -> None:
    # Long enough for the decoder's windowed tokenizer to take several windows, with long codes mixed in.
    values = [1_000_000 + 1000 * i + (i % 7) * 3 + (50_000 if i % 997 == 0 else 0) for i in range(8192)]
    for wide in (False, True):
        buf = encode(values, wide=wide)
        assert decode(buf + encode(values), wide=wide) == (values, len(buf))
    assert gorilla.decode(encode(list(range(8192))))[0] == list(range(8192))
