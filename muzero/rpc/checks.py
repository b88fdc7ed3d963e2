"""Request checks shared by the services on the batching server.

Each check raises ``RequestError`` INVALID_ARGUMENT (``muzero.rpc.server.invalid``) with a
message naming the method, the field and what was expected, so a bad request is answered
precisely and the server keeps serving. Imports numpy and the server module only.
"""
from __future__ import annotations

import numpy as np

from muzero.rpc.server import invalid


def check_fields(method: str, t: dict, required: tuple, optional: tuple = ()) -> None:
    """Every required field present, nothing beyond required + optional."""
    missing = [k for k in required if k not in t]
    if missing:
        raise invalid(f"{method}: missing field(s) {missing}; required: {list(required)}")
    extra = sorted(set(t) - set(required) - set(optional))
    if extra:
        raise invalid(f"{method}: unknown field(s) {extra}; accepted: {list(required + optional)}")


def scalar_int(method: str, t: dict, name: str, lo: int, hi: int) -> int:
    """A 0-d integer tensor in [lo, hi], as a Python int."""
    a = t[name]
    if a.shape != () or a.dtype.kind not in "iu":
        raise invalid(f"{method}: {name} must be a 0-d integer tensor, got dtype {a.dtype} "
                      f"shape {list(a.shape)}")
    v = int(a)
    if not lo <= v <= hi:
        raise invalid(f"{method}: {name}={v} is out of range [{lo}, {hi}]")
    return v


def array(method: str, t: dict, name: str, dtype: np.dtype, shape: tuple) -> np.ndarray:
    """Field ``name`` with exactly this dtype and shape (the batch dimension already fixed)."""
    a = t[name]
    if a.dtype != dtype:
        raise invalid(f"{method}: {name} must have dtype {dtype}, got {a.dtype}")
    if a.shape != shape:
        raise invalid(f"{method}: {name} must have shape {list(shape)}, got {list(a.shape)}")
    return a


def batch_dim(method: str, t: dict, name: str, max_batch: int) -> int:
    """The leading dimension of field ``name``, in [1, max_batch]."""
    a = t[name]
    if a.ndim < 1:
        raise invalid(f"{method}: {name} must have a leading batch dimension, got shape []")
    b = a.shape[0]
    if not 1 <= b <= max_batch:
        raise invalid(f"{method}: batch size {b} (from {name}) is out of range [1, {max_batch}]")
    return b


def in_range(method: str, name: str, a: np.ndarray, lo: int, hi: int) -> None:
    """All of integer array ``a`` in [lo, hi)."""
    amin, amax = int(a.min()), int(a.max())
    if amin < lo or amax >= hi:
        bad = amin if amin < lo else amax
        raise invalid(f"{method}: {name} holds {bad}, out of range [{lo}, {hi - 1}]")


def to_numpy(x, dtype=None) -> np.ndarray:
    """A numpy array from a numpy array or a tensor with ``.numpy()``."""
    if not isinstance(x, np.ndarray) and hasattr(x, "numpy"):
        x = x.numpy()
    return np.asarray(x, dtype=dtype)
