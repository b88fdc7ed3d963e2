"""Process-level settings of a run, for every algorithm: ``RunSettings``.

``RunSettings`` holds what the run loop needs (env, actors, stop conditions, cadences)
plus ``config``, the algorithm's own frozen config dataclass (``MuZeroConfig``,
``VTraceConfig``, ...), chosen by ``algo``. Per-(algo, env) defaults come from
``muzero.algorithms.get(algo).default_settings(env)``; the learner prints the resulting
settings and saves them as ``config.json`` in the log directory.

Imports no TensorFlow.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from muzero.config import ConfigError, from_dict, to_dict

LAUNCHERS = ("local", "ray")


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """How many actors, where and how long to run, plus the algorithm's config."""

    env: str
    config: Any
    algo: str                      # the name muzero.algorithms.get knows it by
    env_options: dict = dataclasses.field(default_factory=dict)
    # Env options the evaluation actors' envs take over env_options (e.g. a shorter
    # max_episode_steps, so that a greedy policy that idles for ever cannot hold the
    # evaluation for the env's whole step limit).
    eval_env_options: dict = dataclasses.field(default_factory=dict)
    num_actors: int = 2
    envs_per_actor: int = 16
    num_eval_actors: int = 1
    eval_envs_per_actor: int = 8
    seed: int = 0
    # Stop conditions (0 = no limit); the run stops at the first one reached.
    max_env_steps: int = 0
    max_train_steps: int = 0
    max_seconds: float = 0.0
    # Copy trained weights to the served model every this many training steps.
    publish_every_steps: int = 1
    summary_every_steps: int = 50
    progress_every_s: float = 5.0
    checkpoint_every_secs: float = 600.0
    # Export a SavedModel to <logdir>/export/step-<N> every this many seconds while training
    # (0: only the final export), so a run killed by a scheduler still leaves a recent one.
    export_every_secs: float = 0.0
    # Also export each time the env-step count passes a multiple of this (0: off): snapshots
    # that line up with env steps, for sample-efficiency curves (bench/learn.py
    # --snapshot_every_env_steps). Either trigger exports; one export serves both.
    export_every_env_steps: int = 0
    # step-<N> exports kept in <logdir>/export after each export (the oldest steps are
    # deleted, those written before a resume included); 0 keeps all of them.
    keep_exports: int = 5
    # Where the actors run: "local" (processes on this machine, muzero.launch.local) or "ray"
    # (Ray actors, muzero.launch.ray_actors; needs the ray extra).
    launcher: str = "local"
    # launcher="ray": "" starts a Ray instance on 127.0.0.1 (no dashboard); "auto" or
    # "<host>:<port>" joins a running cluster.
    ray_address: str = ""
    # Logical CPUs Ray reserves for each actor (0.5 packs two on a core).
    ray_cpus_per_actor: float = 1.0
    # How often Ray restarts one failed actor process; -1 means without limit.
    ray_max_restarts: int = -1
    # Devices the learner trains on: 1, or N > 1 for data parallelism over the first N GPUs
    # (tf.distribute.MirroredStrategy); without GPUs, N logical CPU devices.
    learner_devices: int = 1
    # Envs of actors started by hand on other machines. Step-streaming algorithms hand out
    # that many env ids, which remote actors ask for when they connect; MuZero makes room
    # for them in its latent cache (its own actors' slots are kept for them either way).
    # 0: only the learner's actors (MuZero's cache still has at least 256 slots).
    remote_envs: int = 0
    # A remote env id lease unused this long (seconds) ends and its ids go back to the pool: how
    # long a silent actor host (dead, or cut off) keeps its ids. An actor whose lease ended
    # registers again and starts its episodes over.
    remote_lease_s: float = 60.0

    def __post_init__(self):
        checks = {"num_actors": (self.num_actors, 0), "envs_per_actor": (self.envs_per_actor, 1),
                  "num_eval_actors": (self.num_eval_actors, 0),
                  "eval_envs_per_actor": (self.eval_envs_per_actor, 1),
                  "max_env_steps": (self.max_env_steps, 0), "max_train_steps": (self.max_train_steps, 0),
                  "publish_every_steps": (self.publish_every_steps, 1),
                  "summary_every_steps": (self.summary_every_steps, 1), "seed": (self.seed, 0),
                  "ray_max_restarts": (self.ray_max_restarts, -1), "learner_devices": (self.learner_devices, 1),
                  "keep_exports": (self.keep_exports, 0),
                  "export_every_env_steps": (self.export_every_env_steps, 0),
                  "remote_envs": (self.remote_envs, 0)}
        for name, (value, lo) in checks.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ConfigError(f"RunSettings.{name}={value!r} is invalid: must be an integer >= {lo}")
        lease = self.remote_lease_s
        if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not 5 <= lease <= 1e6:
            # Remote actors call many times a second but send no heartbeat: a lease shorter than a
            # stall of a loaded machine would end live actors' leases.
            raise ConfigError(f"RunSettings.remote_lease_s={lease!r} is invalid: must be a number in [5, 1e6]")
        for name in ("max_seconds", "progress_every_s", "checkpoint_every_secs", "export_every_secs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ConfigError(f"RunSettings.{name}={value!r} is invalid: must be a number >= 0")
        if self.checkpoint_every_secs <= 0:
            raise ConfigError(f"RunSettings.checkpoint_every_secs={self.checkpoint_every_secs!r} is invalid: "
                              "must be > 0")
        if self.launcher not in LAUNCHERS:
            raise ConfigError(f"RunSettings.launcher={self.launcher!r} is invalid: choose from {', '.join(LAUNCHERS)}")
        if not isinstance(self.ray_address, str):
            raise ConfigError(f"RunSettings.ray_address={self.ray_address!r} is invalid: must be a string")
        cpus = self.ray_cpus_per_actor
        if isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or not 0 < cpus <= 1024:
            raise ConfigError(f"RunSettings.ray_cpus_per_actor={cpus!r} is invalid: must be a number in (0, 1024]")
        if self.launcher != "ray":
            for name, default in (("ray_address", ""), ("ray_cpus_per_actor", 1.0), ("ray_max_restarts", -1)):
                if getattr(self, name) != default:
                    raise ConfigError(f"RunSettings.{name}={getattr(self, name)!r} applies to launcher='ray' only "
                                      f"(this run has launcher={self.launcher!r}): add --launcher=ray or drop it")
        for name in ("env_options", "eval_env_options"):
            if not isinstance(getattr(self, name), dict):
                raise ConfigError(f"RunSettings.{name}={getattr(self, name)!r} is invalid: must be a JSON object")

    def env_options_for(self, evaluation: bool) -> dict:
        """The env options of an actor's envs: env_options, with eval_env_options over them
        for evaluation actors."""
        return {**self.env_options, **self.eval_env_options} if evaluation else dict(self.env_options)

    @property
    def total_envs(self) -> int:
        return self.num_actors * self.envs_per_actor + self.num_eval_actors * self.eval_envs_per_actor

    def to_dict(self) -> dict:
        data = to_dict(self)
        data["config"] = to_dict(self.config)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict, config_class) -> "RunSettings":
        """Inverse of to_dict (a run's config.json) whose algorithm's config dataclass is
        ``config_class`` (``muzero.algorithms.settings_from_dict`` looks it up by ``algo``);
        unknown fields raise ConfigError."""
        if not isinstance(data, dict):
            raise ConfigError(f"RunSettings: expected a JSON object, got {type(data).__name__}")
        missing = [k for k in ("env", "config", "algo") if k not in data]
        if missing:
            raise ConfigError(f"RunSettings: missing field(s) {missing} (a config.json written by a run has them)")
        try:
            data = dict(data, config=from_dict(config_class, data["config"]))
            return from_dict(cls, data)
        except TypeError as e:   # a section given as a list or number instead of an object
            raise ConfigError(f"RunSettings: {e}") from None


def replace_section(settings: RunSettings, section: str, **changes) -> RunSettings:
    """A copy of ``settings`` with fields of one config section replaced (validated again)."""
    config = settings.config
    new_section = dataclasses.replace(getattr(config, section), **changes)
    return dataclasses.replace(settings, config=dataclasses.replace(config, **{section: new_section}))


def replace_sections(settings: RunSettings, changes: dict) -> RunSettings:
    """Replaces fields of several sections at once ({section: {field: value}}), validating the
    whole config only after every section is in place (so settings that must agree across
    sections can be changed together)."""
    config = settings.config
    new = {}
    for section, fields in changes.items():
        if fields:
            # Section-level validation runs here; the cross-section check runs on the config below.
            new[section] = dataclasses.replace(getattr(config, section), **fields)
    if not new:
        return settings
    return dataclasses.replace(settings, config=dataclasses.replace(config, **new))


def sections(config) -> dict:
    """{section name: section dataclass type} of an algorithm's config."""
    return {f.name: type(getattr(config, f.name)) for f in dataclasses.fields(config)
            if dataclasses.is_dataclass(getattr(config, f.name))}
