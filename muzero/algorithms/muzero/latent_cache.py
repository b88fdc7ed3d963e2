"""MuZero's server-side latent cache: the hidden states of every actor's search trees.

Storage is one preallocated array of rows ``[(slots + 1) * max_nodes, *hidden]``;
row ``slot * max_nodes + node`` holds the hidden state of node ``node`` of the tree
in ``slot`` (slots are handed out by ``muzero.rpc.leases.LeaseTable``). The extra last
slot is a trash slot: writes of requests whose lease died while they were queued are
redirected there, so they cannot touch slots that were meanwhile leased to someone else.

* ``NumpyLatentCache``: a numpy array (for NumPy models and tests).
* ``TFLatentCache``: a ``tf.Variable`` on the model's device, with the hidden
  dimensions flattened (``[rows, prod(hidden)]``); gather and scatter run in
  TensorFlow so hidden states never round-trip through numpy.

This module imports numpy and the standard library; TensorFlow is imported only
when a ``TFLatentCache`` is built.
"""
from __future__ import annotations

import contextlib
from typing import Optional

import numpy as np


class NumpyLatentCache:
    """Rows ``[(slots + 1) * max_nodes, *hidden]`` in a numpy array."""

    backend = "numpy"

    def __init__(self, num_slots: int, max_nodes: int, hidden_shape: tuple, dtype):
        rows = (num_slots + 1) * max_nodes
        self.storage = np.zeros((rows, *hidden_shape), dtype)

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """rows [B] int64 -> hidden [B, *hidden]."""
        return self.storage[rows]

    def scatter(self, rows: np.ndarray, hidden) -> None:
        """rows [B] int64, hidden [B, *hidden]."""
        self.storage[rows] = hidden


class TFLatentCache:
    """Rows ``[(slots + 1) * max_nodes, prod(hidden)]`` in a ``tf.Variable`` on ``device``.

    The variable is 2-D (hidden states flattened): TensorFlow's CPU scatter kernel
    is about twice as fast on 2-D rows as on [rows, 6, 6, 64]."""

    backend = "tensorflow"

    def __init__(self, num_slots: int, max_nodes: int, hidden_shape: tuple, dtype,
                 device: Optional[str] = None):
        import tensorflow as tf

        rows = (num_slots + 1) * max_nodes
        self.hidden_shape = tuple(hidden_shape)
        width = int(np.prod(hidden_shape, dtype=np.int64))
        with tf.device(device) if device else contextlib.nullcontext():
            self.variable = tf.Variable(tf.zeros((rows, width), tf.as_dtype(dtype)),
                                        trainable=False, name="latent_cache")

    def gather(self, rows):
        """rows [B] int64 -> hidden [B, *hidden] (tf.Tensor); usable inside tf.function."""
        import tensorflow as tf
        return tf.reshape(tf.gather(self.variable, rows), (-1, *self.hidden_shape))

    def scatter(self, rows, hidden) -> None:
        """rows [B] int64, hidden [B, *hidden]; usable inside tf.function."""
        import tensorflow as tf
        flat = tf.reshape(tf.cast(hidden, self.variable.dtype), (-1, self.variable.shape[1]))
        tf.raw_ops.ResourceScatterUpdate(resource=self.variable.handle, indices=rows,
                                         updates=flat)
