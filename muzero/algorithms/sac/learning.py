"""SAC's learning side: the acting policy, the update, and ``SACLearner``.

    unroll_transitions(unroll) -> {observation, action, reward, next_observation, discount, end}
    default_target_entropy(descriptor) -> float

``SACPolicy`` is the ``StreamingPolicy`` the step-streaming service runs: it samples from
the serving actor (deterministic tanh(mean) / argmax for evaluation envs) and scales
continuous actions into the env's bounds (which it declares, so the service clips and
counts anything outside them).

``SACLearner`` (a ``muzero.core.Learner``) turns each streamed unroll into transitions
(the next state of a transition that ended an episode is the observation it ended on, so
truncated transitions bootstrap from their real final state), optionally relabels whole
episodes with hindsight goals (``muzero.algorithms.her``), stores them in a uniform
``ItemReplay`` whose samples-per-insert ratio is ``replay_ratio`` updates per env step, and
``step()`` runs one update (critics, actor, temperature, Polyak targets) per batch. The
replay is saved with every checkpoint.

Imports NumPy, TensorFlow and the package's SAC, replay and HER modules.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import tensorflow as tf

import envs
from muzero.algorithms.her import EpisodeAssembler, HindsightRelabeller
from muzero.algorithms.item_replay import ItemReplay
from muzero.algorithms.sac.config import SACConfig
from muzero.algorithms.sac.networks import SACNetworks
from muzero.algorithms.tf_learner import CheckpointedLearner
from muzero.config import ConfigError
from muzero.network.layers import variable_copier
from muzero.network.optimizers import make_optimizer

ALGO = "sac"
_METRICS = ("loss/critic", "loss/actor", "loss/alpha", "alpha", "policy/entropy", "q/mean", "q/target_mean",
            "gradient_norm/critic", "gradient_norm/actor")


def default_target_entropy(descriptor) -> float:
    """-d for a d-dimensional box (Haarnoja et al. 2018); 0.98 * log(A) for A discrete actions
    (Christodoulou 2019)."""
    if descriptor.is_continuous:
        return -float(descriptor.action_shape[0])
    return 0.98 * math.log(descriptor.num_actions)


def unroll_transitions(unroll: dict) -> dict:
    """One streamed unroll ([T+1] steps, ``muzero.core`` format with ``final_observation``)
    -> its T transitions t -> t+1: observation [T, ...], action [T, ...], reward [T] f32,
    next_observation [T, ...] (``final_observation[t+1]``: the state the action led to, also
    when the episode ended there), terminated [T] bool and end [T] bool (the transition
    ended an episode, terminated or truncated)."""
    terminated = np.asarray(unroll["terminated"][1:], bool)
    return {"observation": np.asarray(unroll["observation"][:-1]),
            "action": np.asarray(unroll["action"][:-1]),
            "reward": np.asarray(unroll["reward"][1:], np.float32),
            "next_observation": np.asarray(unroll["final_observation"][1:]),
            "terminated": terminated,
            "end": terminated | np.asarray(unroll["truncated"][1:], bool)}


class SACPolicy:
    """Acting with the serving networks (a ``StreamingPolicy``)."""

    def __init__(self, networks: SACNetworks, descriptor, seed: int):
        self.networks = networks
        self.observation_shape = tuple(descriptor.observation_shape)
        self.observation_dtype = np.dtype(descriptor.observation_dtype)
        self.continuous = descriptor.is_continuous
        self.action_shape = tuple(descriptor.action_shape)
        self.action_dtype = np.dtype(np.float32 if self.continuous else np.int32)
        self.num_actions = 0 if self.continuous else int(descriptor.num_actions)
        if self.continuous:
            self.action_low = np.asarray(descriptor.action_low, np.float32)
            self.action_high = np.asarray(descriptor.action_high, np.float32)
        self._generator = tf.random.Generator.from_seed(seed)
        obs_spec = tf.TensorSpec([None, *self.observation_shape], tf.as_dtype(self.observation_dtype))
        flags = tf.TensorSpec([None], tf.bool)
        net = networks

        def act(observation, evaluation):
            if net.continuous:
                mean, log_std = net.actor(observation)
                noise = self._generator.normal(tf.shape(mean))
                unit = tf.tanh(tf.where(evaluation[:, None], mean, mean + tf.exp(log_std) * noise))
                return net.to_env_action(unit)
            logits = net.actor(observation)
            sampled = tf.random.stateless_categorical(logits, 1, self._generator.make_seeds(1)[:, 0])[:, 0]
            greedy = tf.argmax(logits, axis=-1)
            return tf.cast(tf.where(evaluation, greedy, sampled), tf.int32)

        def value(observation):
            if net.continuous:
                q1, q2 = net.q_values(observation, net.deterministic_unit_action(observation))
                return tf.minimum(q1, q2)
            q1, q2 = net.q_values(observation)
            probs = tf.nn.softmax(net.actor(observation))
            return tf.reduce_sum(probs * tf.minimum(q1, q2), axis=-1)

        self._act = tf.function(act, input_signature=[obs_spec, flags]).get_concrete_function()
        self._value = tf.function(value, input_signature=[obs_spec]).get_concrete_function()

    def initial_state(self, num_envs: int) -> dict:
        return {}

    def act(self, observation, prev_action, prev_reward, state, evaluation, env_ids=None) -> tuple:
        """-> (actions [B, d] f32 in the env's bounds / [B] i32, {}, {}): sampled, or
        deterministic (tanh(mean), argmax) where ``evaluation``."""
        observation = np.asarray(observation).astype(self.observation_dtype, copy=False)
        action = self._act(tf.constant(observation), tf.constant(np.asarray(evaluation, bool).reshape(-1)))
        return action.numpy(), {}, {}

    def value(self, observation) -> np.ndarray:
        """min_j Q_j at the deterministic action (the expected value under the policy for
        discrete actions), [M] f32. SAC bootstraps from stored final observations instead,
        so the service's bootstrap_value is informational."""
        observation = np.asarray(observation).astype(self.observation_dtype, copy=False)
        return self._value(tf.constant(observation)).numpy()


class SACLearner(CheckpointedLearner):
    """SAC with twin critics, Polyak targets, a learned temperature and uniform replay."""

    ALGO = ALGO
    STATE_JSON = "learner.json"

    def __init__(self, descriptor, config: SACConfig, seed: int = 0, env: Optional[str] = None,
                 env_options: Optional[dict] = None):
        self.descriptor = descriptor
        self.config = config
        t = config.training
        self.networks = SACNetworks(descriptor, config.network, seed=seed)
        self.serving = SACNetworks(descriptor, config.network, seed=seed, name="sac_serving")
        self.policy = SACPolicy(self.serving, descriptor, seed=seed + 1)
        self.target_entropy = (default_target_entropy(descriptor) if t.target_entropy is None
                               else float(t.target_entropy))
        self.rng = np.random.default_rng([seed, 13])
        self._noise = tf.random.Generator.from_seed(seed + 2)
        self.log_alpha = tf.Variable(math.log(t.initial_alpha), dtype=tf.float32, name="log_alpha")
        self._step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.actor_optimizer = make_optimizer(t.actor_learning_rate)
        self.critic_optimizer = make_optimizer(t.critic_learning_rate)
        self.alpha_optimizer = make_optimizer(t.alpha_learning_rate)
        self.actor_optimizer.build(self.networks.actor_variables)
        self.critic_optimizer.build(self.networks.critic_variables)
        self.alpha_optimizer.build([self.log_alpha])
        self.checkpoint = tf.train.Checkpoint(
            networks=self.networks, log_alpha=self.log_alpha, step=self._step, noise=self._noise,
            policy_noise=self.policy._generator,
            actor_optimizer=self.actor_optimizer, critic_optimizer=self.critic_optimizer,
            alpha_optimizer=self.alpha_optimizer)
        self._copy_weights = variable_copier(self.networks.acting_variables, self.serving.acting_variables)

        self.relabeller = None
        if t.her_relabels:
            if descriptor.goal_layout is None:
                raise ConfigError(f"training.her_relabels={t.her_relabels} needs a goal env (dict observations "
                                  f"with observation, achieved_goal, desired_goal); env {descriptor.name!r} is not one")
            reward_env = envs.make(env or descriptor.name, seed=seed, **(env_options or {}))
            self.relabeller = HindsightRelabeller(descriptor.goal_slices(), reward_env.compute_reward,
                                                  t.her_relabels, t.her_strategy, self.rng)
            self._reward_env = reward_env
        self.assembler = EpisodeAssembler()
        copies = 1 + t.her_relabels
        obs_spec = (tuple(descriptor.observation_shape), np.dtype(descriptor.observation_dtype))
        action_spec = (tuple(descriptor.action_shape), np.float32 if descriptor.is_continuous else np.int32)
        self.replay = ItemReplay(
            t.replay_capacity,
            {"observation": obs_spec, "action": action_spec, "reward": ((), np.float32),
             "next_observation": obs_spec, "discount": ((), np.float32)},
            samples_per_insert=t.replay_ratio * t.batch_size / copies, min_size=t.min_replay, seed=seed)
        self.replay.check_batch_size(t.batch_size)
        self.env_steps_inserted = 0
        self._train = self._make_train_step()

    # -- data ---------------------------------------------------------------------------------------
    def sink(self, unroll: dict) -> bool:
        """Stores an unroll's transitions (a goal env with HER: whole episodes, relabelled, once
        they end). Blocks while the learner is behind the replay ratio; False once closed."""
        tr = unroll_transitions(unroll)
        discount = np.where(tr["terminated"], 0.0, self.config.training.discount).astype(np.float32)
        items = {"observation": tr["observation"], "action": tr["action"], "reward": tr["reward"],
                 "next_observation": tr["next_observation"], "discount": discount}
        self.env_steps_inserted += len(discount)
        if self.relabeller is None:
            return self.replay.add(items)
        ok = True
        for episode in self.assembler.add(int(unroll["env_id"]), items, tr["end"], int(unroll.get("run_id", 0))):
            ok = self.replay.add(self.relabeller.relabel(episode)) and ok
        return ok

    # -- training ---------------------------------------------------------------------------------
    def _make_train_step(self):
        net, t = self.networks, self.config.training
        obs_spec = tf.TensorSpec([None, *net.observation_shape], tf.as_dtype(self.descriptor.observation_dtype))
        action_spec = (tf.TensorSpec([None, net.action_size], tf.float32) if net.continuous
                       else tf.TensorSpec([None], tf.int32))
        vec = tf.TensorSpec([None], tf.float32)
        target_entropy = self.target_entropy
        clip = t.gradient_clip_norm

        def apply(optimizer, loss_grads, variables):
            grads = loss_grads
            norm = tf.linalg.global_norm(grads)
            if clip > 0:
                grads, _ = tf.clip_by_global_norm(grads, clip, use_norm=norm)
            optimizer.apply_gradients(zip(grads, variables))
            return norm

        def train_step(observation, action, reward, next_observation, discount):
            alpha = tf.exp(self.log_alpha)
            # critics
            if net.continuous:
                next_unit, next_logp = net.sample(next_observation,
                                                  self._noise.normal(tf.shape(action)))
                tq1, tq2 = net.q_values(next_observation, next_unit, target=True)
                next_value = tf.minimum(tq1, tq2) - alpha * next_logp
            else:
                next_logits = net.actor(next_observation)
                next_logp_all = tf.nn.log_softmax(next_logits)
                tq1, tq2 = net.q_values(next_observation, target=True)
                next_value = tf.reduce_sum(tf.exp(next_logp_all) * (tf.minimum(tq1, tq2) - alpha * next_logp_all),
                                           axis=-1)
            y = tf.stop_gradient(t.reward_scale * reward + discount * next_value)
            with tf.GradientTape() as tape:
                if net.continuous:
                    q1, q2 = net.q_values(observation, net.to_unit_action(action))
                else:
                    q1_all, q2_all = net.q_values(observation)
                    q1 = tf.gather(q1_all, action, axis=1, batch_dims=1)
                    q2 = tf.gather(q2_all, action, axis=1, batch_dims=1)
                critic_loss = 0.5 * tf.reduce_mean(tf.square(q1 - y)) + 0.5 * tf.reduce_mean(tf.square(q2 - y))
            critic_norm = apply(self.critic_optimizer, tape.gradient(critic_loss, net.critic_variables),
                                net.critic_variables)
            # actor (critics held fixed: only the actor's variables are updated)
            with tf.GradientTape() as tape:
                if net.continuous:
                    unit, logp = net.sample(observation, self._noise.normal(tf.shape(action)))
                    a1, a2 = net.q_values(observation, unit)
                    actor_loss = tf.reduce_mean(alpha * logp - tf.minimum(a1, a2))
                    entropy = -tf.reduce_mean(logp)
                else:
                    logp_all = tf.nn.log_softmax(net.actor(observation))
                    probs = tf.exp(logp_all)
                    a1, a2 = net.q_values(observation)
                    actor_loss = tf.reduce_mean(tf.reduce_sum(probs * (alpha * logp_all - tf.minimum(a1, a2)),
                                                              axis=-1))
                    entropy = -tf.reduce_mean(tf.reduce_sum(probs * logp_all, axis=-1))
            actor_norm = apply(self.actor_optimizer, tape.gradient(actor_loss, net.actor_variables),
                               net.actor_variables)
            # temperature: alpha rises while the entropy is below the target
            with tf.GradientTape() as tape:
                alpha_loss = self.log_alpha * tf.stop_gradient(entropy - target_entropy)
            self.alpha_optimizer.apply_gradients([(tape.gradient(alpha_loss, self.log_alpha), self.log_alpha)])
            # Polyak averaging of the target critics
            for target, source in zip(net.target_variables, net.critic_variables):
                target.assign((1.0 - t.tau) * target + t.tau * source)
            self._step.assign_add(1)
            return tf.stack([critic_loss, actor_loss, alpha_loss, alpha, entropy, tf.reduce_mean(q1),
                             tf.reduce_mean(y), critic_norm, actor_norm])

        return tf.function(train_step, input_signature=[obs_spec, action_spec, vec, obs_spec, vec], autograph=False)

    def train_on(self, batch: dict) -> dict:
        """One update on a batch ``{observation, action, reward, next_observation, discount}``."""
        values = self._train(tf.constant(batch["observation"]), tf.constant(batch["action"]),
                             tf.constant(batch["reward"]), tf.constant(batch["next_observation"]),
                             tf.constant(batch["discount"])).numpy()
        return {name: float(v) for name, v in zip(_METRICS, values)}

    def step(self) -> Optional[dict]:
        """One update when the replay ratio and ``min_replay`` allow a batch (waits <= 0.1 s)."""
        sampled = self.replay.sample(self.config.training.batch_size, timeout=0.1)
        if sampled is None:
            return None
        metrics = self.train_on(sampled[1])
        metrics["loss/total"] = metrics["loss/critic"] + metrics["loss/actor"]   # for the progress line
        metrics["replay/size"] = float(len(self.replay))
        metrics["entropy/target"] = self.target_entropy
        return metrics

    @property
    def training_step(self) -> int:
        return int(self._step.numpy())

    # -- weights and checkpoints --------------------------------------------------------------------
    def copy_to_serving(self) -> None:
        self._copy_weights()

    def learner_state(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "env_steps_inserted": self.env_steps_inserted}

    def load_learner_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.env_steps_inserted = int(state.get("env_steps_inserted", 0))

    def init_parts(self) -> dict:
        return {"networks": self.networks}

    def save_extra(self, directory: str) -> None:
        self.replay.save(directory)

    def restore_extra(self, directory: str) -> None:
        self.replay.restore(directory)

    def export(self, directory: str) -> None:
        """SavedModel ``policy(observation) -> {"action"}``: tanh(mean) scaled into the bounds
        (continuous) or argmax of the logits (discrete, with ``policy_logits``)."""
        from muzero.algorithms.policy_export import action_spec_of, export_policy
        net = self.networks

        def policy_fn(observation):
            if net.continuous:
                return {"action": net.to_env_action(net.deterministic_unit_action(observation))}
            return {"policy_logits": net.actor(observation)}

        d = self.descriptor
        export_policy(directory, net, policy_fn, tuple(d.observation_shape), d.observation_dtype,
                      action_spec_of(d), ALGO, extra={"training_step": self.training_step})

    # -- run-loop hooks -----------------------------------------------------------------------------
    def progress(self) -> dict:
        out = {"replay_steps": len(self.replay)}        # transitions (relabelled copies included)
        if self.relabeller is not None:
            out["her_pending_steps"] = self.assembler.pending()
        return out

    def stop_limiting(self) -> None:
        self.replay.stop_limiting()

    def close(self) -> None:
        self.replay.close()
        if self.relabeller is not None:
            self._reward_env.close()
