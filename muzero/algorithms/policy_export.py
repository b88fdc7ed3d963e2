"""SavedModel export of a model-free policy (V-trace, PPO, ...), playable without this package.

``export_policy(directory, module, policy_fn, ...)`` writes:

    directory/saved_model.pb, directory/variables/...   the SavedModel
    directory/muzero_export.json                        what a player needs to drive it

The SavedModel has one signature, ``policy``:

    policy(observation [B, *observation_shape] observation_dtype)
        -> {"action": [B] int32 (discrete: the greedy action) or [B, d] float32 (continuous:
                      the deterministic action, within the bounds),
            "policy_logits": [B, A] float32 (discrete actions), ...}

with the batch dimension ``None``. A recurrent policy (R2D2) takes more inputs and returns
its next state, which starts at zeros for every episode:

    policy(observation, prev_action [B, *action_shape], prev_reward [B] float32,
           state_<k> [B, *shape_k] float32 for each state part k)
        -> {"action": ..., "next_state_<k>": [B, *shape_k], ...}

``muzero_export.json`` holds

    {"format_version": 1, "algo": "vtrace",
     "observation": {"shape": [...], "dtype": "float32"},
     "action": {"kind": "discrete", "num_actions": A}
               or {"kind": "continuous", "shape": [d], "low": [...], "high": [...]},
     "state": {"<k>": [shape_k...]}            (recurrent policies only)
     "signatures": {"policy": {"inputs": {...}, "outputs": [...]}}}

``PolicyPlayer(export_dir)`` plays such an export with nothing but ``tf.saved_model.load``
(``reset(num_envs)``, ``act(observation)``, ``observe(reward, done)`` keep a recurrent
policy's state and previous action and reward); ``evaluate_policy`` steps
``envs.make_batch`` with it and, for goal envs, reports the success rate.

Imports numpy, TensorFlow and ``envs`` (the latter inside ``evaluate_policy`` only); never
the package's network code.
"""
from __future__ import annotations

import json
import os
from typing import Callable, Optional

import numpy as np

EXPORT_JSON = "muzero_export.json"
RUN_JSON = "run.json"   # {"env": ..., "env_options": {...}} where the run loop writes one
FORMAT_VERSION = 1
SIGNATURE = "policy"
ACTION_KINDS = ("discrete", "continuous")


def action_spec_of(descriptor) -> dict:
    """The export's ``action`` entry for an ``envs.EnvDescriptor``."""
    if descriptor.is_continuous:
        return {"kind": "continuous", "shape": list(descriptor.action_shape),
                "low": list(descriptor.action_low), "high": list(descriptor.action_high)}
    return {"kind": "discrete", "num_actions": int(descriptor.num_actions)}


def _check_action_spec(action_spec: dict) -> dict:
    if not isinstance(action_spec, dict) or action_spec.get("kind") not in ACTION_KINDS:
        raise ValueError(f"action_spec={action_spec!r} must be a dict with kind in {list(ACTION_KINDS)}")
    if action_spec["kind"] == "continuous":
        shape = action_spec.get("shape")
        if not isinstance(shape, (list, tuple)) or len(shape) != 1 or int(shape[0]) < 1:
            raise ValueError(f"action_spec shape={shape!r} must be [d] with d >= 1")
        low = np.broadcast_to(np.asarray(action_spec.get("low"), np.float64), (int(shape[0]),))
        high = np.broadcast_to(np.asarray(action_spec.get("high"), np.float64), (int(shape[0]),))
        if not (np.isfinite(low).all() and np.isfinite(high).all() and (low < high).all()):
            raise ValueError(f"action_spec bounds low={action_spec.get('low')!r} high={action_spec.get('high')!r} "
                             "must be finite with low < high")
        return {"kind": "continuous", "shape": [int(shape[0])], "low": low.tolist(), "high": high.tolist()}
    num_actions = action_spec.get("num_actions")
    if isinstance(num_actions, bool) or not isinstance(num_actions, (int, np.integer)) or num_actions < 1:
        raise ValueError(f"action_spec num_actions={num_actions!r} must be an integer >= 1")
    return dict(action_spec, num_actions=int(num_actions))


def _action_shape(action_spec: dict) -> tuple:
    return tuple(action_spec["shape"]) if action_spec["kind"] == "continuous" else ()


def export_description(observation_shape, observation_dtype, action_spec: dict, algo: str,
                       output_keys, extra: Optional[dict] = None, state_spec: Optional[dict] = None) -> dict:
    """The ``muzero_export.json`` content (plain JSON types)."""
    shape = [int(d) for d in observation_shape]
    action_spec = _check_action_spec(action_spec)
    inputs = {"observation": [None, *shape]}
    if state_spec:
        inputs["prev_action"] = [None, *_action_shape(action_spec)]
        inputs["prev_reward"] = [None]
        inputs.update({f"state_{k}": [None, *map(int, v)] for k, v in sorted(state_spec.items())})
    description = {
        "format_version": FORMAT_VERSION,
        "algo": algo,
        "observation": {"shape": shape, "dtype": np.dtype(observation_dtype).name},
        "action": action_spec,
        "signatures": {SIGNATURE: {"inputs": inputs, "outputs": sorted(output_keys)}},
    }
    if state_spec:
        description["state"] = {k: [int(d) for d in v] for k, v in sorted(state_spec.items())}
    if extra:
        description.update(extra)
    return description


def export_policy(directory: str, module, policy_fn: Callable, observation_shape, observation_dtype,
                  action_spec: dict, algo: str, extra: Optional[dict] = None,
                  state_spec: Optional[dict] = None) -> str:
    """Writes the SavedModel and ``muzero_export.json`` into ``directory``; returns it.

    Args:
      module: a ``tf.Module`` holding every variable ``policy_fn`` reads (saved with it).
      policy_fn: ``observation [B, *obs] (observation_dtype) -> outputs`` (recurrent:
        ``(observation, prev_action, prev_reward, state {k: [B, *shape_k]}) -> outputs``, with
        ``next_state_<k>`` among them). Discrete actions: outputs is a dict of tensors with
        ``policy_logits [B, A]`` and optionally ``action [B]`` (the greedy action
        ``argmax(policy_logits)`` is added when absent), or a tensor of logits ``[B, A]``.
        Continuous actions: a dict with ``action [B, d]`` (the deterministic action).
        Traced once, never XLA-compiled.
      observation_shape, observation_dtype: one observation's shape and numpy dtype.
      action_spec: ``{"kind": "discrete", "num_actions": A}`` or ``{"kind": "continuous",
        "shape": [d], "low": [...], "high": [...]}`` (``action_spec_of(descriptor)``).
      algo: the algorithm's registry name (``vtrace``, ``ppo``), stored as ``algo``.
      extra: more JSON fields for ``muzero_export.json`` (e.g. a description of the network).
      state_spec: recurrent policies: ``{k: shape of one row}`` of the state (float32, zeros
        at an episode's start); None for feed-forward policies.
    """
    import tensorflow as tf

    action_spec = _check_action_spec(action_spec)
    continuous = action_spec["kind"] == "continuous"
    obs_dtype = tf.as_dtype(np.dtype(observation_dtype))
    specs = [tf.TensorSpec([None, *[int(d) for d in observation_shape]], obs_dtype, name="observation")]
    names = sorted(state_spec or {})
    if state_spec:
        specs.append(tf.TensorSpec([None, *_action_shape(action_spec)], tf.float32 if continuous else tf.int32,
                                   name="prev_action"))
        specs.append(tf.TensorSpec([None], tf.float32, name="prev_reward"))
        specs += [tf.TensorSpec([None, *map(int, state_spec[k])], tf.float32, name=f"state_{k}") for k in names]

    def finish(outputs):
        if not isinstance(outputs, dict):
            outputs = {"policy_logits": outputs}
        outputs = dict(outputs)
        if continuous:
            if "action" not in outputs:
                raise ValueError("policy_fn must return action [B, d] for continuous actions")
            outputs["action"] = tf.cast(outputs["action"], tf.float32)
            return outputs
        if "policy_logits" not in outputs and "action" not in outputs:
            raise ValueError("policy_fn must return policy_logits (or action) for a discrete action set")
        if "policy_logits" in outputs:
            outputs["policy_logits"] = tf.cast(outputs["policy_logits"], tf.float32)
        if "action" not in outputs:
            outputs["action"] = tf.argmax(outputs["policy_logits"], axis=-1, output_type=tf.int32)
        outputs["action"] = tf.cast(outputs["action"], tf.int32)
        return outputs

    if state_spec:
        def policy(observation, prev_action, prev_reward, *state):
            outputs = finish(policy_fn(observation, prev_action, prev_reward, dict(zip(names, state))))
            missing = [k for k in names if f"next_state_{k}" not in outputs]
            if missing:
                raise ValueError(f"a recurrent policy_fn must return next_state_<k> for {missing}")
            return outputs
    else:
        def policy(observation):
            return finish(policy_fn(observation))

    holder = tf.Module(name=f"{algo}_export")
    holder.network = module
    holder.policy = tf.function(policy, input_signature=specs, jit_compile=False)
    concrete = holder.policy.get_concrete_function()
    os.makedirs(directory, exist_ok=True)
    tf.saved_model.save(holder, directory, signatures={SIGNATURE: concrete})
    output_keys = list(concrete.structured_outputs)
    with open(os.path.join(directory, EXPORT_JSON), "w") as f:
        json.dump(export_description(observation_shape, observation_dtype, action_spec, algo,
                                     output_keys, extra, state_spec), f, indent=2, sort_keys=True)
    return directory


def write_run_json(export_dir: str, env: str, env_options: dict) -> None:
    """``run.json`` beside an export: the env ``evaluate_policy`` plays when none is passed."""
    with open(os.path.join(export_dir, RUN_JSON), "w") as f:
        json.dump({"env": env, "env_options": dict(env_options or {})}, f, indent=2, sort_keys=True)


def load_description(export_dir: str) -> dict:
    with open(os.path.join(export_dir, EXPORT_JSON)) as f:
        return json.load(f)


def is_policy_export(export_dir: str) -> bool:
    """True when ``export_dir`` holds a policy export: its json names the ``policy``
    signature that ``export_policy`` writes (a search-based export has other signatures)."""
    try:
        description = load_description(export_dir)
    except (OSError, ValueError):
        return False
    return SIGNATURE in description.get("signatures", {})


class PolicyPlayer:
    """Greedy player of an ``export_policy`` SavedModel (only ``tf.saved_model.load``).

    Feed-forward exports: ``act(observation)``. Recurrent ones keep, per env row, the state,
    the previous action and the previous reward: call ``reset(num_envs)`` before an episode
    batch, ``act(observation)`` each step and ``observe(reward, done)`` after it (rows that
    are done start again from zeros). The calls are harmless for feed-forward exports.
    """

    def __init__(self, export_dir: str):
        import tensorflow as tf  # the SavedModel runtime only
        self._tf = tf
        self.spec = load_description(export_dir)
        if self.spec.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{export_dir}: format_version {self.spec.get('format_version')!r} is not "
                             f"{FORMAT_VERSION}")
        self.algo = self.spec.get("algo")
        self.model = tf.saved_model.load(export_dir)
        if SIGNATURE not in self.model.signatures:
            raise ValueError(f"{export_dir}: the SavedModel has no {SIGNATURE!r} signature "
                             f"(has {sorted(self.model.signatures)})")
        self._policy = self.model.signatures[SIGNATURE]
        self.observation_shape = tuple(self.spec["observation"]["shape"])
        self.observation_dtype = np.dtype(self.spec["observation"]["dtype"])
        action = self.spec["action"]
        self.continuous = action.get("kind") == "continuous"
        self.num_actions = 0 if self.continuous else int(action["num_actions"])
        self.action_shape = tuple(action["shape"]) if self.continuous else ()
        self.action_dtype = np.dtype(np.float32 if self.continuous else np.int32)
        self.state_spec = {k: tuple(v) for k, v in self.spec.get("state", {}).items()}
        self.recurrent = bool(self.state_spec)
        self._carry: Optional[dict] = None

    def reset(self, num_envs: int) -> None:
        """Zero state, previous action and previous reward for ``num_envs`` rows."""
        carry = {f"state_{k}": np.zeros((num_envs, *shape), np.float32) for k, shape in self.state_spec.items()}
        carry["prev_action"] = np.zeros((num_envs, *self.action_shape), self.action_dtype)
        carry["prev_reward"] = np.zeros(num_envs, np.float32)
        self._carry = carry

    def observe(self, reward: np.ndarray, done: np.ndarray) -> None:
        """After a step: the rewards become the previous rewards; rows that are ``done``
        (a new episode follows) return to zero state, action and reward."""
        if self._carry is None:
            return
        self._carry["prev_reward"] = np.asarray(reward, np.float32).copy()
        done = np.asarray(done, bool)
        if done.any():
            for v in self._carry.values():
                v[done] = 0

    def outputs(self, observation: np.ndarray) -> dict:
        """observation [B, *obs] -> every output of the signature, as numpy (recurrent exports:
        from the kept state, which then advances)."""
        observation = np.asarray(observation).astype(self.observation_dtype, copy=False)
        if observation.shape[1:] != self.observation_shape:
            raise ValueError(f"observation shape {observation.shape} does not match the export's "
                             f"[B, {', '.join(map(str, self.observation_shape))}]")
        tf = self._tf
        if not self.recurrent:
            out = self._policy(observation=tf.constant(observation))
            return {k: v.numpy() for k, v in out.items()}
        if self._carry is None or len(self._carry["prev_reward"]) != len(observation):
            self.reset(len(observation))
        out = self._policy(observation=tf.constant(observation),
                           **{k: tf.constant(v) for k, v in self._carry.items()})
        out = {k: v.numpy() for k, v in out.items()}
        for k in self.state_spec:
            self._carry[f"state_{k}"] = out[f"next_state_{k}"]
        self._carry["prev_action"] = out["action"].astype(self.action_dtype, copy=True)
        return out

    def act(self, observation: np.ndarray) -> np.ndarray:
        """observation [B, *obs] -> greedy / deterministic actions: [B] int32 (discrete) or
        [B, d] float32 (continuous)."""
        return self.outputs(observation)["action"].astype(self.action_dtype, copy=False)


def evaluate_policy(export_dir: str, env: Optional[str] = None, env_options: Optional[dict] = None,
                    episodes: int = 20, num_envs: int = 8, seed: int = 0, make_batch=None) -> dict:
    """Plays ``episodes`` episodes greedily over ``num_envs`` envs in lockstep, made by
    ``make_batch`` (default ``envs.make_batch``).

    ``env``/``env_options`` default to the ``run.json`` beside the export when there is one.
    Returns ``{"returns": [...], "lengths": [...], "mean_return": float, "clipped_actions": int}``
    over the first ``episodes`` episodes to finish; for goal envs also ``success_rate``: the
    fraction whose final observation has reward 0 under the env's ``compute_reward`` (the
    Gymnasium-Robotics convention: 0 at the goal, negative elsewhere).
    """
    import envs

    if env is None or env_options is None:
        run = {}
        path = os.path.join(export_dir, RUN_JSON)
        if os.path.isfile(path):
            with open(path) as f:
                run = json.load(f)
        env = env or run.get("env")
        env_options = env_options if env_options is not None else run.get("env_options", {})
    if env is None:
        raise ValueError(f"{export_dir} has no {RUN_JSON}: pass the env name")
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes={episodes!r} must be an integer >= 1")
    player = PolicyPlayer(export_dir)
    batch = (make_batch or envs.make_batch)(env, num_envs, seed=seed, **(env_options or {}))
    reward_env = None
    try:
        descriptor = batch.descriptor
        if descriptor.two_player:
            raise ValueError(f"env {env!r} is a two-player game; policy exports play single-player envs")
        if tuple(descriptor.observation_shape) != player.observation_shape:
            raise ValueError(f"env {env!r} observations {tuple(descriptor.observation_shape)} do not match "
                             f"the export's {player.observation_shape}")
        if descriptor.is_continuous != player.continuous:
            raise ValueError(f"env {env!r} has {descriptor.action_space} actions; the export's are "
                             f"{player.spec['action']}")
        goals = descriptor.goal_slices()
        reward_env = envs.make(env, seed=seed, **(env_options or {})) if goals else None
        returns, lengths, successes = [], [], []
        step = batch.reset()
        player.reset(num_envs)
        while len(returns) < episodes:
            step = batch.step(player.act(step.observation))
            player.observe(step.reward, step.done)
            ended = np.flatnonzero(step.episode_length >= 0)
            for i in ended:
                returns.append(float(step.episode_return[i]))
                lengths.append(int(step.episode_length[i]))
            if goals and len(ended):
                final = step.final_observation[ended]
                rewards = reward_env.compute_reward(final[:, goals["achieved_goal"]], final[:, goals["desired_goal"]])
                successes.extend((np.asarray(rewards) >= 0).tolist())
        clipped = int(getattr(batch, "clipped_actions", 0))
    finally:
        batch.close()
        if reward_env is not None:
            reward_env.close()
    returns, lengths = returns[:episodes], lengths[:episodes]
    result = {"returns": returns, "lengths": lengths, "mean_return": float(np.mean(returns)),
              "clipped_actions": clipped}
    if goals:
        result["success_rate"] = float(np.mean(successes[:episodes]))
    return result
