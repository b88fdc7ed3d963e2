"""PPO's policy model and value model (``PPONetworks``) and the acting policy (``PPOPolicy``).

    policy_logits(observation [N, *obs])          -> [N, A] f32
    value(observation [N, *obs], action [N] i32)  -> [N] f32, in network units (see below)

Two models, as Trax's actor-critic trainer: each is a torso (image envs: the Atari
convolutions 8x8/4 32, 4x4/2 64, 3x3/1 64 with ReLUs, SAME-padded as every conv in
``muzero.network.layers``; then one Dense -> activation per hidden size) and a linear output
(policy logits, or one value). The first ``network.shared_layers`` torso layers are one set of
weights feeding both models (0: fully separate models).

Network units of values: with ``training.scale_value_targets`` the value model predicts
(1 - discount) * return (``value_scale``), so its outputs are of order one; everything that
leaves this module for acting (``PPOPolicy``) is converted back to return units.

Q-value baselines (``training.q_value``): the value model also takes the action, one-hot,
concatenated to the input of its first own dense layer (after any convolutions), and is a
Q-function. A state's baseline is then an aggregate over actions: the max or the mean over
``q_value_n_samples`` actions sampled from the policy, or over every action
(``q_value_all_actions``: the max, or the policy-weighted mean sum_a pi(a|x) Q(x, a), which
is V^pi(x)).

Variables are created eagerly from a seeded NumPy generator, so networks are a pure function
of their seed: the trained and serving copies built with the same arguments have the same
variables in the same order.

Imports NumPy, TensorFlow and ``muzero.network.layers``.
"""
from __future__ import annotations

import threading
from typing import Optional

import numpy as np
import tensorflow as tf

from muzero.algorithms.ppo.config import PPOConfig
from muzero.config import ConfigError
from muzero.network.layers import Conv2D, Dense
from muzero.network.torsos import ACTIVATIONS, choose_torso

# (out_channels, kernel, stride) of the Atari torso's convolutions.
_ATARI_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))


def value_scale(discount: float, scale_value_targets: bool) -> float:
    """Network units per return unit: 1 - discount with scale_value_targets, else 1."""
    return float(1.0 - discount) if scale_value_targets else 1.0


def aggregate_q_values(q_values: tf.Tensor, aggregate: str, weights: Optional[tf.Tensor] = None) -> tf.Tensor:
    """A state baseline from Q-values of K actions per state.

    q_values [N, K]; weights [N, K] (policy probabilities of the K actions, when they are every
    action) or None. "max": max_k q; "mean": sum_k w_k q_k with weights, else the plain mean
    (the Monte-Carlo estimate of E_pi[Q] when the K actions were sampled from pi). -> [N].
    """
    if aggregate == "max":
        return tf.reduce_max(q_values, axis=1)
    if aggregate == "mean":
        if weights is None:
            return tf.reduce_mean(q_values, axis=1)
        return tf.reduce_sum(q_values * weights, axis=1)
    raise ValueError(f"aggregate={aggregate!r} must be 'max' or 'mean'")


class ConvLayer(tf.Module):
    """[N, H, W, C] -> ReLU(conv) -> [N, ceil(H/s), ceil(W/s), out]."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int,
                 rng: np.random.Generator, name: Optional[str] = None):
        super().__init__(name=name)
        with self.name_scope:
            self.conv = Conv2D(in_channels, out_channels, kernel, rng, stride=stride, name="conv")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return tf.nn.relu(self.conv(x))


class DenseLayer(tf.Module):
    """[N, in] -> activation(Dense) -> [N, out]."""

    def __init__(self, in_size: int, out_size: int, activation: str, rng: np.random.Generator,
                 name: Optional[str] = None):
        super().__init__(name=name)
        self.activation = ACTIVATIONS[activation]
        with self.name_scope:
            self.dense = Dense(in_size, out_size, rng, name="dense")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return self.activation(self.dense(x))


def _flatten(x: tf.Tensor) -> tf.Tensor:
    if x.shape.rank == 2:
        return x
    return tf.reshape(x, [-1, int(np.prod(x.shape[1:]))])


class PPONetworks(tf.Module):
    """The policy model and the value model of one PPO agent (see the module docstring).

    Attributes: ``policy_variables`` (the policy model's, shared layers included: the policy
    optimiser trains them) and ``value_variables`` (the value model's own layers).
    """

    def __init__(self, observation_shape: tuple, observation_dtype, num_actions: int, is_image: bool,
                 config: PPOConfig, seed: int = 0, name: str = "ppo_networks"):
        super().__init__(name=name)
        net, training = config.network, config.training
        self.observation_shape = tuple(int(d) for d in observation_shape)
        self.observation_dtype = np.dtype(observation_dtype)
        self.num_actions = int(num_actions)
        if self.num_actions < 1:
            raise ValueError(f"num_actions={num_actions} must be >= 1")
        self.torso = choose_torso(net.torso, self.observation_shape, is_image)
        self.q_value = training.q_value
        self.q_value_n_samples = training.q_value_n_samples
        self.q_value_aggregate = training.q_value_aggregate
        self.q_value_all_actions = training.q_value_all_actions
        self.value_scale = value_scale(training.discount, training.scale_value_targets)
        self.input_scale = 1.0 / 255.0 if (self.torso == "atari" and self.observation_dtype == np.uint8) else 1.0

        # Layer specs in order: convolutions first (Atari), then dense hidden layers.
        if self.torso == "atari":
            h, w, c = self.observation_shape
            convs = []
            for out, kernel, stride in _ATARI_CONVS:
                convs.append((c, out, kernel, stride))
                c, h, w = out, -(-h // stride), -(-w // stride)   # SAME padding: ceil(size / stride)
            flat_size = h * w * c
        else:
            convs, flat_size = [], int(np.prod(self.observation_shape))
        n_conv, shared = len(convs), net.shared_layers
        shared_dense = max(0, shared - n_conv)
        if shared_dense > min(len(net.policy_hidden_sizes), len(net.value_hidden_sizes)):
            raise ConfigError(f"PPONetworkConfig.shared_layers={shared} is invalid: the {self.torso} torso has "
                              f"{n_conv} convolution(s) + {len(net.policy_hidden_sizes)} policy / "
                              f"{len(net.value_hidden_sizes)} value dense layers")
        if net.policy_hidden_sizes[:shared_dense] != net.value_hidden_sizes[:shared_dense]:
            raise ConfigError(f"PPONetworkConfig.shared_layers={shared} is invalid: the shared dense layers must "
                              f"have equal widths, got policy {net.policy_hidden_sizes[:shared_dense]} and value "
                              f"{net.value_hidden_sizes[:shared_dense]}")

        rng = np.random.default_rng(seed)
        a = self.num_actions
        with self.name_scope:
            # Shared part: its convolutions, then its dense layers.
            self.shared_layers = [ConvLayer(*convs[i], rng, name=f"shared_conv_{i}")
                                  for i in range(min(shared, n_conv))]
            size = flat_size
            for i, width in enumerate(net.policy_hidden_sizes[:shared_dense]):
                self.shared_layers.append(DenseLayer(size, width, net.activation, rng, name=f"shared_dense_{i}"))
                size = width
            shared_size = size

            def own_layers(prefix: str, hidden_sizes, extra_inputs: int):
                layers_ = [ConvLayer(*convs[i], rng, name=f"{prefix}_conv_{i}")
                           for i in range(min(shared, n_conv), n_conv)]
                dense, in_size = [], shared_size + extra_inputs
                for i, width in enumerate(hidden_sizes[shared_dense:], start=shared_dense):
                    dense.append(DenseLayer(in_size, width, net.activation, rng, name=f"{prefix}_dense_{i}"))
                    in_size = width
                return layers_, dense, in_size

            self.policy_convs, self.policy_dense, size = own_layers("policy", net.policy_hidden_sizes, 0)
            self.policy_out = Dense(size, a, rng, init_scale=net.policy_init_scale, name="policy_logits")
            self.value_convs, self.value_dense, size = own_layers("value", net.value_hidden_sizes,
                                                                  a if self.q_value else 0)
            self.value_out = Dense(size, 1, rng, init_scale=net.value_init_scale, name="value")

        def variables_of(modules) -> list:
            return [v for m in modules for v in m.trainable_variables]

        self.policy_variables = variables_of(self.shared_layers + self.policy_convs + self.policy_dense
                                             + [self.policy_out])
        self.value_variables = variables_of(self.value_convs + self.value_dense + [self.value_out])

    # -- pieces ----------------------------------------------------------------------------------

    def shared_features(self, observation: tf.Tensor) -> tf.Tensor:
        """observation [N, *obs] -> the shared layers' output ([N, ...]; the input itself if none)."""
        x = tf.cast(observation, tf.float32)
        if self.input_scale != 1.0:
            x = x * self.input_scale
        if self.torso == "mlp":
            x = tf.reshape(x, [-1, int(np.prod(self.observation_shape))])
        for layer in self.shared_layers:
            if isinstance(layer, DenseLayer):
                x = _flatten(x)
            x = layer(x)
        return x

    def policy_from_features(self, features: tf.Tensor) -> tf.Tensor:
        """shared features [N, ...] -> policy logits [N, A]."""
        x = features
        for layer in self.policy_convs:
            x = layer(x)
        x = _flatten(x)
        for layer in self.policy_dense:
            x = layer(x)
        return self.policy_out(x)

    def value_trunk(self, features: tf.Tensor) -> tf.Tensor:
        """shared features [N, ...] -> the value model's own convolutions, flattened: [N, F]."""
        x = features
        for layer in self.value_convs:
            x = layer(x)
        return _flatten(x)

    def value_head(self, trunk: tf.Tensor, action: Optional[tf.Tensor] = None) -> tf.Tensor:
        """trunk [M, F] (and action [M] i32 with q_value) -> value in network units [M]."""
        x = trunk
        if self.q_value:
            if action is None:
                raise ValueError("a Q-value model needs the action")
            x = tf.concat([x, tf.one_hot(action, self.num_actions, dtype=tf.float32)], axis=-1)
        for layer in self.value_dense:
            x = layer(x)
        return tf.squeeze(self.value_out(x), axis=-1)

    # -- models ----------------------------------------------------------------------------------

    def __call__(self, observation: tf.Tensor, action: Optional[tf.Tensor] = None) -> tuple:
        """Training forward pass: observation [N, *obs] (action [N] i32 for Q-values) ->
        (policy logits [N, A], value [N] in network units: V(x), or Q(x, a) with q_value)."""
        features = self.shared_features(observation)
        return self.policy_from_features(features), self.value_head(self.value_trunk(features), action)

    def policy_logits(self, observation: tf.Tensor) -> tf.Tensor:
        """observation [N, *obs] -> [N, A]."""
        return self.policy_from_features(self.shared_features(observation))

    def q_values_all(self, trunk: tf.Tensor) -> tf.Tensor:
        """trunk [N, F] -> Q(x, a) for every action, network units [N, A]."""
        n, a = tf.shape(trunk)[0], self.num_actions
        tiled = tf.repeat(trunk, a, axis=0)                                        # [N*A, F]
        actions = tf.tile(tf.range(a, dtype=tf.int32), [n])                        # [N*A]
        return tf.reshape(self.value_head(tiled, actions), [n, a])

    def q_values_of(self, trunk: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        """trunk [N, F], actions [N, K] i32 -> Q(x, a_k) in network units [N, K]."""
        n, k = tf.shape(actions)[0], tf.shape(actions)[1]
        tiled = tf.repeat(trunk, k, axis=0)                                        # [N*K, F]
        return tf.reshape(self.value_head(tiled, tf.reshape(actions, [-1])), [n, k])

    def logits_and_baseline(self, observation: tf.Tensor, sample_noise: tf.Tensor) -> tuple:
        """Acting pass: observation [N, *obs], sample_noise [N, S, A] f32 (Gumbel noise choosing
        the S actions a Q-value baseline is sampled over; S = 0 otherwise) ->
        (policy logits [N, A], baseline [N] in return units)."""
        features = self.shared_features(observation)
        logits = self.policy_from_features(features)
        trunk = self.value_trunk(features)
        if not self.q_value:
            value = self.value_head(trunk)
        elif self.q_value_all_actions:
            probs = tf.nn.softmax(logits) if self.q_value_aggregate == "mean" else None
            value = aggregate_q_values(self.q_values_all(trunk), self.q_value_aggregate, probs)
        else:
            actions = tf.argmax(logits[:, None, :] + sample_noise, axis=-1, output_type=tf.int32)  # [N, S]
            value = aggregate_q_values(self.q_values_of(trunk, actions), self.q_value_aggregate)
        return logits, value / self.value_scale

    def num_parameters(self) -> int:
        return int(sum(np.prod(v.shape) for v in self.trainable_variables))


def make_networks(descriptor, config: PPOConfig, seed: int = 0) -> PPONetworks:
    """PPONetworks for an env descriptor (``envs.EnvDescriptor``)."""
    return PPONetworks(tuple(descriptor.observation_shape), descriptor.observation_dtype,
                       descriptor.num_actions, descriptor.is_image, config, seed=seed)


class PPOPolicy:
    """The acting policy the step-streaming service calls (the StreamingPolicy protocol).

    Runs ``networks`` (the learner's serving copy) through two concrete ``tf.function``s traced
    once with a ``None`` batch dimension. Actions are sampled on the host from the returned
    logits (Gumbel-max with a seeded NumPy generator); evaluation rows take the argmax.
    Feed-forward: the recurrent state is always ``{}``.
    """

    def __init__(self, networks: PPONetworks, seed: int = 0):
        self.networks = networks
        self.observation_shape = networks.observation_shape
        self.observation_dtype = networks.observation_dtype
        self.action_shape = ()
        self.action_dtype = np.dtype(np.int32)
        self.num_actions = networks.num_actions
        self._samples = (networks.q_value_n_samples
                         if networks.q_value and not networks.q_value_all_actions else 0)
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        a = self.num_actions
        obs_spec = tf.TensorSpec([None, *self.observation_shape], tf.as_dtype(self.observation_dtype),
                                 name="observation")
        noise_spec = tf.TensorSpec([None, None, a], tf.float32, name="sample_noise")
        self._act_fn = tf.function(networks.logits_and_baseline,
                                   input_signature=[obs_spec, noise_spec]).get_concrete_function()

    def _gumbel(self, shape: tuple) -> np.ndarray:
        with self._lock:
            u = self._rng.random(shape)
        return -np.log(-np.log(np.maximum(u, 1e-20))).astype(np.float32)

    def _run(self, observation) -> tuple:
        observation = np.asarray(observation, dtype=self.observation_dtype)
        if observation.shape[1:] != self.observation_shape:
            raise ValueError(f"observation shape {observation.shape} does not match "
                             f"[B, {', '.join(map(str, self.observation_shape))}]")
        noise = self._gumbel((len(observation), self._samples, self.num_actions))
        logits, value = self._act_fn(tf.constant(observation), tf.constant(noise))
        return logits.numpy().astype(np.float32, copy=False), value.numpy().astype(np.float32, copy=False)

    def initial_state(self, num_envs: int) -> dict:
        return {}

    def act(self, observation, prev_action, prev_reward, state: dict, evaluation, env_ids=None) -> tuple:
        """observation [B, *obs], prev_action [B], prev_reward [B], state {}, evaluation [B] bool
        (env_ids unused) ->
        (action [B] i32: sampled, argmax where evaluation; {"policy_logits": [B, A] f32,
        "value": [B] f32 behaviour value in return units}; new state {})."""
        logits, value = self._run(observation)
        sampled = np.argmax(logits + self._gumbel(logits.shape), axis=-1)
        greedy = np.argmax(logits, axis=-1)
        action = np.where(np.asarray(evaluation, dtype=bool), greedy, sampled).astype(np.int32)
        return action, {"policy_logits": logits, "value": value}, {}

    def value(self, observation) -> np.ndarray:
        """observation [M, *obs] -> behaviour value [M] f32 in return units (bootstrap at truncation)."""
        return self._run(observation)[1]
