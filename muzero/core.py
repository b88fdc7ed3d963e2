"""The few interfaces every algorithm implements, and the run context they share.

An algorithm (MuZero, V-trace, PPO, ...) is one folder under ``muzero/algorithms/``
whose ``builder.py`` makes the objects below. The generic run loop
(``muzero/learner/loop.py``) drives them and knows no algorithm:

    builder = algorithms.get(settings.algo)
    learner = builder.make_learner(settings, descriptor, context)       # networks, optimiser, data
    service = builder.make_service(settings, descriptor, learner, context)
    service.bind(server); server.start()                                  # one gRPC port for all
    launcher = LocalActors(n, builder.actor_target(), args_fn)            # a Launcher
    while not stopping:
        metrics = learner.step()                                          # None: no data yet
        if published: service.update_weights(learner.copy_to_serving, version=learner.training_step)
        ... progress line, TensorBoard, metrics.jsonl, checkpoints (learner.save), launcher.poll()
    learner.save(final checkpoint); learner.export(export dir)

Data reaches a learner through its service in one of two ingestion modes:

* **trajectory push** (MuZero): the actor searches and pushes finished segments;
* **step streaming** (V-trace, PPO, R2D2, SAC): thin actors send observations and
  rewards and get actions back; ``muzero.algorithms.streaming.StepStreamingService``
  keeps per-env state and hands fixed-length *unrolls* to the learner's queue or replay.

The unroll format (one env, ``T + 1`` consecutive steps, time-major, numpy):

    observation [T+1, *obs]   what the agent saw at step t (after an episode end: the next
                              episode's first observation)
    reward      [T+1] f32     reward received on arriving at step t (0 at an episode's start)
    terminated  [T+1] bool    arriving at t ended an episode by termination (no bootstrap)
    truncated   [T+1] bool    arriving at t ended an episode by truncation (bootstrap from
                              ``bootstrap_value[t]``, the behaviour value of the final state)
    bootstrap_value [T+1] f32 behaviour value of the final observation where truncated, else 0
    action      [T+1, *act]   action chosen at step t
    <outputs>   [T+1, ...]    what the policy returned beside the action (logits, baseline, ...)
    state/<k>   [...]         the recurrent state before step 0 (empty for feed-forward nets)
    env_id      [] i64
    run_id      [] i64        the actor run the steps came from (one run per unroll: a new run
                              id restarts the env, and its first unroll starts afresh)

Consecutive unrolls of one env overlap by ``overlap + 1`` steps (step T of one unroll is
step 0 of the next, SEED's convention), so a learner reading rewards[1:] and actions[:-1]
sees every transition exactly once.

This module imports only the standard library and numpy.
"""
from __future__ import annotations

import abc
import collections
import dataclasses
import threading
from typing import Any, Callable, Optional

import numpy as np


class EpisodeLog:
    """Thread-safe record of finished episodes (training and evaluation separately)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.recent = {False: collections.deque(maxlen=100), True: collections.deque(maxlen=20)}
        self.since_summary = {False: [], True: []}
        self.count = {False: 0, True: 0}

    def add(self, returns: np.ndarray, lengths: np.ndarray, evaluation: bool) -> None:
        finished = list(zip(np.asarray(returns).tolist(), np.asarray(lengths).tolist()))
        with self.lock:
            self.recent[evaluation].extend(finished)
            self.since_summary[evaluation].extend(finished)
            self.count[evaluation] += len(finished)

    def _recent_mean(self, evaluation: bool, column: int) -> float:
        with self.lock:
            values = [episode[column] for episode in self.recent[evaluation]]
        return float(np.mean(values)) if values else float("nan")

    def mean_return(self, evaluation: bool) -> float:
        """Mean return of the recent episodes (the last 100 training or 20 evaluation ones)."""
        return self._recent_mean(evaluation, 0)

    def mean_length(self, evaluation: bool) -> float:
        """Mean length in agent steps of the same recent episodes."""
        return self._recent_mean(evaluation, 1)

    def take_since_summary(self, evaluation: bool) -> list:
        """(return, length) of each episode added since the last call; clears them."""
        with self.lock:
            out, self.since_summary[evaluation] = self.since_summary[evaluation], []
        return out


class RunContext:
    """What the run loop shares with an algorithm's learner and service.

    ``env_steps`` counts agent steps received from actors (both ingestion modes add to
    it through ``add_env_steps``); ``episodes`` collects finished episodes; ``stop_event``
    is set when the run stops (blocking queues give up then); ``training_step`` reads the
    learner's counter (set by the loop once the learner exists). ``trainable_parts`` are
    the network parts the run trains (``--trainable_parts``, checked against the builder's
    ``trainable_parts``); empty: the whole model.
    """

    def __init__(self, seed: int = 0, trainable_parts: tuple = ()):
        self.seed = seed
        self.trainable_parts = tuple(trainable_parts)
        self.episodes = EpisodeLog()
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self.env_steps = 0
        self.training_step: Callable[[], int] = lambda: 0

    def add_env_steps(self, count: int) -> None:
        with self._lock:
            self.env_steps += int(count)


class Learner(abc.ABC):
    """Owns the trained networks, the optimiser and the data the algorithm trains on.

    ``step`` is called in a loop by the run loop's thread; it takes one update when data
    allows and returns its metrics (``{"loss/total": ...}``, floats), or None when it
    waited briefly (at most ~0.1 s) and had no data.
    """

    # Why this learner has nothing to export (a run that trains only part of a model), or
    # None: the run loop then logs the reason instead of writing SavedModels.
    no_export_reason: Optional[str] = None
    # After ``init_from``: what it restored, skipped and left new (an object with
    # ``lines()``), or None; the run loop prints its lines.
    init_summary: Any = None
    # Lines the run loop prints once the learner is built (what it loaded, say).
    start_notes: tuple = ()

    @abc.abstractmethod
    def step(self) -> Optional[dict]:
        """One update if the data allows; metrics or None."""

    @property
    @abc.abstractmethod
    def training_step(self) -> int:
        """Updates taken so far (restored by ``restore``)."""

    @abc.abstractmethod
    def copy_to_serving(self) -> None:
        """Copies the trained weights into the network the service answers with. Called by
        ``InferenceService.update_weights`` between two inference batches."""

    @abc.abstractmethod
    def save(self, directory: str) -> None:
        """Writes everything needed to resume (weights, optimiser, data, counters) into
        ``directory`` (empty, created by the caller; renamed into place afterwards)."""

    @abc.abstractmethod
    def restore(self, directory: str) -> None:
        """Inverse of ``save``."""

    @abc.abstractmethod
    def export(self, directory: str) -> None:
        """A SavedModel of the acting policy plus ``muzero_export.json`` (with ``algo``)
        that ``python -m muzero.eval`` plays without the training code."""

    def init_from(self, path: str) -> str:
        """Initialises weights (not the optimiser) from another run's checkpoint; returns
        the checkpoint directory used. Algorithms without fine-tuning support raise."""
        raise NotImplementedError(f"{type(self).__name__} cannot initialise from a checkpoint")

    def progress(self) -> dict:
        """Extra numbers for the progress record (replay fill, queue size, ...)."""
        return {}

    def stop_limiting(self) -> None:
        """Training has stopped: from now on pushes are not held back by the replay ratio.
        The run calls this before it stops the actors, so an actor waiting on a push returns
        and stops at once (instead of being killed after a timeout) and the pushed data is
        kept in the final checkpoint. Default: the learner holds no pushes back."""

    def close(self) -> None:
        """Wakes anything blocked on this learner's data (called at shutdown)."""


class InferenceService(abc.ABC):
    """An algorithm's RPC methods on the shared ``muzero.rpc.server.BatchingServer``."""

    @abc.abstractmethod
    def bind(self, server) -> None:
        """Binds this service's methods on ``server`` (before ``server.start()``)."""

    @abc.abstractmethod
    def update_weights(self, fn: Callable[[], None], version: int) -> None:
        """Runs ``fn()`` (the learner's ``copy_to_serving``) between inference batches, so no
        batch sees half-copied weights, then sets the weights version."""

    def stats(self, reset: bool = False) -> dict:
        """Flat numbers for TensorBoard (batch sizes, latencies, cache use)."""
        return {}

    def close(self) -> None:
        """Wakes callers blocked in this service (called at shutdown)."""


class LaunchError(RuntimeError):
    """A launcher could not start the run's actors (the message says why and what to do);
    the command line reports it in one line."""


class Launcher(abc.ABC):
    """Starts, watches and stops the actor processes of a run (local processes, Ray, ...)."""

    def prepare(self) -> None:
        """Called before the learner builds its network and starts its server, while the
        process has few threads: a launcher that forks helper processes with code run in the
        child (Ray's ``ray.init`` does) starts them here, since forking beside busy threads can
        hang the child on a lock one of them held. Raises :class:`LaunchError`. Default: nothing."""

    @abc.abstractmethod
    def start(self) -> None:
        """Starts the actors (after ``prepare``); raises :class:`LaunchError` when they cannot be started."""

    @abc.abstractmethod
    def poll(self) -> None:
        """Restarts actors that died (with back-off)."""

    @abc.abstractmethod
    def alive(self) -> int: ...

    @abc.abstractmethod
    def stop(self) -> None: ...


def reseeded(args: tuple, salt: int) -> tuple:
    """``args`` of an actor (``Builder.actor_args``) with the ``seed`` of each dataclass
    argument that has one moved by ``salt`` (mod 2**31): what a launcher passes to an actor it
    restarts, so that the new process does not replay its predecessor's episodes."""
    out = []
    for a in args:
        if dataclasses.is_dataclass(a) and not isinstance(a, type) and "seed" in {f.name for f in dataclasses.fields(a)}:
            a = dataclasses.replace(a, seed=(int(a.seed) + int(salt)) % 2**31)
        out.append(a)
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Shortcut:
    """A flag of an algorithm's that sets one config field: ``--<flag>=v`` is
    ``--set=<section>.<field>=v``. ``kind``: "integer", "float", "boolean" or "string"."""

    flag: str
    section: str
    field: str
    kind: str
    help: str


@dataclasses.dataclass(frozen=True)
class PlayRequest:
    """What ``python -m muzero.eval`` asks of an export's algorithm (``Builder.play_export``)."""

    episodes: int
    num_envs: int
    seed: int
    env: Optional[str] = None             # None: the env the export's run names
    env_options: Optional[dict] = None
    overrides: tuple = ()                 # "section.field=value": how the export plays (e.g. search)
    opponent: str = "none"                # two-player games: "minimax" or "random" plays the other side
    # How the player makes its envs, with envs.make_batch's signature (env, num_envs, seed=,
    # **options); None: envs.make_batch. The evaluator's --video passes one that records.
    make_batch: Optional[Callable] = None


@dataclasses.dataclass(frozen=True)
class RemoteActor:
    """What ``python -m muzero.actor`` asks of an algorithm's remote actor (``Builder.remote_actor``)."""

    server: str                      # the learner's HOST:PORT
    envs_per_actor: Optional[int]    # None: the settings' envs_per_actor
    actor_id: int
    env_id_base: Optional[int]       # step-streaming actors: server env id of the first env (None: leased)
    seed: int
    evaluation: bool
    max_env_steps: int               # 0: until stopped
    client_config: Any               # muzero.rpc.config.ClientConfig
    from_config: bool                # the settings came from the learner's config.json


@dataclasses.dataclass(frozen=True)
class Preset:
    """A named bundle of settings for a purpose (``--preset``), documented where it is defined.

    ``sections``: {section: {field: value}} config changes, applied as if given with --set
    (the user's own --set values for the same fields win); ``top``: RunSettings fields
    (num_actors, envs_per_actor, ...), which the matching flags override; ``kinds``: the env
    kinds (``envs.EnvDescriptor.kind``) it is for, empty for every kind; the learner refuses
    it on others."""
    description: str
    sections: dict
    top: dict = dataclasses.field(default_factory=dict)
    kinds: tuple = ()

    def refusal(self, descriptor) -> Optional[str]:
        """Why the preset does not apply to an env with this descriptor ("is for image envs"),
        or None where it does."""
        if self.kinds and descriptor.kind not in self.kinds:
            return f"is for {' and '.join(self.kinds)} envs"
        return None


class Builder(abc.ABC):
    """Makes one algorithm's parts. One instance per algorithm, in ``muzero.algorithms``.

    ``config_class`` is the algorithm's frozen config dataclass whose fields are themselves
    frozen dataclasses ("sections"); ``--set=section.field=value`` addresses them.
    """

    name: str
    config_class: type
    summary: str = ""     # a few words for --algo's help: how it acts and learns
    # "trajectory" (the actor pushes segments) or "streaming" (thin step-streaming actors)
    ingestion: str
    # The env action kinds (``envs.EnvDescriptor.action_kind``) the algorithm trains on, and
    # whether it plays two-player alternating games; ``muzero.algorithms.check_env`` refuses
    # other envs.
    action_kinds: tuple = ("discrete",)
    two_player: bool = False
    # Named bundles of settings (``--preset=<name>``): {name: Preset}. A preset is applied
    # over the per-env defaults and under the user's own flags and --set values.
    presets: dict = {}
    # Whether the learner trains data parallel on several devices (--learner_devices).
    multi_device: bool = False
    # Whether the service hands env ids to remote actors on request (--remote_envs).
    leases_env_ids: bool = False
    # The network parts ``--trainable_parts`` may name for fine-tuning (empty: the learner
    # trains its whole model and refuses the flag).
    trainable_parts: tuple = ()
    # Numba kernels of the algorithm's own code, {group: "module:function"}: the function
    # compiles them by calling its code paths on tiny inputs, and ``python -m muzero.warmup``
    # runs it (as group ``<name>_<group>``) so that a fresh clone's processes load them cached.
    numba_warmups: dict = {}
    # Command-line shortcuts to config fields (``Shortcut``): the learner, actor and evaluator
    # command lines define them (``--simulations`` sets search.num_simulations).
    shortcuts: tuple = ()

    def logdir_name(self, env: str) -> str:
        """The run directory's name under runs/ when --logdir is not given."""
        return f"{self.name}_{env}"

    def resume_identity(self, config: dict) -> dict:
        """{name: value} read from a run's config section (``RunSettings.to_dict()["config"]``)
        that must be equal for one run to resume another's checkpoints, beyond the algorithm,
        env and network section that every run compares. Default: nothing more."""
        return {}

    @abc.abstractmethod
    def default_settings(self, env: str):
        """``RunSettings`` for ``env`` (raises ValueError for an env without defaults)."""

    def refusal(self, descriptor) -> Optional[str]:
        """Why the algorithm cannot train on an env with this descriptor, or None if it can."""
        if getattr(descriptor, "two_player", False) and not self.two_player:
            return (f"it is a two-player game (alternating turns) and --algo={self.name} trains "
                    "single-agent policies")
        kind = getattr(descriptor, "action_kind", "discrete")
        if kind not in self.action_kinds:
            space = getattr(descriptor, "action_space", kind)
            return f"its action space is {space} and --algo={self.name} needs {' or '.join(self.action_kinds)} actions"
        return None

    def check_settings(self, settings) -> None:
        """Cross-field checks that need the whole ``RunSettings`` (raise ConfigError)."""

    def saved_network(self, network: dict, settings, descriptor) -> dict:
        """The ``network`` section of an earlier run's config.json, with fields added since
        set to what that run built (resuming compares it with this run's ``settings``).
        Default: as read."""
        return network

    def resume_hint(self, old_network: dict, new_network: dict) -> str:
        """Text appended to the refusal of a logdir whose network section differs (e.g. which
        setting resumes a run made before a change). Default: none."""
        return ""

    def fit_to_env(self, settings, descriptor, changes: dict) -> tuple:
        """Defaults fitted to the env: called with ``default_settings``' result (plus
        ``--env_options``) before the user's overrides, which are ``changes``
        ({section: {field: value}}, applied afterwards; fields named there are the user's and
        are left alone). Returns (settings, notes), one note per derived default saying where
        it came from; the learner prints them. The default fits nothing."""
        return settings, []

    @abc.abstractmethod
    def make_learner(self, settings, descriptor, context: RunContext) -> Learner: ...

    @abc.abstractmethod
    def make_service(self, settings, descriptor, learner: Learner, context: RunContext,
                     server_config) -> InferenceService:
        """The algorithm's service. ``server_config`` is the transport's (for reference: host,
        message limits); what the service batches and caches it derives from ``settings``."""

    @abc.abstractmethod
    def actor_target(self) -> Callable[..., None]:
        """The process entry point of one actor (picklable: it crosses a spawn)."""

    @abc.abstractmethod
    def actor_args(self, settings, index: int, address: str, client_config, training_step: int) -> tuple:
        """Arguments of ``actor_target`` for actor ``index`` (indices >= settings.num_actors
        are evaluation actors)."""

    def remote_actor(self, settings, remote: RemoteActor) -> tuple:
        """``(banner, run)`` for ``python -m muzero.actor`` on another machine: ``run()`` acts
        until stopped or ``remote.max_env_steps``; ``banner`` is the line printed first.
        Raises ``ConfigError`` when the request does not fit. Default: no remote actor."""
        from muzero.config import ConfigError
        raise ConfigError(f"--algo={self.name} has no remote actor")

    def stored_episodes(self, checkpoint_dir: str, settings, descriptor) -> tuple:
        """(episodes, skipped): the whole episodes a run's checkpoint keeps in its replay, as
        ``muzero.dataset.Episode`` (``python -m muzero.record --from_logdir``), and how many
        stored ones were left out. Default: the algorithm keeps none."""
        from muzero.config import ConfigError
        raise ConfigError(f"runs of --algo={self.name} keep no whole episodes in their checkpoints")

    def play_export(self, export_dir: str, request: PlayRequest) -> dict:
        """Plays an export this algorithm wrote (``python -m muzero.eval``) and returns
        ``returns``, ``mean_return`` and what else the play measured (``wins``, ``draws``,
        ``losses``, ``success_rate``, ``clipped_actions``). Default: no player."""
        from muzero.config import ConfigError
        raise ConfigError(f"exports of --algo={self.name} have no player")
