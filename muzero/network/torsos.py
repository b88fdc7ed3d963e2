"""Torsos of the model-free networks (V-trace, R2D2, SAC): an MLP over flat observations and
the Nature-DQN conv stack over uint8 frames, each ending in a feature vector of ``out_size``.

Imports NumPy, TensorFlow and ``muzero.network.layers``.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from muzero.config import ConfigError
from muzero.network.layers import Conv2D, Dense
from muzero.network.options import ACTIVATIONS as _ACTIVATION_NAMES

# The nonlinearity of each name in ``muzero.network.options.ACTIVATIONS``.
ACTIVATIONS = {"relu": tf.nn.relu, "tanh": tf.nn.tanh}
assert tuple(ACTIVATIONS) == _ACTIVATION_NAMES


def choose_torso(torso: str, observation_shape: tuple, is_image: bool) -> str:
    """"mlp" or "atari" for a network config's ``torso`` ("auto" picks by the observation
    kind); ConfigError for "atari" on observations that are not [H, W, C]."""
    if torso == "auto":
        torso = "atari" if is_image else "mlp"
    if torso == "atari" and len(observation_shape) != 3:
        raise ConfigError(f"network.torso=atari needs [H, W, C] observations; got shape {tuple(observation_shape)}")
    return torso


def make_torso(kind: str, config, observation_shape: tuple, rng: np.random.Generator) -> tf.Module:
    """The torso ``kind`` ("atari" or "mlp", from ``choose_torso``) named "torso"; ``config``
    has atari_dense_size, mlp_hidden_sizes and activation (V-trace's and R2D2's network configs)."""
    if kind == "atari":
        return AtariTorso(observation_shape, config.atari_dense_size, rng, name="torso")
    in_size = int(np.prod(observation_shape)) if observation_shape else 1
    return MLPTorso(in_size, config.mlp_hidden_sizes, config.activation, rng, name="torso")


class MLPTorso(tf.Module):
    """[N, *obs] -> flatten -> (Dense -> activation) per hidden size -> [N, hidden_sizes[-1]]."""

    def __init__(self, in_size: int, hidden_sizes, activation: str, rng: np.random.Generator,
                 name: Optional[str] = None):
        super().__init__(name=name)
        self.activation = ACTIVATIONS[activation]
        self.in_size = in_size
        with self.name_scope:
            self.layers = []
            size = in_size
            for i, width in enumerate(hidden_sizes):
                self.layers.append(Dense(size, width, rng, name=f"dense_{i}"))
                size = width
        self.out_size = size

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        x = tf.reshape(tf.cast(x, tf.float32), [-1, self.in_size])
        for layer in self.layers:
            x = self.activation(layer(x))
        return x


class AtariTorso(tf.Module):
    """uint8 [N, H, W, C] / 255 -> conv 8x8/4 32 -> conv 4x4/2 64 -> conv 3x3/1 64 -> dense -> [N, dense]."""

    def __init__(self, observation_shape: tuple, dense_size: int, rng: np.random.Generator,
                 name: Optional[str] = None):
        super().__init__(name=name)
        h, w, c = (int(d) for d in observation_shape)
        with self.name_scope:
            self.convs = [Conv2D(c, 32, 8, rng, stride=4, name="conv_0"),
                          Conv2D(32, 64, 4, rng, stride=2, name="conv_1"),
                          Conv2D(64, 64, 3, rng, stride=1, name="conv_2")]
            for stride in (4, 2, 1):
                h, w = -(-h // stride), -(-w // stride)    # SAME padding: ceil(size / stride)
            self.flat_size = h * w * 64
            self.dense = Dense(self.flat_size, dense_size, rng, name="dense")
        self.out_size = dense_size

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        x = tf.cast(x, tf.float32) / 255.0
        for conv in self.convs:
            x = tf.nn.relu(conv(x))
        x = tf.reshape(x, [-1, self.flat_size])
        return tf.nn.relu(self.dense(x))
