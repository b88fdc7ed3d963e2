"""R2D2 learning: value rescaling, n-step double-Q targets, priorities, the acting policy and
``R2D2Learner``.

Pure functions (TensorFlow ops; NumPy inputs work eagerly), time-major ``[L, B]``:

    value_rescale(x, eps), inverse_value_rescale(x, eps)       h and its exact inverse
    training_epsilons(num_train_envs, base, alpha)             [N] per-env exploration rates
    n_step_targets(reward, terminated, truncated, bootstrap_value, bootstrap_q, discount, n_step)
    sequence_td_errors(q_online, q_target, action, reward, terminated, truncated,
                       bootstrap_value, burn_in, discount, n_step, rescaling_epsilon,
                       max_abs_reward) -> (td [T, B], targets [T, B], q_taken [T, B])
    sequence_priorities(td, eta) -> [B]

Unroll layout (``muzero.core``): step s holds observation x_s and the action a_s taken at it;
``reward[s]``, ``terminated[s]`` and ``truncated[s]`` describe the transition INTO x_s, so the
transition x_s -> x_{s+1} has reward[s+1] and ends the episode when terminated[s+1] or
truncated[s+1] (then x_{s+1} is already the next episode's first observation). A stored
sequence has L = burn_in + T + 1 steps; steps [0, burn_in) only warm up the LSTM, the T
transitions s = burn_in .. L-2 are trained, and x_{L-1} only bootstraps. The LSTM state is
zeroed (and the previous action and reward are 0) at every step where an episode starts, as
the streaming service does when acting.

The behaviour policy stores per step ``q_values`` [A] (used once, for the initial priority)
and ``prev_action`` (the action fed to the network at that step; the unroll's own actions do
not give it for step 0).

Truncation (time limits): the service stores the *behaviour* network's value of the final
observation as ``bootstrap_value`` (return units), and ``R2D2Policy.value`` computes it as
h^-1(max_a Q) of that observation with a ZERO recurrent state and zero previous action and
reward (the protocol's ``value`` sees no state). That is an approximation: for a partially
observed env the value of a final state depends on the history the network no longer has.

Size: the sequence replay, the loss and the learner share the burn-in and priority rules
stated above; one module keeps them side by side.

Imports NumPy, TensorFlow and this package.
"""
from __future__ import annotations

import threading
from typing import Optional

import numpy as np
import tensorflow as tf

from muzero import core
from muzero.algorithms.item_replay import ItemReplay
from muzero.algorithms.r2d2.config import R2D2ActingConfig, R2D2Config
from muzero.algorithms.r2d2.networks import STATE_KEYS, R2D2Network, make_network
from muzero.algorithms.tf_learner import CheckpointedLearner
from muzero.config import ConfigError, to_dict
from muzero.network.layers import variable_copier
from muzero.network.optimizers import make_optimizer
from muzero.network.transforms import tf_h_inverse, tf_h_transform

ALGO = "r2d2"
MIN_PRIORITY = 1e-6     # priorities must be > 0 (a sequence with zero TD errors stays sampleable)


# -- pure functions ------------------------------------------------------------------------------

# h and its inverse (Pohlen et al. 2018) are the ones the categorical supports use, in forms
# without cancellation near 0 (muzero.algorithms.muzero.network.support).
value_rescale = tf_h_transform
inverse_value_rescale = tf_h_inverse


def training_epsilons(num_train_envs: int, base: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """[N] epsilon_i = base ** (1 + alpha * i / (N - 1)) for training envs i in [0, N); N = 1: [base]."""
    n = int(num_train_envs)
    if n < 1:
        return np.zeros(0, np.float64)
    if n == 1:
        return np.array([base], np.float64)
    return np.power(float(base), 1.0 + float(alpha) * np.arange(n) / (n - 1))


def _pad(x: tf.Tensor, n: int) -> tf.Tensor:
    """x [S+1, ...] with n rows of zeros appended."""
    return tf.concat([x] + [tf.zeros_like(x[:1])] * n, axis=0)


def n_step_targets(reward, terminated, truncated, bootstrap_value, bootstrap_q, discount: float,
                   n_step: int) -> tf.Tensor:
    """n-step returns of the S transitions j -> j+1 of a segment of S + 1 steps.

    Args (time-major [S+1, B]; step j as in the unroll: reward/terminated/truncated/
      bootstrap_value[j] describe the transition into step j):
      bootstrap_q: the value of x_j in return units (R2D2: h^-1(Q_target(x_j, argmax Q_online)));
        row 0 is unused.
      discount, n_step: gamma and n.

    For transition j with k = min(n, S - j) and G = sum_{i<k} gamma^i reward[j+i+1]
    + gamma^k bootstrap_q[j+k], except that the window stops at the first episode end:
    where terminated[j+i+1] the sum ends after that reward (no bootstrap); where
    truncated[j+i+1] (and not terminated) it ends with + gamma^(i+1) bootstrap_value[j+i+1].
    Returns G [S, B] float32.
    """
    reward = tf.cast(tf.convert_to_tensor(reward), tf.float32)
    terminated = tf.cast(tf.convert_to_tensor(terminated), tf.bool)
    truncated = tf.logical_and(tf.cast(tf.convert_to_tensor(truncated), tf.bool), tf.logical_not(terminated))
    bootstrap_value = tf.cast(tf.convert_to_tensor(bootstrap_value), tf.float32)
    bootstrap_q = tf.cast(tf.convert_to_tensor(bootstrap_q), tf.float32)
    s = tf.shape(reward)[0] - 1
    padded = [_pad(x, n_step) for x in (reward, terminated, truncated, bootstrap_value, bootstrap_q)]
    t_index = tf.range(s)[:, None]                                    # [S, 1]
    total = tf.zeros_like(reward[1:])
    alive = tf.ones_like(terminated[1:])
    scale = 1.0
    for i in range(int(n_step)):
        r_i, term_i, trunc_i, bv_i, q_i = (x[i + 1:i + 1 + s] for x in padded)
        active = tf.logical_and(alive, t_index + i < s)
        total += tf.where(active, scale * r_i, 0.0)
        ended = tf.logical_or(term_i, trunc_i)
        total += tf.where(tf.logical_and(active, trunc_i), scale * discount * bv_i, 0.0)
        bootstrap = tf.logical_and(active, tf.logical_not(ended))
        if i < n_step - 1:          # the window's last step: i = k - 1 with k = min(n, S - j)
            bootstrap = tf.logical_and(bootstrap, t_index + i == s - 1)
        total += tf.where(bootstrap, scale * discount * q_i, 0.0)
        alive = tf.logical_and(alive, tf.logical_not(ended))
        scale *= discount
    return total


def _select(q, action) -> tf.Tensor:
    """q [..., A], action [...] -> q[..., action]."""
    q = tf.convert_to_tensor(q, tf.float32)
    return tf.reduce_sum(q * tf.one_hot(tf.cast(action, tf.int32), tf.shape(q)[-1], dtype=tf.float32), axis=-1)


def sequence_td_errors(q_online, q_target, action, reward, terminated, truncated, bootstrap_value,
                       burn_in: int, discount: float, n_step: int,
                       rescaling_epsilon: Optional[float] = 1e-3, max_abs_reward: float = 0.0) -> tuple:
    """n-step double-Q TD errors of the trained part of sequences.

    Args (time-major, L = burn_in + T + 1 steps, B sequences):
      q_online, q_target: [L, B, A] Q-values (h units when rescaling) of the online and the
        target network; rows [0, burn_in) are ignored.
      action [L, B]; reward, terminated, truncated, bootstrap_value [L, B] (the unroll's).
      burn_in: steps skipped at the start.
      rescaling_epsilon: eps of h; None: no value rescaling (h = identity).
      max_abs_reward: rewards clipped to +-this in the targets (0: off).

    With a*_s = argmax_a q_online[s], bootstrap_q[s] = h^-1(q_target[s, a*_s]) and G the
    ``n_step_targets`` of steps burn_in .. L-1:
      targets_t = h(G_t),  q_taken_t = q_online[t, action[t]],  td_t = targets_t - q_taken_t
    for t = burn_in .. L-2. Returns (td, targets, q_taken), each [T, B]; targets carry no gradient.
    """
    rescale = rescaling_epsilon is not None
    q_online = tf.convert_to_tensor(q_online, tf.float32)[burn_in:]
    q_target = tf.convert_to_tensor(q_target, tf.float32)[burn_in:]
    action = tf.convert_to_tensor(action)[burn_in:]
    reward = tf.cast(tf.convert_to_tensor(reward), tf.float32)[burn_in:]
    if max_abs_reward > 0:
        reward = tf.clip_by_value(reward, -max_abs_reward, max_abs_reward)
    best = tf.argmax(q_online, axis=-1, output_type=tf.int32)
    bootstrap_q = _select(q_target, best)
    if rescale:
        bootstrap_q = inverse_value_rescale(bootstrap_q, rescaling_epsilon)
    returns = n_step_targets(reward, tf.convert_to_tensor(terminated)[burn_in:],
                             tf.convert_to_tensor(truncated)[burn_in:],
                             tf.convert_to_tensor(bootstrap_value)[burn_in:], bootstrap_q, discount, n_step)
    targets = tf.stop_gradient(value_rescale(returns, rescaling_epsilon) if rescale else returns)
    q_taken = _select(q_online[:-1], action[:-1])
    return targets - q_taken, targets, q_taken


def sequence_priorities(td, eta: float = 0.9) -> tf.Tensor:
    """td [T, B] -> [B]: eta * max_t |td| + (1 - eta) * mean_t |td| (R2D2's priority mix)."""
    a = tf.abs(tf.convert_to_tensor(td, tf.float32))
    return eta * tf.reduce_max(a, axis=0) + (1.0 - eta) * tf.reduce_mean(a, axis=0)


# -- the acting policy ---------------------------------------------------------------------------

class R2D2Policy:
    """The step-streaming service's policy: the serving network, one LSTM step per call,
    epsilon-greedy per env (``R2D2ActingConfig``). ``act`` and ``value`` run concrete
    ``tf.function``s traced once here; the exploration draws come from a seeded NumPy
    generator (``rng``, saved with the learner's checkpoints).

    The epsilon ladder spans the ``num_train_envs`` local training envs (ids [0, N)) and,
    after them, the ``num_remote`` env ids from ``remote_base`` that the service leases to
    remote actors (remote id r takes rung N + r - remote_base when it trains)."""

    def __init__(self, network: R2D2Network, num_train_envs: int, acting: R2D2ActingConfig,
                 rescaling_epsilon: Optional[float] = 1e-3, seed: int = 0, remote_base: int = 0,
                 num_remote: int = 0):
        self.network = network
        self.observation_shape = network.observation_shape
        self.observation_dtype = network.observation_dtype
        self.action_shape = ()
        self.action_dtype = np.dtype(np.int32)
        self.num_actions = network.num_actions
        self.num_train_envs = int(num_train_envs)
        self.remote_base, self.num_remote = int(remote_base), int(num_remote)
        self.train_epsilons = training_epsilons(self.num_train_envs + self.num_remote, acting.epsilon_base,
                                                acting.epsilon_alpha)
        self.eval_epsilon = float(acting.eval_epsilon)
        self.rng = np.random.default_rng([seed, 13])
        self._lock = threading.Lock()
        u = network.lstm_size
        obs_spec = tf.TensorSpec([None, *self.observation_shape], tf.as_dtype(self.observation_dtype),
                                 name="observation")
        specs = [obs_spec, tf.TensorSpec([None], tf.int32, name="prev_action"),
                 tf.TensorSpec([None], tf.float32, name="prev_reward"),
                 tf.TensorSpec([None, u], tf.float32, name="h"), tf.TensorSpec([None, u], tf.float32, name="c")]

        def value(observation):
            n = tf.shape(observation)[0]
            h, c = network.initial_state(n)
            q, _, _ = network.step(observation, tf.zeros([n], tf.int32), tf.zeros([n], tf.float32), h, c)
            best = tf.reduce_max(q, axis=-1)
            return inverse_value_rescale(best, rescaling_epsilon) if rescaling_epsilon is not None else best

        self._step = tf.function(network.step, input_signature=specs).get_concrete_function()
        self._value = tf.function(value, input_signature=[obs_spec]).get_concrete_function()

    def initial_state(self, num_envs: int) -> dict:
        return {k: np.zeros((num_envs, self.network.lstm_size), np.float32) for k in STATE_KEYS}

    def epsilons(self, env_ids, evaluation) -> np.ndarray:
        """[B] the exploration rate of each row: eval_epsilon for evaluation rows (or env ids
        of no training env), else the env's rung of the ladder."""
        evaluation = np.asarray(evaluation, bool).reshape(-1)
        rungs = len(self.train_epsilons)
        if env_ids is None or rungs < 1:
            ids = np.zeros(len(evaluation), np.int64)
            evaluation = evaluation | (rungs < 1)
        else:
            ids = np.asarray(env_ids, np.int64).reshape(-1)
            remote = (ids >= self.remote_base) & (ids < self.remote_base + self.num_remote)
            ids = np.where(remote, self.num_train_envs + ids - self.remote_base,
                           np.where(ids < self.num_train_envs, ids, -1))
        train = ~evaluation & (ids >= 0) & (ids < rungs)
        eps = np.full(len(evaluation), self.eval_epsilon, np.float64)
        if train.any():
            eps[train] = self.train_epsilons[ids[train]]
        return eps

    def act(self, observation, prev_action, prev_reward, state: dict, evaluation, env_ids=None) -> tuple:
        """observation [B, *obs], prev_action [B], prev_reward [B] f32, state {"h", "c"} [B, U],
        evaluation [B] bool, env_ids [B] -> (action [B] i32 epsilon-greedy,
        {"q_values": [B, A] f32, "prev_action": [B] i32}, {"h", "c"} [B, U])."""
        observation = np.asarray(observation).astype(self.observation_dtype, copy=False)
        prev_action = np.asarray(prev_action).astype(np.int32, copy=False).reshape(-1)
        q, h, c = self._step(tf.constant(observation), tf.constant(prev_action),
                             tf.constant(np.asarray(prev_reward, np.float32).reshape(-1)),
                             tf.constant(np.asarray(state["h"], np.float32)),
                             tf.constant(np.asarray(state["c"], np.float32)))
        q = q.numpy()
        b = len(q)
        eps = self.epsilons(env_ids, evaluation)
        with self._lock:
            explore = self.rng.random(b) < eps
            random_actions = self.rng.integers(0, self.num_actions, b)
        action = np.where(explore, random_actions, np.argmax(q, axis=-1)).astype(np.int32)
        outputs = {"q_values": q.astype(np.float32, copy=False), "prev_action": prev_action.copy()}
        return action, outputs, {"h": h.numpy(), "c": c.numpy()}

    def value(self, observation) -> np.ndarray:
        """observation [M, *obs] -> [M] f32: h^-1(max_a Q) from a zero state (truncation
        bootstrap; see the module docstring for the approximation)."""
        observation = np.asarray(observation).astype(self.observation_dtype, copy=False)
        return self._value(tf.constant(observation)).numpy().astype(np.float32, copy=False)


# -- the learner ---------------------------------------------------------------------------------

def replay_spec(network: R2D2Network, sequence_length: int) -> dict:
    """ItemReplay spec of one stored sequence of L steps."""
    length, u = int(sequence_length), network.lstm_size
    return {"observation": ((length, *network.observation_shape), network.observation_dtype),
            "action": ((length,), np.int32), "prev_action": ((length,), np.int32),
            "reward": ((length,), np.float32), "terminated": ((length,), bool),
            "truncated": ((length,), bool), "bootstrap_value": ((length,), np.float32),
            "state_h": ((u,), np.float32), "state_c": ((u,), np.float32)}


class R2D2Learner(CheckpointedLearner):
    """Recurrent replay distributed DQN on step-streaming unrolls.

    Owns the online, target and serving networks, Adam, the step counter and the prioritized
    sequence replay the streaming service fills through ``sink``; ``policy`` is the
    ``R2D2Policy`` over the serving network. Checkpoints (``CheckpointedLearner``) hold the
    networks, the optimiser, the step, the policy's generator and the whole replay.
    """

    ALGO = ALGO
    STATE_JSON = "learner.json"

    def __init__(self, settings, descriptor, context: Optional[core.RunContext] = None):
        if not isinstance(settings.config, R2D2Config):
            raise ConfigError(f"R2D2Learner needs an R2D2Config, got {type(settings.config).__name__}")
        self.settings = settings
        self.config: R2D2Config = settings.config
        self.descriptor = descriptor
        self.context = context or core.RunContext(settings.seed)
        t, r = self.config.training, self.config.replay
        self.training_config = t
        self.num_train_envs = settings.num_actors * settings.envs_per_actor
        self.rescaling_epsilon = t.value_rescaling_epsilon if t.value_rescaling else None
        seed = settings.seed
        self.online = make_network(descriptor, self.config.network, seed=seed, name="r2d2_online")
        self.target = make_network(descriptor, self.config.network, seed=seed, name="r2d2_target")
        self.serving = make_network(descriptor, self.config.network, seed=seed, name="r2d2_serving")
        self.policy = R2D2Policy(self.serving, self.num_train_envs, self.config.acting,
                                 self.rescaling_epsilon, seed=seed,
                                 remote_base=settings.total_envs, num_remote=settings.remote_envs)
        self.sequence_length = t.sequence_length
        self.replay = ItemReplay(r.capacity, replay_spec(self.online, self.sequence_length),
                                 priority_exponent=r.priority_exponent,
                                 importance_sampling_exponent=r.importance_sampling_exponent,
                                 samples_per_insert=r.samples_per_insert, min_size=r.min_size, seed=seed)
        self.replay.check_batch_size(t.batch_size)
        self._step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.optimizer = make_optimizer(t.learning_rate, epsilon=t.adam_epsilon)
        self._variables = list(self.online.trainable_variables)
        self.optimizer.build(self._variables)
        self.checkpoint = tf.train.Checkpoint(network=self.online, target_network=self.target,
                                              optimizer=self.optimizer, step=self._step)
        self._copy_serving = variable_copier(self.online.variables, self.serving.variables)
        self._copy_target = variable_copier(self.online.variables, self.target.variables)
        self._train_step = self._make_train_step()
        self._priority_fn = self._make_priority_fn()
        self.last_sample: Optional[tuple] = None     # (indices, new priorities) of the last step
        self.sequences_trained = 0
        self._copy_target()
        self.copy_to_serving()

    # -- data ------------------------------------------------------------------------------------
    def _make_priority_fn(self):
        t = self.training_config
        eta = self.config.replay.priority_eta
        a = self.online.num_actions

        def priority(q_values, action, reward, terminated, truncated, bootstrap_value):
            td, _, _ = sequence_td_errors(q_values, q_values, action, reward, terminated, truncated,
                                          bootstrap_value, t.burn_in, t.discount, t.n_step,
                                          self.rescaling_epsilon, t.max_abs_reward)
            return sequence_priorities(td, eta)

        signature = [tf.TensorSpec([None, None, a], tf.float32), tf.TensorSpec([None, None], tf.int32),
                     tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None, None], tf.bool),
                     tf.TensorSpec([None, None], tf.bool), tf.TensorSpec([None, None], tf.float32)]
        return tf.function(priority, input_signature=signature).get_concrete_function()

    def initial_priority(self, unroll: dict) -> float:
        """The sequence's priority from the behaviour Q-values stored in it (used as both the
        online and the target values of the double-Q targets)."""
        def col(k, dtype):
            return tf.constant(np.asarray(unroll[k]).astype(dtype, copy=False)[:, None])
        p = self._priority_fn(col("q_values", np.float32), col("action", np.int32), col("reward", np.float32),
                              col("terminated", bool), col("truncated", bool), col("bootstrap_value", np.float32))
        return max(float(p.numpy()[0]), MIN_PRIORITY)

    def sink(self, unroll: dict) -> bool:
        """Stores one unroll (L = burn_in + unroll_length + 1 steps) with its initial priority;
        blocks while the replay ratio says the learner is behind; False once closed."""
        length = len(unroll["reward"])
        if length != self.sequence_length:
            raise ValueError(f"unroll of {length} steps; burn_in + unroll_length + 1 = {self.sequence_length}")
        item = {"observation": np.asarray(unroll["observation"])[None],
                "action": np.asarray(unroll["action"], np.int32)[None],
                "prev_action": np.asarray(unroll["prev_action"], np.int32)[None],
                "reward": np.asarray(unroll["reward"], np.float32)[None],
                "terminated": np.asarray(unroll["terminated"], bool)[None],
                "truncated": np.asarray(unroll["truncated"], bool)[None],
                "bootstrap_value": np.asarray(unroll["bootstrap_value"], np.float32)[None],
                "state_h": np.asarray(unroll["state/h"], np.float32)[None],
                "state_c": np.asarray(unroll["state/c"], np.float32)[None]}
        return self.replay.add(item, np.array([self.initial_priority(unroll)]))

    # -- training --------------------------------------------------------------------------------
    def _make_train_step(self):
        t = self.training_config
        online, target, optimizer = self.online, self.target, self.optimizer
        eta = self.config.replay.priority_eta
        burn_in, length, u, a = t.burn_in, self.sequence_length, online.lstm_size, online.num_actions
        signature = [
            tf.TensorSpec([None, length, *online.observation_shape], tf.as_dtype(online.observation_dtype)),
            tf.TensorSpec([None, length], tf.int32), tf.TensorSpec([None, length], tf.int32),
            tf.TensorSpec([None, length], tf.float32), tf.TensorSpec([None, length], tf.bool),
            tf.TensorSpec([None, length], tf.bool), tf.TensorSpec([None, length], tf.float32),
            tf.TensorSpec([None, u], tf.float32), tf.TensorSpec([None, u], tf.float32),
            tf.TensorSpec([None], tf.float32)]

        def time_major(x):
            rank = len(x.shape)
            return tf.transpose(x, [1, 0] + list(range(2, rank)))

        def train_step(observation, action, prev_action, reward, terminated, truncated, bootstrap_value,
                       state_h, state_c, weights):
            observation, action, prev_action = time_major(observation), time_major(action), time_major(prev_action)
            reward, terminated, truncated = time_major(reward), time_major(terminated), time_major(truncated)
            bootstrap_value = time_major(bootstrap_value)
            reset = tf.logical_or(terminated, truncated)            # an episode starts at this step
            prev_reward = tf.where(reset, 0.0, reward)
            inputs = (observation, prev_action, prev_reward, reset)
            online_state = target_state = (state_h, state_c)
            if burn_in:
                prefix = tuple(x[:burn_in] for x in inputs)
                _, online_state = online.unroll(*prefix, *online_state)
                _, target_state = target.unroll(*prefix, *target_state)
                online_state = tuple(tf.stop_gradient(s) for s in online_state)
            suffix = tuple(x[burn_in:] for x in inputs)
            q_target, _ = target.unroll(*suffix, *target_state)
            q_target = tf.stop_gradient(q_target)
            batch = tf.shape(reward)[1]
            pad = tf.zeros([burn_in, batch, a], tf.float32)
            with tf.GradientTape() as tape:
                q_online, _ = online.unroll(*suffix, *online_state)
                td, targets, q_taken = sequence_td_errors(
                    tf.concat([pad, q_online], 0), tf.concat([pad, q_target], 0), action, reward, terminated,
                    truncated, bootstrap_value, burn_in, t.discount, t.n_step, self.rescaling_epsilon,
                    t.max_abs_reward)
                per_sequence = 0.5 * tf.reduce_sum(tf.square(td), axis=0)
                loss = tf.reduce_mean(weights * per_sequence)
            grads = tape.gradient(loss, self._variables)
            grad_norm = tf.linalg.global_norm(grads)
            if t.gradient_clip_norm > 0:
                grads, _ = tf.clip_by_global_norm(grads, t.gradient_clip_norm, use_norm=grad_norm)
            optimizer.apply_gradients(zip(grads, self._variables))
            self._step.assign_add(1)
            priorities = sequence_priorities(td, eta)
            metrics = {"loss/total": loss,
                       "td/abs_mean": tf.reduce_mean(tf.abs(td)),
                       "q/mean": tf.reduce_mean(q_online),
                       "q/taken_mean": tf.reduce_mean(q_taken),
                       "q/target_mean": tf.reduce_mean(targets),
                       "replay/priority_mean": tf.reduce_mean(priorities),
                       "replay/importance_weight_mean": tf.reduce_mean(weights),
                       "training/grad_norm": grad_norm,
                       "data/episode_ends": tf.reduce_sum(tf.cast(reset[burn_in + 1:], tf.float32))}
            return metrics, priorities

        return tf.function(train_step, input_signature=signature, autograph=False)

    def train_on(self, indices, items: dict, weights) -> dict:
        """One update on sampled sequences (``ItemReplay.sample``'s output); refreshes their
        priorities; returns float metrics."""
        metrics, priorities = self._train_step(
            tf.constant(items["observation"]), tf.constant(items["action"]), tf.constant(items["prev_action"]),
            tf.constant(items["reward"]), tf.constant(items["terminated"]), tf.constant(items["truncated"]),
            tf.constant(items["bootstrap_value"]), tf.constant(items["state_h"]), tf.constant(items["state_c"]),
            tf.constant(np.asarray(weights, np.float32)))
        priorities = np.maximum(priorities.numpy().astype(np.float64), MIN_PRIORITY)
        self.replay.update_priorities(indices, priorities)
        self.last_sample = (np.asarray(indices), priorities)
        self.sequences_trained += len(priorities)
        step = self.training_step
        if step % self.training_config.target_update_period == 0:
            self._copy_target()
        out = {k: float(v) for k, v in metrics.items()}
        eps = self.policy.train_epsilons
        out.update({"replay/size": float(len(self.replay)),
                    "training/learning_rate": float(self.training_config.learning_rate),
                    "epsilon/train_max": float(eps.max()) if len(eps) else 0.0,
                    "epsilon/train_min": float(eps.min()) if len(eps) else 0.0,
                    "epsilon/eval": self.policy.eval_epsilon})
        return out

    def step(self) -> Optional[dict]:
        """One update if the replay ratio and min size allow a batch within ~0.1 s, else None."""
        sample = self.replay.sample(self.training_config.batch_size, timeout=0.1)
        if sample is None:
            return None
        indices, items, weights = sample
        return self.train_on(indices, items, weights)

    @property
    def training_step(self) -> int:
        return int(self._step.numpy())

    # -- weights and checkpoints -----------------------------------------------------------------
    def copy_to_serving(self) -> None:
        self._copy_serving()

    def learner_state(self) -> dict:
        return {"policy_rng": self.policy.rng.bit_generator.state, "sequences_trained": self.sequences_trained,
                "config": to_dict(self.config)}

    def load_learner_state(self, state: dict) -> None:
        if "policy_rng" in state:
            self.policy.rng.bit_generator.state = state["policy_rng"]
        self.sequences_trained = int(state.get("sequences_trained", 0))

    def init_parts(self) -> dict:
        return {"network": self.online}

    def save_extra(self, directory: str) -> None:
        self.replay.save(directory)

    def restore_extra(self, directory: str) -> None:
        self.replay.restore(directory)

    def init_from(self, path: str) -> str:
        """Online weights from another R2D2 run's checkpoint; the target network starts as
        their copy (optimiser, step and replay start afresh)."""
        ckpt_dir = super().init_from(path)
        self._copy_target()
        return ckpt_dir

    def export(self, directory: str) -> None:
        """Recurrent SavedModel: ``policy(observation, prev_action, prev_reward, state_h, state_c)
        -> {"action" (greedy argmax Q), "q_values", "next_state_h", "next_state_c"}``, plus
        ``muzero_export.json`` (algo "r2d2") and ``run.json``."""
        from muzero.algorithms.policy_export import action_spec_of, export_policy, write_run_json
        net = self.online

        def policy_fn(observation, prev_action, prev_reward, state):
            q, h, c = net.step(observation, prev_action, prev_reward, state["h"], state["c"])
            return {"action": tf.argmax(q, axis=-1, output_type=tf.int32), "q_values": q,
                    "next_state_h": h, "next_state_c": c}

        export_policy(directory, net, policy_fn, net.observation_shape, net.observation_dtype,
                      action_spec_of(self.descriptor), ALGO,
                      extra={"network": dict(to_dict(self.config.network), torso_kind=net.torso_kind,
                                             num_parameters=net.num_parameters()),
                             "training_step": self.training_step},
                      state_spec=net.state_spec)
        write_run_json(directory, self.settings.env, dict(self.settings.env_options))

    # -- run-loop hooks --------------------------------------------------------------------------
    def progress(self) -> dict:
        return {"replay_sequences": len(self.replay)}

    def stop_limiting(self) -> None:
        self.replay.stop_limiting()

    def close(self) -> None:
        self.replay.close()
