"""PPO's learning side: GAE, the clipped-surrogate and value losses, and ``PPOLearner``.

The pure functions come first, each with the shapes it takes (time-major: T steps, B unrolls):

    gae(rewards, values, bootstrap_values, discounts, lambda_, episode_ends) -> (advantages, returns)
    unroll_transitions(unrolls, discount, max_abs_reward)  the GAE inputs of a batch of unrolls
    ppo_clip_loss(new_logp, old_logp, advantages, epsilon) -> scalar
    value_loss(predicted, targets) -> scalar

``PPOLearner`` (a ``muzero.core.Learner``) owns the trained and serving ``PPONetworks``, two
Adam optimisers (policy model with the shared layers; the value model's own layers), the
training-step counter, a NumPy generator and the ``UnrollQueue`` the step-streaming service
fills (capacity: one batch, so acting never runs more than a batch ahead of training).

**One training step is one minibatch update**: ``step()`` trains one batch of unrolls for
``epochs * num_minibatches`` updates, so ``training_step`` advances by that much per call
(``--max_train_steps``, ``lr_decay_steps`` and the optimisers' iteration counts all count
updates).

Imports NumPy, TensorFlow and the package's PPO, config and queue modules.
"""
from __future__ import annotations

import threading
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from muzero.algorithms.ppo.config import PPOConfig
from muzero.algorithms.ppo.networks import PPOPolicy, make_networks
from muzero.algorithms.tf_learner import CheckpointedLearner
from muzero.algorithms.unroll_queue import UnrollQueue
from muzero.config import to_dict
from muzero.network.layers import variable_copier
from muzero.network.optimizers import learning_rate_schedule, make_optimizer

ALGO = "ppo"
PPO_STATE = "ppo_state.json"   # RNG states inside a checkpoint directory (written by save)


# -- pure functions ----------------------------------------------------------------------------

def gae(rewards: np.ndarray, values: np.ndarray, bootstrap_values: np.ndarray, discounts: np.ndarray,
        lambda_: float, episode_ends: Optional[np.ndarray] = None) -> tuple:
    """Generalised advantage estimation (Schulman et al. 2016), time-major, NumPy.

    Transition t goes from state x_t to x_{t+1} (t = 0 .. T-1):

      next_t  = bootstrap_values[t] if episode_ends[t] else values[t+1]
      delta_t = rewards[t] + discounts[t] * next_t - values[t]
      A_t     = delta_t + discounts[t] * lambda_ * (1 - episode_ends[t]) * A_{t+1},   A_T = 0

    Args:
      rewards: [T, B] reward of transition t.
      values: [T+1, B] baseline of x_t (values[T] bootstraps the last transition).
      bootstrap_values: [T, B] where a transition ended an episode, the value of the state it
        ended in (a truncation: the behaviour value of the final observation; a termination:
        anything, its discount is 0). Unused elsewhere.
      discounts: [T, B] the discount, 0 where the transition terminated the episode.
      lambda_: the GAE lambda in [0, 1].
      episode_ends: [T, B] bool, the transition ended an episode (terminated or truncated): the
        next state belongs to another episode, so it is neither bootstrapped from nor traced
        through. None: no episode ends.

    Returns:
      (advantages [T, B] f32, returns [T, B] f32) with returns = advantages + values[:-1],
      the value targets.
    """
    rewards = np.asarray(rewards, np.float64)
    values = np.asarray(values, np.float64)
    discounts = np.asarray(discounts, np.float64)
    t_len = rewards.shape[0]
    if values.shape[0] != t_len + 1:
        raise ValueError(f"values has {values.shape[0]} steps; expected T + 1 = {t_len + 1}")
    ends = np.zeros(rewards.shape, bool) if episode_ends is None else np.asarray(episode_ends, bool)
    next_values = np.where(ends, np.asarray(bootstrap_values, np.float64), values[1:])
    deltas = rewards + discounts * next_values - values[:-1]
    traces = discounts * lambda_ * (~ends)
    advantages = np.zeros_like(deltas)
    running = np.zeros(deltas.shape[1:])
    for t in range(t_len - 1, -1, -1):
        running = deltas[t] + traces[t] * running
        advantages[t] = running
    return advantages.astype(np.float32), (advantages + values[:-1]).astype(np.float32)


def stack_unrolls(unrolls: Sequence[dict]) -> dict:
    """B unroll dicts ([T+1, ...] each, ``muzero.core``'s format) -> {key: [T+1, B, ...]}.

    Keys other than arrays with a time axis (``env_id``, ``state/*``) are left out."""
    keys = ("observation", "reward", "terminated", "truncated", "bootstrap_value", "action",
            "policy_logits", "value")
    missing = [k for k in keys if k not in unrolls[0]]
    if missing:
        raise ValueError(f"unrolls lack {missing}; a PPO unroll carries {list(keys)}")
    return {k: np.stack([np.asarray(u[k]) for u in unrolls], axis=1) for k in keys}


def unroll_transitions(batch: dict, discount: float, max_abs_reward: float = 0.0) -> dict:
    """GAE inputs of a stacked batch (``stack_unrolls``), transition t = step t -> step t+1.

    Returns rewards [T, B] (reward[1:], clipped to +-max_abs_reward when > 0), values [T+1, B]
    (the behaviour values), bootstrap_values [T, B] (bootstrap_value[1:] where truncated[1:],
    else 0), discounts [T, B] (discount, 0 where terminated[1:]) and episode_ends [T, B]
    (terminated[1:] | truncated[1:]).
    """
    rewards = np.asarray(batch["reward"][1:], np.float32)
    if max_abs_reward > 0:
        rewards = np.clip(rewards, -max_abs_reward, max_abs_reward)
    terminated = np.asarray(batch["terminated"][1:], bool)
    truncated = np.asarray(batch["truncated"][1:], bool) & ~terminated
    return {"rewards": rewards,
            "values": np.asarray(batch["value"], np.float32),
            "bootstrap_values": np.where(truncated, np.asarray(batch["bootstrap_value"][1:], np.float32), 0.0),
            "discounts": np.where(terminated, 0.0, discount).astype(np.float32),
            "episode_ends": terminated | truncated}


def log_softmax_np(logits: np.ndarray) -> np.ndarray:
    """[..., A] -> log-probabilities [..., A] (float64 NumPy)."""
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def ppo_clip_loss(new_logp, old_logp, advantages, epsilon) -> tf.Tensor:
    """PPO's clipped surrogate, as a loss to minimise (Schulman et al. 2017, eq. 7).

    new_logp, old_logp, advantages: [N]; epsilon: scalar. With r = exp(new_logp - old_logp):
      -mean(min(r * A, clip(r, 1 - epsilon, 1 + epsilon) * A))
    Where the clipped term is the smaller one (r > 1 + eps with A > 0, r < 1 - eps with A < 0)
    the element's gradient is 0. -> scalar f32.
    """
    new_logp = tf.convert_to_tensor(new_logp, tf.float32)
    old_logp = tf.convert_to_tensor(old_logp, tf.float32)
    advantages = tf.convert_to_tensor(advantages, tf.float32)
    ratio = tf.exp(new_logp - old_logp)
    clipped = tf.clip_by_value(ratio, 1.0 - epsilon, 1.0 + epsilon)
    return -tf.reduce_mean(tf.minimum(ratio * advantages, clipped * advantages))


def value_loss(predicted, targets) -> tf.Tensor:
    """0.5 * mean((predicted - targets)^2): predicted, targets [N] (same units) -> scalar."""
    predicted = tf.convert_to_tensor(predicted, tf.float32)
    targets = tf.convert_to_tensor(targets, tf.float32)
    return 0.5 * tf.reduce_mean(tf.square(predicted - targets))


def to_network_units(returns, scale: float):
    """Return-unit values -> the value model's units (times ``scale``, 1 - discount or 1)."""
    return returns * scale


def to_return_units(values, scale: float):
    """Inverse of ``to_network_units``."""
    return values / scale


def linear_decay(initial: float, step, decay_steps: int):
    """initial * max(0, 1 - step / decay_steps) (works on tensors and numbers)."""
    if isinstance(step, (int, float, np.number)):
        return initial * max(0.0, 1.0 - float(step) / decay_steps)
    step = tf.cast(step, tf.float32)
    return initial * tf.maximum(0.0, 1.0 - step / float(decay_steps))


# -- the learner -------------------------------------------------------------------------------

_METRICS = ("loss/total", "loss/policy", "loss/value", "loss/entropy", "policy/clip_fraction",
            "policy/approx_kl", "policy/entropy", "gradient_norm/policy", "gradient_norm/value")


def _make_optimizer(learning_rate: float, training) -> tf.keras.optimizers.Optimizer:
    return make_optimizer(learning_rate_schedule(learning_rate, training.lr_schedule, training.lr_decay_steps),
                          epsilon=training.adam_epsilon)


class PPOLearner(CheckpointedLearner):
    """PPO with separate policy and value optimisers, fed by step-streaming unrolls.

    ``policy`` is the ``PPOPolicy`` the streaming service acts with (it reads ``serving``);
    ``sink(unroll)`` is what the service calls with each finished unroll.
    """

    ALGO = ALGO
    STATE_JSON = PPO_STATE

    def __init__(self, descriptor, config: PPOConfig, seed: int = 0,
                 stop_event: Optional[threading.Event] = None):
        self.descriptor = descriptor
        self.config = config
        t = config.training
        self.networks = make_networks(descriptor, config, seed=seed)
        self.serving = make_networks(descriptor, config, seed=seed)
        self.policy = PPOPolicy(self.serving, seed=seed + 1)
        self.queue = UnrollQueue(t.batch_size, stop_event)   # the run's: puts stop waiting at shutdown
        self.rng = np.random.default_rng([seed, 7])
        self._step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.policy_optimizer = _make_optimizer(t.policy_learning_rate, t)
        self.value_optimizer = _make_optimizer(t.value_learning_rate, t)
        self._policy_vars = list(self.networks.policy_variables)
        self._value_vars = list(self.networks.value_variables)
        self.policy_optimizer.build(self._policy_vars)
        self.value_optimizer.build(self._value_vars)
        self.checkpoint = tf.train.Checkpoint(networks=self.networks, policy_optimizer=self.policy_optimizer,
                                              value_optimizer=self.value_optimizer, step=self._step)
        self._copy_weights = variable_copier(self.networks.variables, self.serving.variables)
        self._train_batch = tf.function(self._train_batch_graph)

    # -- data ------------------------------------------------------------------------------------

    def sink(self, unroll: dict) -> bool:
        """Queues one unroll (blocks while a batch is waiting); False once closed."""
        return self.queue.put(unroll)

    def _prepare(self, unrolls: list) -> tuple:
        """Unrolls -> (training arrays over the N = T * B transitions, numbers for metrics)."""
        t = self.config.training
        batch = stack_unrolls(unrolls)
        steps = batch["reward"].shape[0]
        if steps != t.unroll_length + 1:
            raise ValueError(f"unrolls have {steps} steps; training.unroll_length={t.unroll_length} "
                             f"needs {t.unroll_length + 1}")
        inputs = unroll_transitions(batch, t.discount, t.max_abs_reward)
        advantages, returns = gae(inputs["rewards"], inputs["values"], inputs["bootstrap_values"],
                                  inputs["discounts"], t.gae_lambda, inputs["episode_ends"])
        n = advantages.size
        actions = np.asarray(batch["action"][:-1], np.int64)                       # [T, B]
        old_logp = np.take_along_axis(log_softmax_np(batch["policy_logits"][:-1]),
                                      actions[..., None], axis=-1)[..., 0]          # [T, B]
        observation = batch["observation"][:-1]
        arrays = {
            "observation": observation.reshape((n,) + observation.shape[2:]),
            "action": actions.reshape(n).astype(np.int32),
            "old_logp": old_logp.reshape(n).astype(np.float32),
            "advantage": advantages.reshape(n),
            "target": to_network_units(returns.reshape(n), self.networks.value_scale).astype(np.float32),
        }
        behaviour = inputs["values"][:-1]
        residual_var = np.var(returns - behaviour)
        var = np.var(returns)
        extra = {"value/explained_variance": float(1.0 - residual_var / var) if var > 0 else 0.0,
                 "value/target_mean": float(returns.mean()),
                 "policy/advantage_mean": float(advantages.mean()),
                 "data/episode_ends": float(inputs["episode_ends"].sum())}
        return arrays, extra

    def _orders(self, n: int) -> np.ndarray:
        """[epochs * num_minibatches, N / num_minibatches] i32: each epoch a fresh permutation."""
        t = self.config.training
        rows = [self.rng.permutation(n).reshape(t.num_minibatches, -1) for _ in range(t.epochs)]
        return np.concatenate(rows, axis=0).astype(np.int32)

    # -- training --------------------------------------------------------------------------------

    def _update(self, observation, action, old_logp, advantage, target):
        """One minibatch update; returns the metrics vector [len(_METRICS)]."""
        t = self.config.training
        step = self._step
        epsilon = (linear_decay(t.clip_epsilon, step, t.lr_decay_steps) if t.clip_schedule == "linear"
                   else tf.constant(t.clip_epsilon, tf.float32))
        if t.normalize_advantages:
            mean, variance = tf.nn.moments(advantage, axes=[0])
            advantage = (advantage - mean) / (tf.sqrt(variance) + 1e-8)
        with tf.GradientTape() as tape:
            logits, value = self.networks(observation, action if self.networks.q_value else None)
            logp_all = tf.nn.log_softmax(logits)
            new_logp = tf.gather(logp_all, action, axis=1, batch_dims=1)
            policy_term = ppo_clip_loss(new_logp, old_logp, advantage, epsilon)
            entropy = -tf.reduce_mean(tf.reduce_sum(tf.exp(logp_all) * logp_all, axis=-1))
            entropy_term = -t.entropy_cost * entropy
            value_term = t.value_cost * value_loss(value, target)
            total = policy_term + value_term + entropy_term
        grads = tape.gradient(total, self._policy_vars + self._value_vars)
        grads = [tf.zeros_like(v) if g is None else g for g, v in zip(grads, self._policy_vars + self._value_vars)]
        policy_grads, value_grads = grads[:len(self._policy_vars)], grads[len(self._policy_vars):]
        policy_norm = tf.linalg.global_norm(policy_grads)
        value_norm = tf.linalg.global_norm(value_grads)
        if t.gradient_clip_norm > 0:
            policy_grads, _ = tf.clip_by_global_norm(policy_grads, t.gradient_clip_norm, use_norm=policy_norm)
            value_grads, _ = tf.clip_by_global_norm(value_grads, t.gradient_clip_norm, use_norm=value_norm)
        self.policy_optimizer.apply_gradients(zip(policy_grads, self._policy_vars))
        self.value_optimizer.apply_gradients(zip(value_grads, self._value_vars))
        step.assign_add(1)
        log_ratio = new_logp - old_logp
        ratio = tf.exp(log_ratio)
        clip_fraction = tf.reduce_mean(tf.cast(tf.abs(ratio - 1.0) > epsilon, tf.float32))
        approx_kl = tf.reduce_mean((ratio - 1.0) - log_ratio)
        return tf.stack([total, policy_term, value_term, entropy_term, clip_fraction, approx_kl, entropy,
                         policy_norm, value_norm])

    def _train_batch_graph(self, observation, action, old_logp, advantage, target, orders):
        """Every update of one batch in one graph: orders [U, M] index the N transitions.
        Returns the metrics averaged over the U updates [len(_METRICS)]."""
        sums = tf.zeros([len(_METRICS)], tf.float32)
        count = tf.shape(orders)[0]
        for u in tf.range(count):
            index = orders[u]
            sums += self._update(tf.gather(observation, index), tf.gather(action, index),
                                 tf.gather(old_logp, index), tf.gather(advantage, index),
                                 tf.gather(target, index))
        return sums / tf.cast(count, tf.float32)

    def step(self) -> Optional[dict]:
        """Trains on one batch of ``batch_size`` unrolls if the queue holds one (waits <= 0.1 s)."""
        unrolls = self.queue.get_batch(self.config.training.batch_size, timeout=0.1)
        if unrolls is None:
            return None
        return self.train_on(unrolls)

    def train_on(self, unrolls: list) -> dict:
        """``epochs * num_minibatches`` updates on these unrolls; returns float metrics."""
        arrays, extra = self._prepare(unrolls)
        orders = self._orders(len(arrays["action"]))
        averages = self._train_batch(tf.constant(arrays["observation"]), tf.constant(arrays["action"]),
                                     tf.constant(arrays["old_logp"]), tf.constant(arrays["advantage"]),
                                     tf.constant(arrays["target"]), tf.constant(orders)).numpy()
        metrics = {name: float(v) for name, v in zip(_METRICS, averages)}
        metrics.update(extra)
        metrics.update(self.schedules())
        return metrics

    def schedules(self) -> dict:
        """Learning rates and clipping epsilon at the current training step."""
        t = self.config.training
        step = self.training_step
        decay = (lambda x: linear_decay(x, step, t.lr_decay_steps))
        return {"policy/learning_rate": decay(t.policy_learning_rate) if t.lr_schedule == "linear"
                else t.policy_learning_rate,
                "value/learning_rate": decay(t.value_learning_rate) if t.lr_schedule == "linear"
                else t.value_learning_rate,
                "policy/clip_epsilon": decay(t.clip_epsilon) if t.clip_schedule == "linear" else t.clip_epsilon}

    @property
    def training_step(self) -> int:
        return int(self._step.numpy())

    # -- weights ---------------------------------------------------------------------------------

    def copy_to_serving(self) -> None:
        self._copy_weights()

    # save / restore / init_from: CheckpointedLearner. The unroll queue is not saved: on-policy
    # data is stale after a restart.
    def learner_state(self) -> dict:
        return {"step": self.training_step, "rng": self.rng.bit_generator.state,
                "policy_rng": self.policy._rng.bit_generator.state, "config": to_dict(self.config)}

    def load_learner_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.policy._rng.bit_generator.state = state["policy_rng"]

    def init_parts(self) -> dict:
        """Fine-tuning restores the network weights (not the optimisers, step or RNG)."""
        return {"networks": self.networks}

    def export(self, directory: str) -> None:
        """SavedModel with ``policy(observation) -> {"action" (greedy), "policy_logits"}`` and
        ``muzero_export.json`` (algo "ppo"); ``PolicyPlayer(directory)`` plays it."""
        from muzero.algorithms.policy_export import export_policy
        networks = self.networks

        def policy_fn(observation):
            return {"policy_logits": networks.policy_logits(observation)}

        d = self.descriptor
        export_policy(directory, networks, policy_fn, tuple(d.observation_shape), d.observation_dtype,
                      {"kind": "discrete", "num_actions": int(d.num_actions)}, ALGO,
                      extra={"network": to_dict(self.config.network), "training_step": self.training_step})

    # -- run-loop hooks --------------------------------------------------------------------------

    def progress(self) -> dict:
        return {"unroll_queue": len(self.queue)}

    def close(self) -> None:
        self.queue.close()
