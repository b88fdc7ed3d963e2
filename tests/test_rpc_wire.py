"""The tensor codec (muzero.rpc.wire) against hand-written bytes and malformed input."""
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from muzero.rpc import wire


def test_exact_bytes_of_one_int16_vector():
    # Written out from the PROTOCOL.md layout:
    # "MZ", version 1, flags 0, count 1 (u32)        -> 8 bytes
    # name_len 1, "a", dtype int16 = code 4, ndim 1  -> offsets 8..11
    # dim 2 (u32)                                    -> offsets 12..15
    # data starts at 16 (already a multiple of 8): 1, 2 as int16 little-endian.
    expected = (b"MZ\x01\x00" + b"\x01\x00\x00\x00" + b"\x01a" + b"\x04\x01"
                + b"\x02\x00\x00\x00" + b"\x01\x00\x02\x00")
    assert wire.encode({"a": np.array([1, 2], np.int16)}) == expected


def test_exact_bytes_with_padding_and_a_0d_bool():
    # Tensor "ok": header at 8: len 2, "ok", code 1 (bool), ndim 0 -> ends at 13;
    # padding 3 zero bytes to 16; one data byte 0x01 -> ends at 17.
    # Tensor "x": header at 17: len 1, "x", code 11 (float32), ndim 2 -> 21;
    # dims 2 and 1 (u32 each) -> 29; padding 3 bytes to 32; data 2 floats.
    expected = (b"MZ\x01\x00\x02\x00\x00\x00"
                + b"\x02ok\x01\x00" + b"\x00\x00\x00" + b"\x01"
                + b"\x01x\x0b\x02" + b"\x02\x00\x00\x00\x01\x00\x00\x00" + b"\x00\x00\x00"
                + struct.pack("<2f", 1.5, -2.0))
    got = wire.encode({"ok": np.bool_(True), "x": np.array([[1.5], [-2.0]], np.float32)})
    assert got == expected
    back = wire.decode(got)
    assert back["ok"].shape == () and back["ok"].dtype == np.bool_ and bool(back["ok"])
    assert back["x"].tolist() == [[1.5], [-2.0]]


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32,
                                   np.uint32, np.int64, np.uint64, np.float16, np.float32,
                                   np.float64])
def test_round_trip_every_dtype_and_rank(dtype):
    rng = np.random.default_rng(0)
    tensors = {
        "scalar": np.array(1, dtype),
        "vector": (rng.integers(0, 2, 5) if dtype == np.bool_ else rng.integers(0, 100, 5)).astype(dtype),
        "empty": np.zeros((0, 3), dtype),
        "cube": np.arange(24).reshape(2, 3, 4).astype(dtype),
    }
    back = wire.decode(wire.encode(tensors))
    assert list(back) == list(tensors)
    for k, v in tensors.items():
        assert back[k].dtype == np.dtype(dtype).newbyteorder("<") and back[k].shape == v.shape
        np.testing.assert_array_equal(back[k], v)


def test_python_scalars_noncontiguous_and_big_endian_inputs():
    base = np.arange(12, dtype=np.int32).reshape(3, 4)
    back = wire.decode(wire.encode({"i": 7, "f": 0.25, "b": False, "t": base.T,
                                    "be": np.array([1, 258], ">u2")}))
    assert back["i"].dtype == np.int64 and int(back["i"]) == 7
    assert back["f"].dtype == np.float64 and float(back["f"]) == 0.25
    assert back["b"].dtype == np.bool_ and not bool(back["b"])
    np.testing.assert_array_equal(back["t"], base.T)
    assert back["be"].tolist() == [1, 258]


def test_decoded_arrays_are_aligned_read_only_views():
    msg = wire.encode({"a": np.zeros(3, np.int8), "b": np.arange(4, dtype=np.float64)})
    back = wire.decode(msg)
    assert not back["b"].flags.writeable
    assert back["b"].flags.aligned


def test_encode_refuses_what_it_cannot_carry():
    with pytest.raises(wire.WireError, match="complex"):
        wire.encode({"c": np.zeros(2, np.complex64)})
    with pytest.raises(wire.WireError, match="name"):
        wire.encode({"": np.zeros(1)})
    with pytest.raises(wire.WireError, match="ndim"):
        wire.encode({"deep": np.zeros((1,) * 9)})


def _good():
    return wire.encode({"a": np.array([1, 2], np.int16)})


@pytest.mark.parametrize("mutate, match", [
    (lambda m: m[:5], "shorter than"),
    (lambda m: b"XX" + m[2:], "magic"),
    (lambda m: m[:2] + b"\x02" + m[3:], "version"),
    (lambda m: m[:4] + struct.pack("<I", 2) + m[8:], "ends inside"),
    (lambda m: m + b"\x00", "trailing"),
    (lambda m: m[:-1], "needs 4 bytes"),
    (lambda m: m[:10] + b"\x63" + m[11:], "unknown dtype code 99"),
    (lambda m: m[:11] + b"\x09" + m[12:], "ndim=9"),
    (lambda m: m[:8] + b"\x00" + m[9:], "name length 0"),
    (lambda m: m[:9] + b"\xff" + m[10:], "UTF-8"),
])
def test_decode_rejects_malformed_messages(mutate, match):
    with pytest.raises(wire.WireError, match=match):
        wire.decode(mutate(_good()))


def test_decode_rejects_duplicates_bad_bools_and_too_many_tensors():
    one = wire.encode({"a": np.int8(1)})
    twice = one[:4] + struct.pack("<I", 2) + one[8:] + one[8:]
    with pytest.raises(wire.WireError, match="twice"):
        wire.decode(twice)
    bad_bool = bytearray(wire.encode({"b": np.array([True, False])}))
    bad_bool[-1] = 2
    with pytest.raises(wire.WireError, match="0 or 1"):
        wire.decode(bytes(bad_bool))
    many = wire.encode({f"t{i}": np.int8(i) for i in range(10)})
    with pytest.raises(wire.WireError, match="limit is 9"):
        wire.decode(many, max_tensors=9)


_dtypes = st.sampled_from([np.bool_, np.int8, np.uint8, np.int32, np.int64, np.float16,
                           np.float32, np.float64])
_arrays = _dtypes.flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=4,
                                                                      min_side=0, max_side=4)))


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text(min_size=1, max_size=20), _arrays, max_size=6))
def test_round_trip_property(tensors):
    tensors = {k: v for k, v in tensors.items() if len(k.encode()) <= 255}
    back = wire.decode(wire.encode(tensors))
    assert list(back) == list(tensors)
    for k, v in tensors.items():
        assert back[k].shape == v.shape and back[k].dtype == v.dtype
        np.testing.assert_array_equal(back[k], v)
