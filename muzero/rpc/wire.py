"""Tensor codec for the inference server: named tensors as raw bytes.

A message is a flat list of named tensors (dtype, shape, little-endian C-order
buffer); there is no protobuf schema and no per-element encoding, so encoding is
one memory copy and decoding is zero-copy (``np.frombuffer`` views). The exact
byte layout is specified in ``docs/PROTOCOL.md``; in short::

    message := "MZ" version:u8(=1) flags:u8(=0) count:u32 tensor*count
    tensor  := name_len:u8 name:utf8 dtype:u8 ndim:u8 dims:u32*ndim
               pad:(0..7 zero bytes, so data starts at a multiple of 8) data

All integers are little-endian. Decoded arrays are read-only views into the
received buffer; copy them before mutating or keeping them past the call if the
buffer may be reused.

This module imports only numpy and the standard library (no gRPC, no TensorFlow),
so an actor, a learner or a test can use it alone.
"""
from __future__ import annotations

import struct
from typing import Mapping

import numpy as np

MAGIC = b"MZ"
VERSION = 1
HEADER = struct.Struct("<2sBBI")  # magic, version, flags, tensor count
MAX_NDIM = 8
MAX_DIM = 2**32 - 1
DEFAULT_MAX_TENSORS = 4096

# Wire dtype codes. Codes are part of the protocol: never renumber, only append.
DTYPE_CODES: dict[int, np.dtype] = {
    1: np.dtype("bool"),
    2: np.dtype("<i1"),
    3: np.dtype("<u1"),
    4: np.dtype("<i2"),
    5: np.dtype("<u2"),
    6: np.dtype("<i4"),
    7: np.dtype("<u4"),
    8: np.dtype("<i8"),
    9: np.dtype("<u8"),
    10: np.dtype("<f2"),
    11: np.dtype("<f4"),
    12: np.dtype("<f8"),
}
_CODE_OF: dict[np.dtype, int] = {dt: code for code, dt in DTYPE_CODES.items()}
_CODE_OF.update({dt.newbyteorder("="): code for code, dt in DTYPE_CODES.items()})
_U32 = struct.Struct("<I")
_ZEROS = bytes(8)


class WireError(ValueError):
    """The bytes are not a well-formed message, or a value cannot be encoded."""


def dtype_code(dtype) -> int:
    """The wire code of a numpy-compatible dtype; raises WireError if unsupported."""
    dt = np.dtype(getattr(dtype, "as_numpy_dtype", dtype))
    code = _CODE_OF.get(dt) or _CODE_OF.get(dt.newbyteorder("<"))
    if code is None:
        names = sorted(str(d) for d in DTYPE_CODES.values())
        raise WireError(f"dtype {dt} has no wire code; supported: {names}")
    return code


def _as_array(name: str, value) -> np.ndarray:
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()  # tf.Tensor and friends
    if isinstance(value, (bool, np.bool_)):
        return np.asarray(value, dtype=bool)
    if isinstance(value, int):
        return np.asarray(value, dtype=np.int64)
    if isinstance(value, float):
        return np.asarray(value, dtype=np.float64)
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise WireError(f"tensor {name!r}: dtype {arr.dtype} is not a bool, integer or float dtype")
    return arr


def encode(tensors: Mapping[str, object]) -> bytes:
    """Serialises ``{name: array-like}`` into one message (one copy of each buffer).

    Python ints become int64, floats float64, bools bool; numpy scalars keep their
    dtype and are sent as 0-d tensors.
    """
    parts = [HEADER.pack(MAGIC, VERSION, 0, len(tensors))]
    offset = HEADER.size
    for name, value in tensors.items():
        name_bytes = name.encode("utf-8") if isinstance(name, str) else b""
        if not 1 <= len(name_bytes) <= 255:
            raise WireError(f"tensor name {name!r} must be a str of 1..255 UTF-8 bytes")
        arr = _as_array(name, value)
        code = dtype_code(arr.dtype)
        if arr.ndim > MAX_NDIM:
            raise WireError(f"tensor {name!r}: ndim={arr.ndim} exceeds {MAX_NDIM}")
        if any(d > MAX_DIM for d in arr.shape):
            raise WireError(f"tensor {name!r}: shape {arr.shape} has a dimension > {MAX_DIM}")
        head = struct.pack(f"<B{len(name_bytes)}sBB{arr.ndim}I", len(name_bytes), name_bytes,
                           code, arr.ndim, *arr.shape)
        offset += len(head)
        pad = -offset % 8
        parts.append(head)
        if pad:
            parts.append(_ZEROS[:pad])
        offset += pad
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        data = np.ascontiguousarray(arr)
        if data.nbytes:
            parts.append(memoryview(data).cast("B"))
        offset += data.nbytes
    return b"".join(parts)


def decode(buf, *, max_tensors: int = DEFAULT_MAX_TENSORS) -> dict[str, np.ndarray]:
    """Parses one message into ``{name: read-only ndarray}``; raises WireError on any defect.

    Checks: magic and version, tensor count <= ``max_tensors``, names non-empty,
    valid UTF-8 and unique, known dtype codes, ndim <= 8, every buffer inside the
    message, no trailing bytes, and bool tensors holding only 0 or 1.
    """
    view = memoryview(buf)
    total = len(view)
    if total < HEADER.size:
        raise WireError(f"message is {total} bytes, shorter than the {HEADER.size}-byte header")
    magic, version, _flags, count = HEADER.unpack_from(view, 0)
    if magic != MAGIC:
        raise WireError(f"bad magic {bytes(magic)!r}; expected {MAGIC!r}")
    if version != VERSION:
        raise WireError(f"unsupported wire version {version}; this server speaks {VERSION}")
    if count > max_tensors:
        raise WireError(f"message declares {count} tensors; the limit is {max_tensors}")
    out: dict[str, np.ndarray] = {}
    pos = HEADER.size
    for index in range(count):
        if pos + 1 > total:
            raise WireError(f"tensor #{index}: message ends inside its header")
        name_len = view[pos]
        pos += 1
        if name_len == 0 or pos + name_len + 2 > total:
            raise WireError(f"tensor #{index}: name length {name_len} is 0 or runs past the message")
        try:
            name = bytes(view[pos:pos + name_len]).decode("utf-8")
        except UnicodeDecodeError:
            raise WireError(f"tensor #{index}: name is not valid UTF-8") from None
        if name in out:
            raise WireError(f"tensor {name!r} appears twice")
        pos += name_len
        code, ndim = view[pos], view[pos + 1]
        pos += 2
        dtype = DTYPE_CODES.get(code)
        if dtype is None:
            raise WireError(f"tensor {name!r}: unknown dtype code {code}; known: {sorted(DTYPE_CODES)}")
        if ndim > MAX_NDIM:
            raise WireError(f"tensor {name!r}: ndim={ndim} exceeds {MAX_NDIM}")
        if pos + 4 * ndim > total:
            raise WireError(f"tensor {name!r}: message ends inside its shape")
        shape = struct.unpack_from(f"<{ndim}I", view, pos)
        pos += 4 * ndim
        pos += -pos % 8
        size = 1
        for d in shape:
            size *= d
        nbytes = size * dtype.itemsize
        if pos + nbytes > total:
            raise WireError(f"tensor {name!r}: shape {tuple(shape)} needs {nbytes} bytes, "
                            f"{max(total - pos, 0)} remain")
        if size == 0:
            try:   # numpy refuses empty shapes whose other dimensions overflow, e.g. (0, 2**32-1, 2**32-1)
                arr = np.empty(shape, dtype)
            except (ValueError, MemoryError) as e:
                raise WireError(f"tensor {name!r}: shape {tuple(shape)} is not representable: {e}") from None
        else:
            arr = np.frombuffer(view, dtype, size, pos).reshape(shape)
            if code == 1 and arr.view(np.uint8).max() > 1:
                raise WireError(f"tensor {name!r}: bool bytes must be 0 or 1")
        pos += nbytes
        out[name] = arr
    if pos != total:
        raise WireError(f"{total - pos} trailing bytes after the last tensor")
    return out
