"""SavedModel export of a model-free policy (V-trace, PPO, ...), playable without this package.

``export_policy(directory, module, policy_fn, ...)`` writes:

    directory/saved_model.pb, directory/variables/...   the SavedModel
    directory/muzero_export.json                        what a player needs to drive it

The SavedModel has one signature, ``policy``:

    policy(observation [B, *observation_shape] observation_dtype)
        -> {"action": [B] int32 (the greedy / deterministic action),
            "policy_logits": [B, A] float32 (discrete actions), ...}

with the batch dimension ``None``. ``muzero_export.json`` holds

    {"format_version": 1, "algo": "vtrace",
     "observation": {"shape": [...], "dtype": "float32"},
     "action": {"kind": "discrete", "num_actions": A},
     "signatures": {"policy": {"inputs": {...}, "outputs": [...]}}}

``PolicyPlayer(export_dir).act(observation)`` plays such an export with nothing but
``tf.saved_model.load``; ``evaluate_policy`` steps ``envs.make_batch`` greedily with it.

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
ACTION_KINDS = ("discrete",)


def _check_action_spec(action_spec: dict) -> dict:
    if not isinstance(action_spec, dict) or action_spec.get("kind") not in ACTION_KINDS:
        raise ValueError(f"action_spec={action_spec!r} must be a dict with kind in {list(ACTION_KINDS)}")
    num_actions = action_spec.get("num_actions")
    if isinstance(num_actions, bool) or not isinstance(num_actions, (int, np.integer)) or num_actions < 1:
        raise ValueError(f"action_spec num_actions={num_actions!r} must be an integer >= 1")
    return dict(action_spec, num_actions=int(num_actions))


def export_description(observation_shape, observation_dtype, action_spec: dict, algo: str,
                       output_keys, extra: Optional[dict] = None) -> dict:
    """The ``muzero_export.json`` content (plain JSON types)."""
    shape = [int(d) for d in observation_shape]
    description = {
        "format_version": FORMAT_VERSION,
        "algo": algo,
        "observation": {"shape": shape, "dtype": np.dtype(observation_dtype).name},
        "action": _check_action_spec(action_spec),
        "signatures": {SIGNATURE: {"inputs": {"observation": [None, *shape]},
                                   "outputs": sorted(output_keys)}},
    }
    if extra:
        description.update(extra)
    return description


def export_policy(directory: str, module, policy_fn: Callable, observation_shape, observation_dtype,
                  action_spec: dict, algo: str, extra: Optional[dict] = None) -> str:
    """Writes the SavedModel and ``muzero_export.json`` into ``directory``; returns it.

    Args:
      module: a ``tf.Module`` holding every variable ``policy_fn`` reads (saved with it).
      policy_fn: ``observation [B, *obs] (observation_dtype) -> outputs``, where outputs is a
        dict of tensors with ``policy_logits [B, A]`` and optionally ``action [B]`` (for a
        discrete action set the greedy action ``argmax(policy_logits)`` is added when absent),
        or a tensor of logits ``[B, A]``. Traced once, never XLA-compiled.
      observation_shape, observation_dtype: one observation's shape and numpy dtype.
      action_spec: ``{"kind": "discrete", "num_actions": A}``.
      algo: the algorithm's registry name (``vtrace``, ``ppo``), stored as ``algo``.
      extra: more JSON fields for ``muzero_export.json`` (e.g. a description of the network).
    """
    import tensorflow as tf

    action_spec = _check_action_spec(action_spec)
    obs_dtype = tf.as_dtype(np.dtype(observation_dtype))
    obs_spec = tf.TensorSpec([None, *[int(d) for d in observation_shape]], obs_dtype, name="observation")

    def policy(observation):
        outputs = policy_fn(observation)
        if not isinstance(outputs, dict):
            outputs = {"policy_logits": outputs}
        outputs = dict(outputs)
        if "policy_logits" not in outputs:
            raise ValueError("policy_fn must return policy_logits for a discrete action set")
        outputs["policy_logits"] = tf.cast(outputs["policy_logits"], tf.float32)
        if "action" not in outputs:
            outputs["action"] = tf.argmax(outputs["policy_logits"], axis=-1, output_type=tf.int32)
        outputs["action"] = tf.cast(outputs["action"], tf.int32)
        return outputs

    holder = tf.Module(name=f"{algo}_export")
    holder.network = module
    holder.policy = tf.function(policy, input_signature=[obs_spec], jit_compile=False)
    concrete = holder.policy.get_concrete_function()
    os.makedirs(directory, exist_ok=True)
    tf.saved_model.save(holder, directory, signatures={SIGNATURE: concrete})
    output_keys = list(concrete.structured_outputs)
    with open(os.path.join(directory, EXPORT_JSON), "w") as f:
        json.dump(export_description(observation_shape, observation_dtype, action_spec, algo,
                                     output_keys, extra), f, indent=2, sort_keys=True)
    return directory


def write_run_json(export_dir: str, env: str, env_options: dict) -> None:
    """``run.json`` beside an export: the env ``evaluate_policy`` plays when none is passed."""
    with open(os.path.join(export_dir, RUN_JSON), "w") as f:
        json.dump({"env": env, "env_options": dict(env_options or {})}, f, indent=2, sort_keys=True)


def load_description(export_dir: str) -> dict:
    with open(os.path.join(export_dir, EXPORT_JSON)) as f:
        return json.load(f)


def is_policy_export(export_dir: str) -> bool:
    """True when ``export_dir`` holds a model-free policy export (its json has a ``policy``
    signature and an ``algo`` other than MuZero)."""
    try:
        description = load_description(export_dir)
    except (OSError, ValueError):
        return False
    return SIGNATURE in description.get("signatures", {}) and description.get("algo") not in (None, "muzero")


class PolicyPlayer:
    """Greedy player of an ``export_policy`` SavedModel (only ``tf.saved_model.load``)."""

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
        self.num_actions = int(self.spec["action"]["num_actions"])

    def outputs(self, observation: np.ndarray) -> dict:
        """observation [B, *obs] -> every output of the signature, as numpy."""
        observation = np.asarray(observation).astype(self.observation_dtype, copy=False)
        if observation.shape[1:] != self.observation_shape:
            raise ValueError(f"observation shape {observation.shape} does not match the export's "
                             f"[B, {', '.join(map(str, self.observation_shape))}]")
        out = self._policy(observation=self._tf.constant(observation))
        return {k: v.numpy() for k, v in out.items()}

    def act(self, observation: np.ndarray) -> np.ndarray:
        """observation [B, *obs] -> greedy actions [B] int32."""
        return self.outputs(observation)["action"].astype(np.int32, copy=False)


def evaluate_policy(export_dir: str, env: Optional[str] = None, env_options: Optional[dict] = None,
                    episodes: int = 20, num_envs: int = 8, seed: int = 0) -> dict:
    """Plays ``episodes`` episodes greedily over ``num_envs`` envs in lockstep.

    ``env``/``env_options`` default to the ``run.json`` beside the export when there is one.
    Returns ``{"returns": [...], "lengths": [...], "mean_return": float}`` over the first
    ``episodes`` episodes to finish.
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
    batch = envs.make_batch(env, num_envs, seed=seed, **(env_options or {}))
    try:
        descriptor = batch.descriptor
        if descriptor.two_player:
            raise ValueError(f"env {env!r} is a two-player game; policy exports play single-player envs")
        if tuple(descriptor.observation_shape) != player.observation_shape:
            raise ValueError(f"env {env!r} observations {tuple(descriptor.observation_shape)} do not match "
                             f"the export's {player.observation_shape}")
        returns, lengths = [], []
        step = batch.reset()
        while len(returns) < episodes:
            step = batch.step(player.act(step.observation))
            for i in np.flatnonzero(step.episode_length >= 0):
                returns.append(float(step.episode_return[i]))
                lengths.append(int(step.episode_length[i]))
    finally:
        batch.close()
    returns, lengths = returns[:episodes], lengths[:episodes]
    return {"returns": returns, "lengths": lengths, "mean_return": float(np.mean(returns))}
