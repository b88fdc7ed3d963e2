"""The policy + baseline network of V-trace (``PolicyValueNetwork``), a ``tf.Module``.

    observation [N, *obs] -> (policy_logits [N, A] f32, baseline [N] f32)

One torso shared by two linear heads (as SEED's agents):

* vector (and any non-image) observations: flattened, then an MLP
  (Dense -> activation per hidden size);
* image observations (uint8 ``[H, W, C]`` frames, divided by 255 here): the shallow
  IMPALA/SEED Atari torso, conv 8x8 stride 4 (32) -> conv 4x4 stride 2 (64) ->
  conv 3x3 stride 1 (64), ReLUs, flatten, dense 512, ReLU. (Convolutions are
  SAME-padded, like every conv in ``muzero.network.layers``.)

Variables are created eagerly from a seeded NumPy generator, so a network is a pure
function of its seed; two networks built with the same arguments have the same
variables in the same order (trained and serving copies).

Imports NumPy, TensorFlow and ``muzero.network.layers``.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from muzero.algorithms.vtrace.config import VTraceNetworkConfig
from muzero.network.layers import Conv2D, Dense

_ACTIVATIONS = {"relu": tf.nn.relu, "tanh": tf.nn.tanh}


def choose_torso(config: VTraceNetworkConfig, observation_shape: tuple, is_image: bool) -> str:
    """"mlp" or "atari" for ``config.torso`` ("auto" picks by the observation kind)."""
    torso = config.torso
    if torso == "auto":
        torso = "atari" if is_image else "mlp"
    if torso == "atari" and len(observation_shape) != 3:
        raise ValueError(f"network.torso=atari needs [H, W, C] observations; got shape {tuple(observation_shape)}")
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
        self.activation = _ACTIVATIONS[activation]
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


class PolicyValueNetwork(tf.Module):
    """Shared torso, policy-logits head [A] and baseline head [1]."""

    def __init__(self, observation_shape, observation_dtype, num_actions: int,
                 config: VTraceNetworkConfig, is_image: bool = False, seed: int = 0,
                 name: str = "vtrace_network"):
        super().__init__(name=name)
        self.observation_shape = tuple(int(d) for d in observation_shape)
        self.observation_dtype = np.dtype(observation_dtype)
        self.num_actions = int(num_actions)
        self.torso_kind = choose_torso(config, self.observation_shape, is_image)
        rng = np.random.default_rng(seed)
        with self.name_scope:
            self.torso = make_torso(self.torso_kind, config, self.observation_shape, rng)
            self.policy_head = Dense(self.torso.out_size, self.num_actions, rng,
                                     init_scale=config.policy_init_scale, name="policy")
            self.baseline_head = Dense(self.torso.out_size, 1, rng, name="baseline")

    @property
    def observation_spec(self) -> tf.TensorSpec:
        return tf.TensorSpec([None, *self.observation_shape], tf.as_dtype(self.observation_dtype),
                             name="observation")

    def __call__(self, observation: tf.Tensor) -> tuple:
        """observation [N, *obs] -> (policy_logits [N, A] f32, baseline [N] f32)."""
        hidden = self.torso(observation)
        return self.policy_head(hidden), tf.squeeze(self.baseline_head(hidden), -1)

    def num_parameters(self) -> int:
        return int(sum(np.prod(v.shape) for v in self.trainable_variables))


def make_network(descriptor, config: VTraceNetworkConfig, seed: int = 0,
                 name: str = "vtrace_network") -> PolicyValueNetwork:
    """The network for an ``envs.EnvDescriptor``."""
    return PolicyValueNetwork(descriptor.observation_shape, descriptor.observation_dtype,
                              descriptor.num_actions, config, is_image=descriptor.is_image, seed=seed,
                              name=name)
