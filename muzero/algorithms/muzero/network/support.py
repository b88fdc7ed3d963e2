"""Categorical supports for values and rewards: the h-transform, two-hot encoding, decoding.

A scalar x (a value or a reward) is represented as a distribution over ``num_bins``
evenly spaced points ("bins") covering ``[low, high]``. With ``use_transform`` the
scalar is first squashed by the invertible transform of Pohlen et al. (2018), used by
MuZero for Atari:

    h(x)     = sign(x) * (sqrt(|x| + 1) - 1) + eps * x
    h^-1(y)  = sign(y) * (((sqrt(1 + 4 eps (|y| + 1 + eps)) - 1) / (2 eps))^2 - 1)   (eps > 0)
    h^-1(y)  = sign(y) * ((|y| + 1)^2 - 1)                                            (eps = 0)

and the bins live in h-space. Encoding clips h(x) to ``[low, high]`` and splits its
mass between the two neighbouring bins in proportion to closeness ("two-hot"), so the
expectation of the encoding over the bins is h(x) exactly. Decoding takes the
expectation of a predicted distribution (softmax of logits) over the bins and maps it
back with h^-1.

h and h^-1 are computed in forms without cancellation near 0: sqrt(u + 1) - 1 = u / (sqrt(u + 1) + 1),
and with s = sqrt(1 + 4 eps (u + 1 + eps)), u = |y|, the inverse is sign(y) d (d + 2) with
d = 2u / (1 + 2 eps + s), which also covers eps = 0 (d = u). (The textbook inverse squares a
number near 1 and subtracts 1: in float32 its error near y = 0 reaches 8e-5.)

Each function exists twice: a NumPy version (``np_*``, float64 inside; used by tests,
the replay and evaluators) and a TensorFlow version (``tf_*``, float32; used inside the
network and the loss). Both read a :class:`muzero.config.SupportConfig`.

Imports NumPy and TensorFlow only; nothing else from ``muzero`` but the config.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from muzero.algorithms.muzero.config import SupportConfig
from muzero.network.transforms import np_h_inverse, np_h_transform, tf_h_inverse, tf_h_transform


def bin_values(support: SupportConfig) -> np.ndarray:
    """[num_bins] float64: the bin centres in (h-)space, ``low`` to ``high``."""
    return np.linspace(support.low, support.high, support.num_bins, dtype=np.float64)


def support_description(support: SupportConfig) -> dict:
    """A plain-JSON description of a support, enough to decode without this package."""
    return {
        "low": float(support.low),
        "high": float(support.high),
        "num_bins": int(support.num_bins),
        "use_transform": bool(support.use_transform),
        "eps": float(support.eps),
    }


# ----------------------------------------------------------------------------- NumPy


def np_scalar_to_two_hot(x, support: SupportConfig) -> np.ndarray:
    """Two-hot encoding of scalars.

    Args:
      x: [...] scalars (values or rewards, untransformed).
      support: the support to encode over.

    Returns:
      [..., num_bins] float32 whose rows sum to 1 and whose expectation over
      ``bin_values(support)`` is h(x) clipped to [low, high] (x itself without transform).
    """
    x = np.asarray(x, dtype=np.float64)
    y = np_h_transform(x, support.eps) if support.use_transform else x
    y = np.clip(y, support.low, support.high)
    step = (support.high - support.low) / (support.num_bins - 1)
    position = (y - support.low) / step                       # in [0, num_bins - 1]
    lower = np.clip(np.floor(position), 0, support.num_bins - 2).astype(np.int64)
    upper_weight = position - lower                           # in [0, 1]
    out = np.zeros(x.shape + (support.num_bins,), dtype=np.float64)
    np.put_along_axis(out, lower[..., None], (1.0 - upper_weight)[..., None], axis=-1)
    np.put_along_axis(out, lower[..., None] + 1, upper_weight[..., None], axis=-1)
    return out.astype(np.float32)


def np_probs_to_scalar(probs, support: SupportConfig) -> np.ndarray:
    """[..., num_bins] probabilities -> [...] scalars (expectation, then h^-1)."""
    probs = np.asarray(probs, dtype=np.float64)
    _check_bins(probs.shape, support)
    y = probs @ bin_values(support)
    return np_h_inverse(y, support.eps) if support.use_transform else y


def np_logits_to_scalar(logits, support: SupportConfig) -> np.ndarray:
    """[..., num_bins] logits -> [...] scalars (softmax, expectation, h^-1)."""
    logits = np.asarray(logits, dtype=np.float64)
    _check_bins(logits.shape, support)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    probs = np.exp(shifted)
    probs /= probs.sum(axis=-1, keepdims=True)
    return np_probs_to_scalar(probs, support)


def _check_bins(shape, support: SupportConfig) -> None:
    if len(shape) == 0 or shape[-1] != support.num_bins:
        raise ValueError(f"expected a last dimension of num_bins={support.num_bins}, "
                         f"got shape {tuple(shape)}")


# ----------------------------------------------------------------------- TensorFlow


def tf_scalar_to_two_hot(x: tf.Tensor, support: SupportConfig) -> tf.Tensor:
    """[...] float32 scalars -> [..., num_bins] float32 two-hot encodings (see the NumPy twin)."""
    x = tf.cast(x, tf.float32)
    y = tf_h_transform(x, support.eps) if support.use_transform else x
    y = tf.clip_by_value(y, support.low, support.high)
    step = (support.high - support.low) / (support.num_bins - 1)
    position = (y - support.low) / step
    lower = tf.clip_by_value(tf.floor(position), 0.0, float(support.num_bins - 2))
    upper_weight = position - lower
    lower_index = tf.cast(lower, tf.int32)
    return (tf.one_hot(lower_index, support.num_bins) * (1.0 - upper_weight)[..., None]
            + tf.one_hot(lower_index + 1, support.num_bins) * upper_weight[..., None])


def tf_logits_to_scalar(logits: tf.Tensor, support: SupportConfig) -> tf.Tensor:
    """[..., num_bins] logits -> [...] float32 scalars (softmax, expectation, h^-1)."""
    bins = tf.constant(bin_values(support), dtype=tf.float32)
    y = tf.reduce_sum(tf.nn.softmax(logits, axis=-1) * bins, axis=-1)
    return tf_h_inverse(y, support.eps) if support.use_transform else y
