"""SAC's actor and twin critics (``SACNetworks``, a ``tf.Module``), and the squashed Gaussian.

Continuous actions (a box [low, high]^d): the actor maps the flat observation to the mean
and log-std of a diagonal Gaussian over u in R^d; the action is ``tanh(u)`` in [-1, 1]^d
("unit" actions, what the critics and the log-probabilities use) scaled into the env's
bounds as ``center + half_range * tanh(u)`` ("env" actions, what the envs receive and the
replay stores). Each critic maps (observation, unit action) to one Q.

Discrete actions (A of them): the actor outputs logits [A]; each critic outputs Q [A].

``squashed_gaussian_log_prob(u, mean, log_std)`` is log pi(tanh(u)) in unit-action space:

    sum_i [ log N(u_i; mean_i, exp(log_std_i)) - log(1 - tanh(u_i)^2) ]

with ``log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u))`` (exact, and finite for large |u|).

Variables come from a seeded NumPy generator: two networks built with the same arguments
are identical (trained and serving copies; the target critics start equal to the critics).

Imports NumPy, TensorFlow and the package's layers.
"""
from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from muzero.algorithms.sac.config import SACNetworkConfig
from muzero.network.torsos import MLPTorso
from muzero.network.layers import Dense

_LOG_2PI = math.log(2.0 * math.pi)


def squashed_gaussian_log_prob(u, mean, log_std) -> tf.Tensor:
    """[N, d] pre-tanh samples, means and log-stds -> [N] log-probability of tanh(u)."""
    u = tf.convert_to_tensor(u, tf.float32)
    mean = tf.convert_to_tensor(mean, tf.float32)
    log_std = tf.convert_to_tensor(log_std, tf.float32)
    z = (u - mean) * tf.exp(-log_std)
    gaussian = -0.5 * tf.square(z) - log_std - 0.5 * _LOG_2PI
    log_det = 2.0 * (math.log(2.0) - u - tf.nn.softplus(-2.0 * u))     # log(1 - tanh(u)^2)
    return tf.reduce_sum(gaussian - log_det, axis=-1)


class Critic(tf.Module):
    """MLP over [observation, unit action] -> [N] (continuous) or observation -> [N, A] (discrete)."""

    def __init__(self, in_size: int, out_size: int, config: SACNetworkConfig, rng, name: str):
        super().__init__(name=name)
        with self.name_scope:
            self.torso = MLPTorso(in_size, config.critic_hidden_sizes, config.activation, rng, name="torso")
            self.head = Dense(self.torso.out_size, out_size, rng, name="head")

    def __call__(self, x):
        return self.head(self.torso(x))


class SACNetworks(tf.Module):
    """The actor, two critics and their two target copies for one env's spaces."""

    def __init__(self, descriptor, config: SACNetworkConfig, seed: int = 0, name: str = "sac"):
        super().__init__(name=name)
        rng = np.random.default_rng([seed, 29])
        self.config = config
        self.observation_shape = tuple(int(d) for d in descriptor.observation_shape)
        self.obs_size = int(np.prod(self.observation_shape))
        self.continuous = descriptor.is_continuous
        if self.continuous:
            self.action_size = int(descriptor.action_shape[0])
            low = np.asarray(descriptor.action_low, np.float32)
            high = np.asarray(descriptor.action_high, np.float32)
            self.center = tf.constant((high + low) / 2.0)
            self.half_range = tf.constant((high - low) / 2.0)
        else:
            self.action_size = int(descriptor.num_actions)
        d = self.action_size
        with self.name_scope:
            self.actor_torso = MLPTorso(self.obs_size, config.actor_hidden_sizes, config.activation, rng,
                                        name="actor_torso")
            self.actor_head = Dense(self.actor_torso.out_size, 2 * d if self.continuous else d, rng,
                                    name="actor_head")
            critic_in = self.obs_size + d if self.continuous else self.obs_size
            critic_out = 1 if self.continuous else d
            self.critics = [Critic(critic_in, critic_out, config, rng, name=f"critic_{j}") for j in (1, 2)]
            self.target_critics = [Critic(critic_in, critic_out, config, np.random.default_rng(0), name=f"target_{j}")
                                   for j in (1, 2)]
        for target, critic in zip(self.target_critics, self.critics):
            for t, v in zip(target.variables, critic.variables):
                t.assign(v)

    # -- variables ------------------------------------------------------------------------------
    @property
    def actor_variables(self) -> list:
        return list(self.actor_torso.trainable_variables) + list(self.actor_head.trainable_variables)

    @property
    def critic_variables(self) -> list:
        return [v for c in self.critics for v in c.trainable_variables]

    @property
    def target_variables(self) -> list:
        return [v for c in self.target_critics for v in c.trainable_variables]

    @property
    def acting_variables(self) -> list:
        """What a serving copy needs: actor and critics (not the targets)."""
        return self.actor_variables + self.critic_variables

    # -- actor ------------------------------------------------------------------------------------
    def _flat(self, observation):
        return tf.reshape(tf.cast(observation, tf.float32), [-1, self.obs_size])

    def actor(self, observation):
        """Continuous: (mean [N, d], log_std [N, d] clipped); discrete: logits [N, A]."""
        out = self.actor_head(self.actor_torso(self._flat(observation)))
        if not self.continuous:
            return out
        mean, log_std = tf.split(out, 2, axis=-1)
        return mean, tf.clip_by_value(log_std, self.config.log_std_min, self.config.log_std_max)

    def sample(self, observation, noise):
        """Continuous only: reparametrised sample -> (unit action tanh(u) [N, d], log pi [N]);
        noise [N, d] standard normal."""
        mean, log_std = self.actor(observation)
        u = mean + tf.exp(log_std) * noise
        return tf.tanh(u), squashed_gaussian_log_prob(u, mean, log_std)

    def deterministic_unit_action(self, observation):
        """Continuous: tanh(mean) [N, d]."""
        return tf.tanh(self.actor(observation)[0])

    def to_env_action(self, unit_action):
        return self.center + self.half_range * unit_action

    def to_unit_action(self, env_action):
        return tf.clip_by_value((tf.cast(env_action, tf.float32) - self.center) / self.half_range, -1.0, 1.0)

    # -- critics ----------------------------------------------------------------------------------
    def q_values(self, observation, unit_action=None, target: bool = False) -> tuple:
        """Continuous: (Q_1, Q_2) each [N] at (observation, unit_action); discrete: each [N, A]."""
        critics = self.target_critics if target else self.critics
        x = self._flat(observation)
        if self.continuous:
            x = tf.concat([x, tf.cast(unit_action, tf.float32)], axis=-1)
            return tuple(c(x)[:, 0] for c in critics)
        return tuple(c(x) for c in critics)
