"""R2D2's recurrent dueling Q-network (``R2D2Network``), a ``tf.Module``.

    one step:  observation [B, *obs], prev_action [B] i32, prev_reward [B] f32, (h, c) [B, U]
               -> (q [B, A] f32, (h', c'))
    unroll:    the same over [T, B, ...] time-major inputs, resetting the state where a new
               episode starts -> (q [T, B, A], final (h, c))

Layers (SEED's ``DuelingLSTMDQNNet``, with V-trace's torsos):

* torso: ``muzero.algorithms.vtrace.networks.MLPTorso`` (flattened vector observations) or
  ``AtariTorso`` (uint8 frames / 255, conv 8x8/4 32 -> 4x4/2 64 -> 3x3/1 64 -> dense, ReLUs);
* concat(torso output, one_hot(prev_action), clip(prev_reward, -1, 1)) -> LSTM (U units,
  state parts ``h`` and ``c``, forget-gate bias initialised to 1);
* dueling heads on h: Q = V + Adv - mean_a Adv, each head Dense -> activation -> linear
  (linear alone with ``head_hidden_size=0``).

With ``use_memory=False`` the LSTM state and the previous action and reward inputs are zeroed
before every step, so Q depends on the current observation only (the no-memory control).

Variables are created eagerly from a seeded NumPy generator: networks built with the same
arguments have equal variables in the same order (online, target and serving copies).

Imports NumPy, TensorFlow, ``muzero.network.layers`` and V-trace's torsos.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from muzero.algorithms.r2d2.config import R2D2NetworkConfig
from muzero.network.layers import Dense
from muzero.network.torsos import ACTIVATIONS, choose_torso, make_torso

STATE_KEYS = ("h", "c")


class LSTMCore(tf.Module):
    """A standard LSTM: gates z = x W + h R + b split into (input, forget, cell, output);
    c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c')."""

    def __init__(self, in_size: int, units: int, rng: np.random.Generator, name: Optional[str] = None):
        super().__init__(name=name)
        self.units = int(units)
        with self.name_scope:
            self.input_weights = Dense(in_size, 4 * units, rng, name="input")
            self.recurrent_weights = Dense(units, 4 * units, rng, use_bias=False, name="recurrent")
            bias = np.zeros(4 * units, np.float32)
            bias[units:2 * units] = 1.0          # forget-gate bias 1 (Jozefowicz et al. 2015)
            self.input_weights.b.assign(bias)

    def project(self, x: tf.Tensor) -> tf.Tensor:
        """The input part of the gates, for many steps at once: [..., in] -> [..., 4U]."""
        return self.input_weights(x)

    def cell(self, projected: tf.Tensor, h: tf.Tensor, c: tf.Tensor) -> tuple:
        """projected [B, 4U] (``project`` of this step's input), h, c [B, U] -> (h', c')."""
        z = projected + self.recurrent_weights(h)
        i, f, g, o = tf.split(z, 4, axis=-1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        return tf.sigmoid(o) * tf.tanh(c), c


class DuelingHead(tf.Module):
    """h [N, U] -> Q [N, A] = V + Adv - mean_a Adv."""

    def __init__(self, in_size: int, hidden: int, num_actions: int, activation: str,
                 rng: np.random.Generator, name: Optional[str] = None):
        super().__init__(name=name)
        self.activation = ACTIVATIONS[activation]
        with self.name_scope:
            self.value_hidden = Dense(in_size, hidden, rng, name="value_hidden") if hidden else None
            self.value_out = Dense(hidden or in_size, 1, rng, name="value")
            self.advantage_hidden = Dense(in_size, hidden, rng, name="advantage_hidden") if hidden else None
            self.advantage_out = Dense(hidden or in_size, num_actions, rng, name="advantage")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        v = self.activation(self.value_hidden(x)) if self.value_hidden is not None else x
        a = self.activation(self.advantage_hidden(x)) if self.advantage_hidden is not None else x
        value = self.value_out(v)
        advantage = self.advantage_out(a)
        return value + advantage - tf.reduce_mean(advantage, axis=-1, keepdims=True)


class R2D2Network(tf.Module):
    """Torso -> LSTM -> dueling Q head (see the module docstring)."""

    def __init__(self, observation_shape, observation_dtype, num_actions: int, config: R2D2NetworkConfig,
                 is_image: bool = False, seed: int = 0, name: str = "r2d2_network"):
        super().__init__(name=name)
        self.observation_shape = tuple(int(d) for d in observation_shape)
        self.observation_dtype = np.dtype(observation_dtype)
        self.num_actions = int(num_actions)
        if self.num_actions < 1:
            raise ValueError(f"num_actions={num_actions} must be >= 1")
        self.use_memory = bool(config.use_memory)
        self.lstm_size = int(config.lstm_size)
        self.torso_kind = choose_torso(config.torso, self.observation_shape, is_image)
        rng = np.random.default_rng(seed)
        with self.name_scope:
            self.torso = make_torso(self.torso_kind, config, self.observation_shape, rng)
            self.embedding_size = self.torso.out_size + self.num_actions + 1
            self.lstm = LSTMCore(self.embedding_size, self.lstm_size, rng, name="lstm")
            self.head = DuelingHead(self.lstm_size, config.head_hidden_size, self.num_actions,
                                    config.activation, rng, name="head")

    @property
    def state_spec(self) -> dict:
        """{state part: shape of one row}: {"h": (U,), "c": (U,)}."""
        return {k: (self.lstm_size,) for k in STATE_KEYS}

    def initial_state(self, batch_size) -> tuple:
        """(h, c) zeros [batch_size, U]."""
        zeros = tf.zeros([batch_size, self.lstm_size], tf.float32)
        return zeros, zeros

    def embed(self, observation: tf.Tensor, prev_action: tf.Tensor, prev_reward: tf.Tensor) -> tf.Tensor:
        """[N, *obs], [N], [N] -> the LSTM input [N, torso + A + 1] (previous action and reward
        zeroed without memory)."""
        features = self.torso(observation)
        one_hot = tf.one_hot(tf.cast(prev_action, tf.int32), self.num_actions, dtype=tf.float32)
        reward = tf.clip_by_value(tf.cast(prev_reward, tf.float32), -1.0, 1.0)[:, None]
        if not self.use_memory:
            one_hot, reward = tf.zeros_like(one_hot), tf.zeros_like(reward)
        return tf.concat([features, one_hot, reward], axis=-1)

    def step(self, observation, prev_action, prev_reward, h, c) -> tuple:
        """One step for a batch: -> (q [B, A], h' [B, U], c' [B, U])."""
        if not self.use_memory:
            h, c = tf.zeros_like(h), tf.zeros_like(c)
        x = self.lstm.project(self.embed(observation, prev_action, prev_reward))
        h, c = self.lstm.cell(x, h, c)
        return self.head(h), h, c

    def unroll(self, observation, prev_action, prev_reward, reset, h, c) -> tuple:
        """Time-major: observation [T, B, *obs], prev_action [T, B], prev_reward [T, B], reset [T, B]
        bool (the state is zeroed before step t where reset[t]: an episode starts there), h, c
        [B, U] the state before step 0 -> (q [T, B, A], (h, c) after the last step)."""
        shape = tf.shape(prev_reward)
        t_len, batch = shape[0], shape[1]
        flat = tf.reshape(observation, tf.concat([[t_len * batch], tf.shape(observation)[2:]], axis=0))
        x = self.embed(flat, tf.reshape(prev_action, [-1]), tf.reshape(prev_reward, [-1]))
        x = tf.reshape(self.lstm.project(x), [t_len, batch, 4 * self.lstm_size])
        if self.use_memory:
            keep = 1.0 - tf.cast(reset, tf.float32)[..., None]              # [T, B, 1]
        else:
            keep = tf.zeros([t_len, batch, 1], tf.float32)

        static_t = x.shape[0]
        if static_t is not None and static_t <= 256:
            # A known length (the learner's fixed sequences): a plain unrolled graph, faster on
            # CPU than a while loop and its gradient.
            h, c = tf.convert_to_tensor(h, tf.float32), tf.convert_to_tensor(c, tf.float32)
            outputs = []
            for i in range(static_t):
                h, c = self.lstm.cell(x[i], h * keep[i], c * keep[i])
                outputs.append(h)
            q = self.head(tf.reshape(tf.stack(outputs), [t_len * batch, self.lstm_size]))
            return tf.reshape(q, [t_len, batch, self.num_actions]), (h, c)

        def body(carry, inputs):
            h_prev, c_prev = carry[0], carry[1]
            projected, keep_t = inputs
            h_t, c_t = self.lstm.cell(projected, h_prev * keep_t, c_prev * keep_t)
            return h_t, c_t

        hs, cs = tf.scan(body, (x, keep), initializer=(tf.convert_to_tensor(h, tf.float32),
                                                       tf.convert_to_tensor(c, tf.float32)))
        q = self.head(tf.reshape(hs, [t_len * batch, self.lstm_size]))
        return tf.reshape(q, [t_len, batch, self.num_actions]), (hs[-1], cs[-1])

    def num_parameters(self) -> int:
        return int(sum(np.prod(v.shape) for v in self.trainable_variables))


def make_network(descriptor, config: R2D2NetworkConfig, seed: int = 0, name: str = "r2d2_network") -> R2D2Network:
    """The network for an ``envs.EnvDescriptor``."""
    return R2D2Network(descriptor.observation_shape, descriptor.observation_dtype, descriptor.num_actions,
                       config, is_image=descriptor.is_image, seed=seed, name=name)
