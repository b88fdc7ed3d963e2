"""V-trace (IMPALA) learning: the targets, the loss, the learner and the acting policy.

Pure functions (TensorFlow, time-major ``[T, B]``):

    vtrace_targets(behaviour_logp, target_logp, rewards, discounts, values, bootstrap_value,
                   clip_rho, clip_pg_rho, lambda_) -> VTraceReturns(vs, pg_advantages)
    transition_rewards_and_discounts(reward, terminated, truncated, bootstrap_value, discount,
                                     max_abs_reward) -> (rewards [T, B], discounts [T, B])
    policy_gradient_loss(logits, actions, advantages), entropy(logits), baseline_loss(vs, values)
    vtrace_loss(logits, baseline, batch, training, entropy_cost) -> (total, metrics)

``VTraceLearner`` (a ``muzero.core.Learner``) owns the trained and serving networks, the
optimiser, the step counter, a NumPy RNG and the ``UnrollQueue`` the step-streaming service
fills. ``VTracePolicy`` is what that service calls to act: the serving network behind
concrete ``tf.function``s, sampling server-side in one batched call.

Unrolls (``muzero.core``): T + 1 steps per env, time-major. Transition t -> t+1 (t < T)
has action ``action[t]``, reward ``reward[t+1]`` and ends the episode when
``terminated[t+1]`` or ``truncated[t+1]``. The learner runs its network over all T + 1
observations: ``V(x_T)`` bootstraps the last transition (SEED's convention).

Truncation (time limits). The episode was cut at t+1 and ``bootstrap_value[t+1]`` is the
*behaviour* network's value of its final observation (observation[t+1] already shows the
next episode). The transition is treated as terminal (discount 0, so nothing flows back
from the next episode and the trace stops there) with its reward augmented by
``discount * bootstrap_value[t+1]``. This is the exact one-step target except that the
final state is valued by the acting network at acting time instead of the learner's
current network (off by at most one publish interval), and that no importance weight is
applied beyond that state (there is no action taken there).

Imports NumPy, TensorFlow and this package.
"""
from __future__ import annotations

import collections
from typing import Optional

import numpy as np
import tensorflow as tf

from muzero import core
from muzero.algorithms.tf_learner import CheckpointedLearner
from muzero.algorithms.unroll_queue import UnrollQueue
from muzero.algorithms.vtrace.config import VTraceConfig, VTraceTrainingConfig
from muzero.algorithms.vtrace.networks import PolicyValueNetwork, make_network
from muzero.config import ConfigError
from muzero.network import optimizers
from muzero.network.layers import variable_copier
from muzero.network.optimizers import learning_rate_schedule, rate_at

ALGO = "vtrace"

# Unroll keys the learner reads (the service's unrolls carry more, e.g. baseline, env_id).
UNROLL_KEYS = ("observation", "reward", "terminated", "truncated", "bootstrap_value", "action",
               "policy_logits")

VTraceReturns = collections.namedtuple("VTraceReturns", ["vs", "pg_advantages"])


# -- pure functions ------------------------------------------------------------------------------

def action_log_probs(logits, actions) -> tf.Tensor:
    """log pi(a) of a categorical policy. logits [..., A] f32, actions [...] int -> [...] f32."""
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(actions, tf.int32),
                                                           logits=logits)


def entropy(logits) -> tf.Tensor:
    """H(softmax(logits)) in nats. logits [..., A] -> [...]."""
    log_p = tf.nn.log_softmax(logits)
    return -tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1)


def vtrace_targets(behaviour_logp, target_logp, rewards, discounts, values, bootstrap_value,
                   clip_rho: float = 1.0, clip_pg_rho: float = 1.0, lambda_: float = 1.0) -> VTraceReturns:
    """V-trace value targets and policy-gradient advantages (Espeholt et al. 2018, eq. 1).

    Args (time-major, T steps, B envs):
      behaviour_logp: [T, B] log mu(a_t | x_t) of the acting policy.
      target_logp: [T, B] log pi(a_t | x_t) of the learner's policy.
      rewards: [T, B] r_t of transition t -> t+1.
      discounts: [T, B] gamma_t of transition t -> t+1 (0 where the episode ended).
      values: [T, B] V(x_t) of the learner's network.
      bootstrap_value: [B] V(x_T).
      clip_rho: rho-bar; clip_pg_rho: the advantages' rho clip; lambda_: trace decay.

    With rho_t = min(clip_rho, pi/mu), c_t = lambda_ * min(1, pi/mu),
    delta_t = rho_t * (r_t + gamma_t V(x_{t+1}) - V(x_t)) (V(x_T) = bootstrap_value):

      v_t - V(x_t) = delta_t + gamma_t c_t (v_{t+1} - V(x_{t+1})),   v_T = V(x_T)
      pg_advantage_t = min(clip_pg_rho, pi/mu) * (r_t + gamma_t v_{t+1} - V(x_t))

    Returns VTraceReturns(vs [T, B], pg_advantages [T, B]), both without gradient.
    """
    f32 = tf.float32
    behaviour_logp, target_logp = tf.cast(behaviour_logp, f32), tf.cast(target_logp, f32)
    rewards, discounts = tf.cast(rewards, f32), tf.cast(discounts, f32)
    values, bootstrap_value = tf.cast(values, f32), tf.cast(bootstrap_value, f32)
    rhos = tf.exp(target_logp - behaviour_logp)
    clipped_rhos = tf.minimum(tf.cast(clip_rho, f32), rhos)
    cs = tf.cast(lambda_, f32) * tf.minimum(1.0, rhos)
    values_next = tf.concat([values[1:], bootstrap_value[None]], axis=0)
    deltas = clipped_rhos * (rewards + discounts * values_next - values)

    def backward(acc, inputs):
        delta, discount, c = inputs
        return delta + discount * c * acc

    vs_minus_v = tf.scan(backward, (deltas, discounts, cs), initializer=tf.zeros_like(bootstrap_value),
                         reverse=True)
    vs = vs_minus_v + values
    vs_next = tf.concat([vs[1:], bootstrap_value[None]], axis=0)
    pg_rhos = tf.minimum(tf.cast(clip_pg_rho, f32), rhos)
    pg_advantages = pg_rhos * (rewards + discounts * vs_next - values)
    return VTraceReturns(tf.stop_gradient(vs), tf.stop_gradient(pg_advantages))


def transition_rewards_and_discounts(reward, terminated, truncated, bootstrap_value, discount: float,
                                     max_abs_reward: float = 0.0) -> tuple:
    """Per-transition rewards and discounts of an unroll batch.

    reward, terminated, truncated, bootstrap_value: [T+1, B] (step t: what arriving at t brought).
    Returns (rewards [T, B], discounts [T, B]) for transitions t -> t+1:
      rewards_t = clip(reward[t+1]) + (discount * bootstrap_value[t+1] if truncated[t+1] else 0)
      discounts_t = 0 if terminated[t+1] or truncated[t+1] else discount
    (clip: to [-max_abs_reward, max_abs_reward] when max_abs_reward > 0; the bootstrap term is
    a value and is not clipped).
    """
    rewards = tf.cast(reward[1:], tf.float32)
    if max_abs_reward > 0:
        rewards = tf.clip_by_value(rewards, -max_abs_reward, max_abs_reward)
    terminated = tf.cast(terminated[1:], tf.bool)
    truncated = tf.logical_and(tf.cast(truncated[1:], tf.bool), tf.logical_not(terminated))
    done = tf.logical_or(terminated, truncated)
    rewards = rewards + tf.where(truncated, discount * tf.cast(bootstrap_value[1:], tf.float32), 0.0)
    discounts = tf.where(done, 0.0, tf.cast(discount, tf.float32) * tf.ones_like(rewards))
    return rewards, discounts


def policy_gradient_loss(logits, actions, advantages) -> tf.Tensor:
    """-mean(log pi(a_t | x_t) * A_t); minimising it raises log pi where A_t > 0.
    logits [T, B, A], actions [T, B], advantages [T, B] (no gradient taken) -> scalar."""
    return -tf.reduce_mean(action_log_probs(logits, actions) * tf.stop_gradient(advantages))


def baseline_loss(vs, values) -> tf.Tensor:
    """0.5 * mean((v_s - V(x_t))^2). vs, values [T, B] -> scalar (times baseline_cost outside)."""
    return 0.5 * tf.reduce_mean(tf.square(tf.stop_gradient(vs) - values))


def entropy_loss(logits) -> tf.Tensor:
    """-mean(H(pi(. | x_t))); minimising it (times a positive cost) raises the entropy."""
    return -tf.reduce_mean(entropy(logits))


def vtrace_loss(logits, baseline, batch: dict, training: VTraceTrainingConfig, entropy_cost) -> tuple:
    """The V-trace loss of one batch.

    Args:
      logits: [T+1, B, A] the learner's policy logits on every observation of the unrolls.
      baseline: [T+1, B] the learner's values of those observations.
      batch: time-major unroll tensors: reward, terminated, truncated, bootstrap_value [T+1, B],
        action [T+1, B], policy_logits [T+1, B, A] (behaviour).
      training: the loss settings; entropy_cost: a scalar (a tensor when learnt).

    Returns (total loss, {name: scalar tensor}) with
      total = policy + baseline_cost * baseline + entropy_cost * (-mean entropy).
    """
    rewards, discounts = transition_rewards_and_discounts(
        batch["reward"], batch["terminated"], batch["truncated"], batch["bootstrap_value"],
        training.discount, training.max_abs_reward)
    actions = batch["action"][:-1]
    target_logits = logits[:-1]
    target_logp = action_log_probs(target_logits, actions)
    behaviour_logp = action_log_probs(tf.cast(batch["policy_logits"][:-1], tf.float32), actions)
    values = baseline[:-1]
    returns = vtrace_targets(behaviour_logp, target_logp, rewards, discounts, values, baseline[-1],
                             training.clip_rho_threshold, training.clip_pg_rho_threshold, training.lambda_)
    policy = policy_gradient_loss(target_logits, actions, returns.pg_advantages)
    value = training.baseline_cost * baseline_loss(returns.vs, values)
    mean_entropy = tf.reduce_mean(entropy(target_logits))
    ent = tf.stop_gradient(entropy_cost) * -mean_entropy
    total = policy + value + ent
    metrics = {
        "loss/policy": policy,
        "loss/baseline": value,
        "loss/entropy": ent,
        "policy/entropy": mean_entropy,
        "policy/entropy_cost": tf.convert_to_tensor(entropy_cost, tf.float32),
        "policy/kl_behaviour": tf.reduce_mean(behaviour_logp - target_logp),
        "policy/rho_mean": tf.reduce_mean(tf.exp(target_logp - behaviour_logp)),
        "value/baseline_mean": tf.reduce_mean(values),
        "value/vs_mean": tf.reduce_mean(returns.vs),
        "value/advantage_mean": tf.reduce_mean(returns.pg_advantages),
    }
    return total, metrics


def stack_unrolls(unrolls: list, observation_dtype) -> dict:
    """Unroll dicts ([T+1, ...] each) -> time-major numpy batch {key: [T+1, B, ...]}."""
    missing = [k for k in UNROLL_KEYS if k not in unrolls[0]]
    if missing:
        raise ValueError(f"unrolls lack {missing}; they carry {sorted(unrolls[0])}")
    lengths = {len(u["reward"]) for u in unrolls}
    if len(lengths) != 1:
        raise ValueError(f"unrolls of different lengths in one batch: {sorted(lengths)}")
    batch = {k: np.stack([np.asarray(u[k]) for u in unrolls], axis=1) for k in UNROLL_KEYS}
    batch["observation"] = batch["observation"].astype(observation_dtype, copy=False)
    batch["reward"] = batch["reward"].astype(np.float32, copy=False)
    batch["bootstrap_value"] = batch["bootstrap_value"].astype(np.float32, copy=False)
    batch["terminated"] = batch["terminated"].astype(bool, copy=False)
    batch["truncated"] = batch["truncated"].astype(bool, copy=False)
    batch["action"] = batch["action"].astype(np.int32, copy=False)
    batch["policy_logits"] = batch["policy_logits"].astype(np.float32, copy=False)
    return batch


def make_optimizer(training: VTraceTrainingConfig):
    """Adam with a constant or linearly decaying (to 0) learning rate; returns (optimizer, lr_fn)."""
    schedule = learning_rate_schedule(training.learning_rate, training.lr_schedule, training.lr_decay_steps)
    optimizer = optimizers.make_optimizer(schedule, beta_1=training.adam_beta1, epsilon=training.adam_epsilon)
    return optimizer, lambda step: rate_at(schedule, step)


class EntropyCost(tf.Module):
    """The entropy coefficient: fixed, or learnt toward a target entropy (SEED's).

    Learnt: cost = exp(speed * p) with p initialised to log(entropy_cost) / speed and kept in
    [-20 / speed, 20 / speed]; its loss cost * stop_gradient(mean entropy - target) lowers
    the cost while the entropy is above the target and raises it below.
    """

    def __init__(self, training: VTraceTrainingConfig):
        super().__init__(name="entropy_cost")
        self.target = training.target_entropy
        self.speed = float(training.entropy_adjustment_speed)
        self.fixed = float(training.entropy_cost)
        self.param = None
        if self.target is not None:
            self.param = tf.Variable(np.log(self.fixed) / self.speed, dtype=tf.float32, name="log_cost")

    def __call__(self) -> tf.Tensor:
        if self.param is None:
            return tf.constant(self.fixed, tf.float32)
        return tf.exp(self.speed * self.param)

    def adjustment_loss(self, mean_entropy) -> tf.Tensor:
        if self.param is None:
            return tf.constant(0.0)
        return self() * tf.stop_gradient(mean_entropy - self.target)

    def clip(self) -> None:
        if self.param is not None:
            bound = 20.0 / self.speed
            self.param.assign(tf.clip_by_value(self.param, -bound, bound))


# -- the acting policy ---------------------------------------------------------------------------

class VTracePolicy:
    """The step-streaming service's policy: the *serving* network, sampled server-side.

    ``act`` and ``value`` run concrete ``tf.function``s traced once here (a plain
    tf.function call re-binds its arguments on every call). Feed-forward: the state is {}.
    """

    def __init__(self, network: PolicyValueNetwork, seed: int = 0):
        self.network = network
        self.observation_shape = network.observation_shape
        self.observation_dtype = network.observation_dtype
        self.action_shape = ()
        self.action_dtype = np.dtype(np.int32)
        self.num_actions = network.num_actions
        self._generator = tf.random.Generator.from_seed(seed)
        obs_spec = network.observation_spec
        flags_spec = tf.TensorSpec([None], tf.bool, name="evaluation")

        def act(observation, evaluation):
            logits, baseline = network(observation)
            uniform = self._generator.uniform(tf.shape(logits), minval=1e-20, maxval=1.0)
            gumbel = -tf.math.log(-tf.math.log(uniform))
            sampled = tf.argmax(logits + gumbel, axis=-1, output_type=tf.int32)
            greedy = tf.argmax(logits, axis=-1, output_type=tf.int32)
            return tf.where(evaluation, greedy, sampled), logits, baseline

        def value(observation):
            return network(observation)[1]

        self._act = tf.function(act, input_signature=[obs_spec, flags_spec]).get_concrete_function()
        self._value = tf.function(value, input_signature=[obs_spec]).get_concrete_function()

    def initial_state(self, num_envs: int) -> dict:
        return {}

    def act(self, observation, prev_action, prev_reward, state: dict, evaluation, env_ids=None) -> tuple:
        """observation [B, *obs], prev_action [B], prev_reward [B], state {}, evaluation [B] bool
        (env_ids unused) -> (action [B] int32 (argmax where evaluation, else sampled),
            {"policy_logits": [B, A] f32, "baseline": [B] f32}, {})."""
        del prev_action, prev_reward, state, env_ids
        observation = np.asarray(observation).astype(self.observation_dtype, copy=False)
        evaluation = np.asarray(evaluation, dtype=bool).reshape(-1)
        action, logits, baseline = self._act(tf.constant(observation), tf.constant(evaluation))
        return action.numpy(), {"policy_logits": logits.numpy(), "baseline": baseline.numpy()}, {}

    def value(self, observation) -> np.ndarray:
        """observation [M, *obs] -> baseline [M] f32."""
        observation = np.asarray(observation).astype(self.observation_dtype, copy=False)
        return self._value(tf.constant(observation)).numpy()


# -- the learner ---------------------------------------------------------------------------------

class VTraceLearner(CheckpointedLearner):
    """Trains on batches of ``batch_size`` unrolls from its ``UnrollQueue`` (on-policy)."""

    ALGO = ALGO
    STATE_JSON = "learner.json"   # RNG state and counters beside the model

    def __init__(self, settings, descriptor, context: Optional[core.RunContext] = None,
                 queue_capacity: Optional[int] = None):
        if not isinstance(settings.config, VTraceConfig):
            raise ConfigError(f"VTraceLearner needs a VTraceConfig, got {type(settings.config).__name__}")
        self.settings = settings
        self.config: VTraceConfig = settings.config
        self.training_config = self.config.training
        self.descriptor = descriptor
        self.context = context or core.RunContext(settings.seed)
        self.rng = np.random.default_rng(settings.seed)
        self.queue = UnrollQueue(queue_capacity or self.training_config.batch_size, self.context.stop_event)
        self.network = make_network(descriptor, self.config.network, seed=settings.seed)
        self.serving = make_network(descriptor, self.config.network, seed=settings.seed,
                                    name="vtrace_serving")
        self.observation_dtype = self.network.observation_dtype
        self._step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.entropy_cost = EntropyCost(self.training_config)
        self.optimizer, self._lr_fn = make_optimizer(self.training_config)
        self._variables = list(self.network.trainable_variables)
        if self.entropy_cost.param is not None:
            self._variables.append(self.entropy_cost.param)
        self.optimizer.build(self._variables)
        self.checkpoint = tf.train.Checkpoint(network=self.network, optimizer=self.optimizer,
                                              step=self._step, entropy_cost=self.entropy_cost)
        self._copy_weights = variable_copier(self.network.variables, self.serving.variables)
        self._train_step = self._make_train_step()
        self.unrolls_trained = 0
        self.copy_to_serving()

    # -- training ---------------------------------------------------------------------------------
    def _make_train_step(self):
        net, training, optimizer = self.network, self.training_config, self.optimizer
        obs_shape = list(net.observation_shape)
        a = net.num_actions
        signature = [
            tf.TensorSpec([None, None, *obs_shape], tf.as_dtype(self.observation_dtype), name="observation"),
            tf.TensorSpec([None, None], tf.float32, name="reward"),
            tf.TensorSpec([None, None], tf.bool, name="terminated"),
            tf.TensorSpec([None, None], tf.bool, name="truncated"),
            tf.TensorSpec([None, None], tf.float32, name="bootstrap_value"),
            tf.TensorSpec([None, None], tf.int32, name="action"),
            tf.TensorSpec([None, None, a], tf.float32, name="policy_logits"),
        ]

        def train_step(observation, reward, terminated, truncated, bootstrap_value, action, policy_logits):
            batch = {"reward": reward, "terminated": terminated, "truncated": truncated,
                     "bootstrap_value": bootstrap_value, "action": action, "policy_logits": policy_logits}
            time_batch = tf.shape(reward)
            flat_obs = tf.reshape(observation, tf.concat([[-1], tf.shape(observation)[2:]], axis=0))
            with tf.GradientTape() as tape:
                logits, baseline = net(flat_obs)
                logits = tf.reshape(logits, tf.concat([time_batch, [a]], axis=0))
                baseline = tf.reshape(baseline, time_batch)
                cost = self.entropy_cost()
                total, metrics = vtrace_loss(logits, baseline, batch, training, cost)
                adjustment = self.entropy_cost.adjustment_loss(metrics["policy/entropy"])
                loss = total + adjustment
            grads = tape.gradient(loss, self._variables)
            if training.gradient_clip_norm > 0:
                grads, grad_norm = tf.clip_by_global_norm(grads, training.gradient_clip_norm)
            else:
                grad_norm = tf.linalg.global_norm(grads)
            learning_rate = self._lr_fn(optimizer.iterations)
            optimizer.apply_gradients(zip(grads, self._variables))
            self.entropy_cost.clip()
            self._step.assign_add(1)
            metrics = dict(metrics)
            metrics["loss/total"] = total
            metrics["loss/entropy_adjustment"] = adjustment
            metrics["training/grad_norm"] = grad_norm
            metrics["training/learning_rate"] = tf.cast(learning_rate, tf.float32)
            return metrics

        return tf.function(train_step, input_signature=signature, autograph=False)

    def train_on(self, unrolls: list) -> dict:
        """One update on these unrolls (each [T+1, ...], same T); returns metrics (floats)."""
        batch = stack_unrolls(unrolls, self.observation_dtype)
        metrics = self._train_step(**{k: tf.constant(batch[k]) for k in UNROLL_KEYS})
        self.unrolls_trained += len(unrolls)
        out = {k: float(v) for k, v in metrics.items()}
        out["training/reward_mean"] = float(batch["reward"][1:].mean())
        return out

    @property
    def training_step(self) -> int:
        return int(self._step.numpy())

    def step(self) -> Optional[dict]:
        unrolls = self.queue.get_batch(self.training_config.batch_size, timeout=0.1)
        if unrolls is None:
            return None
        return self.train_on(unrolls)

    def make_policy(self, seed: Optional[int] = None) -> VTracePolicy:
        """The acting policy over the serving network (sampling seeded from the learner's RNG)."""
        if seed is None:
            seed = int(self.rng.integers(0, 2**31 - 1))
        return VTracePolicy(self.serving, seed=seed)

    def sink(self, unroll: dict) -> bool:
        """Where the service puts finished unrolls (blocks while the queue is full)."""
        return self.queue.put(unroll)

    def copy_to_serving(self) -> None:
        self._copy_weights()

    # -- checkpoints (save / restore / init_from: CheckpointedLearner) ---------------------------
    def learner_state(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "unrolls_trained": self.unrolls_trained}

    def load_learner_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.unrolls_trained = int(state.get("unrolls_trained", 0))

    def init_parts(self) -> dict:
        """Fine-tuning restores the network (not the optimiser, step or entropy cost)."""
        return {"network": self.network}

    def export(self, directory: str) -> None:
        from muzero.algorithms.policy_export import export_policy, write_run_json
        net = self.network

        def policy_fn(observation):
            logits, baseline = net(observation)
            return {"policy_logits": logits, "baseline": baseline}

        export_policy(directory, net, policy_fn, net.observation_shape, net.observation_dtype,
                      {"kind": "discrete", "num_actions": net.num_actions}, algo=ALGO,
                      extra={"network": {"torso": net.torso_kind, "num_parameters": net.num_parameters()},
                             "training_step": self.training_step})
        write_run_json(directory, self.settings.env, dict(self.settings.env_options))

    def progress(self) -> dict:
        return {"queue_unrolls": len(self.queue)}

    def close(self) -> None:
        self.queue.close()
