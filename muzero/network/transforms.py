"""The invertible value rescaling h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x (Pohlen et al. 2018)
and its closed-form inverse, in NumPy (float64) and TensorFlow, in forms without cancellation
near 0. MuZero's categorical supports and R2D2's value targets use them.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf


def np_h_transform(x, eps: float = 0.001) -> np.ndarray:
    """h(x) = sign(x)(sqrt(|x|+1) - 1) + eps x, elementwise (float64)."""
    x = np.asarray(x, dtype=np.float64)
    u = np.abs(x)
    return np.sign(x) * u / (np.sqrt(u + 1.0) + 1.0) + eps * x


def np_h_inverse(y, eps: float = 0.001) -> np.ndarray:
    """Closed-form inverse of :func:`np_h_transform`, elementwise (float64)."""
    y = np.asarray(y, dtype=np.float64)
    u = np.abs(y)
    d = 2.0 * u / (1.0 + 2.0 * eps + np.sqrt(1.0 + 4.0 * eps * (u + 1.0 + eps)))
    return np.sign(y) * d * (d + 2.0)


def tf_h_transform(x: tf.Tensor, eps: float = 0.001) -> tf.Tensor:
    """h(x), elementwise, in the dtype of ``x`` (NumPy input works eagerly)."""
    x = tf.convert_to_tensor(x)
    u = tf.abs(x)
    return tf.sign(x) * u / (tf.sqrt(u + 1.0) + 1.0) + eps * x


def tf_h_inverse(y: tf.Tensor, eps: float = 0.001) -> tf.Tensor:
    """Closed-form h^-1(y), elementwise, in the dtype of ``y`` (NumPy input works eagerly)."""
    y = tf.convert_to_tensor(y)
    u = tf.abs(y)
    d = 2.0 * u / (1.0 + 2.0 * eps + tf.sqrt(1.0 + 4.0 * eps * (u + 1.0 + eps)))
    return tf.sign(y) * d * (d + 2.0)
