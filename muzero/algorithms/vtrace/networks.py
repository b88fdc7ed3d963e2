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

import numpy as np
import tensorflow as tf

from muzero.algorithms.vtrace.config import VTraceNetworkConfig
from muzero.network.layers import Dense
from muzero.network.torsos import choose_torso, make_torso


class PolicyValueNetwork(tf.Module):
    """Shared torso, policy-logits head [A] and baseline head [1]."""

    def __init__(self, observation_shape, observation_dtype, num_actions: int,
                 config: VTraceNetworkConfig, is_image: bool = False, seed: int = 0,
                 name: str = "vtrace_network"):
        super().__init__(name=name)
        self.observation_shape = tuple(int(d) for d in observation_shape)
        self.observation_dtype = np.dtype(observation_dtype)
        self.num_actions = int(num_actions)
        self.torso_kind = choose_torso(config.torso, self.observation_shape, is_image)
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
