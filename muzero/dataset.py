"""Recorded experience in Minari's format (Farama's standard for offline RL datasets).

    write_dataset("cartpole/weak-v0", episodes, descriptor, env="cartpole", env_options={})
    data = open_dataset("cartpole/weak-v0")        # an id in the Minari root, or a folder
    check_matches(data, descriptor, "cartpole")     # ValueError naming both spaces on a mismatch
    for episode in read_episodes(data): ...         # Episode(observations [T+1], actions [T], ...)

An :class:`Episode` holds T steps: T + 1 observations (the first and the one the last
step led to), T actions, T rewards, and whether it ended by termination or by truncation
(kept apart). Image observations are single uint8 frames, as the envs give them; stacking
is the learner's business. A dataset written here also names the env it was played in
(``muzero_env`` in its metadata), so a learner can refuse one from another env.

Datasets are found where Minari keeps them (``MINARI_DATASETS_PATH``, default
``~/.minari/datasets``) by id, or at a folder path. Nothing is downloaded. Minari is the
``offline`` extra (``pip install -e '.[offline]'``); this module imports it when called.
Imports NumPy and Gymnasium (for the spaces), never TensorFlow.
"""
from __future__ import annotations

import dataclasses
import json
import os
import warnings
from typing import Iterator, Optional

import numpy as np

INSTALL_HINT = "pip install -e '.[offline]'"
ENV_KEY = "muzero_env"   # the dataset metadata entry naming the env and its options


@dataclasses.dataclass
class Episode:
    observations: np.ndarray      # [T + 1, *observation_shape]
    actions: np.ndarray           # [T] int64, or [T, *action_shape] float32 for box actions
    rewards: np.ndarray           # [T] float32
    terminated: bool
    truncated: bool

    def __post_init__(self):
        t = len(self.actions)
        if t < 1 or len(self.observations) != t + 1 or len(self.rewards) != t:
            raise ValueError(f"an episode holds T >= 1 actions and rewards and T + 1 observations; got "
                             f"{len(self.observations)} observations, {t} actions, {len(self.rewards)} rewards")
        if self.terminated and self.truncated:
            raise ValueError("an episode ends by termination or by truncation, not both")

    @property
    def num_steps(self) -> int:
        return len(self.actions)


def _minari():
    try:
        import minari
    except ImportError:
        raise ValueError(f"offline datasets need Minari: {INSTALL_HINT}") from None
    return minari


def spaces_of(descriptor) -> tuple:
    """(observation_space, action_space) as Gymnasium spaces for an ``envs.EnvDescriptor``."""
    import gymnasium
    dtype = np.dtype(descriptor.observation_dtype)
    shape = tuple(descriptor.observation_shape)
    if dtype == np.uint8:
        observation = gymnasium.spaces.Box(0, 255, shape, np.uint8)
    else:
        observation = gymnasium.spaces.Box(-np.inf, np.inf, shape, dtype)
    if descriptor.is_continuous:
        action = gymnasium.spaces.Box(np.array(descriptor.action_low, np.float32),
                                      np.array(descriptor.action_high, np.float32),
                                      tuple(descriptor.action_shape), np.float32)
    else:
        action = gymnasium.spaces.Discrete(descriptor.num_actions)
    return observation, action


def _describe_space(space) -> str:
    import gymnasium
    if isinstance(space, gymnasium.spaces.Discrete):
        return f"Discrete({space.n})"
    if isinstance(space, gymnasium.spaces.Box):
        return f"Box{tuple(space.shape)} {space.dtype}"
    return type(space).__name__


def write_dataset(dataset_id: str, episodes: list, descriptor, env: str, env_options: Optional[dict] = None,
                  algorithm: str = "", description: str = "") -> str:
    """Writes ``episodes`` (:class:`Episode`) as Minari dataset ``dataset_id`` in the Minari
    root and returns its folder. ValueError if the id exists or is malformed."""
    minari = _minari()
    from minari.data_collector import EpisodeBuffer
    if not episodes:
        raise ValueError("no complete episode to write")
    observation_space, action_space = spaces_of(descriptor)
    buffers = [EpisodeBuffer(id=k, observations=np.asarray(e.observations), actions=np.asarray(e.actions),
                             rewards=[float(r) for r in e.rewards],
                             terminations=[False] * (e.num_steps - 1) + [bool(e.terminated)],
                             truncations=[False] * (e.num_steps - 1) + [bool(e.truncated)])
               for k, e in enumerate(episodes)]
    with warnings.catch_warnings():   # no Gymnasium env spec: these envs are named by the metadata below
        warnings.simplefilter("ignore")
        try:
            dataset = minari.create_dataset_from_buffers(
                dataset_id, buffers, observation_space=observation_space, action_space=action_space,
                algorithm_name=algorithm or None, description=description or None, data_format="hdf5",
                author="muzero", author_email="-", code_permalink="-")
        except ValueError as e:
            raise ValueError(f"--out={dataset_id!r}: {e}") from None
    dataset.storage.update_metadata({ENV_KEY: json.dumps({"env": env, "env_options": dict(env_options or {})})})
    return os.path.dirname(str(dataset.storage.data_path))


def open_dataset(ref: str):
    """The Minari dataset at folder ``ref`` (a dataset folder or its ``data`` folder) or with
    id ``ref`` in the local Minari root; ValueError naming where it looked otherwise."""
    minari = _minari()
    if os.path.isdir(ref):
        data = os.path.join(ref, "data") if os.path.isdir(os.path.join(ref, "data")) else ref
        try:
            return minari.MinariDataset(data)
        except Exception as e:   # not a Minari folder
            raise ValueError(f"--dataset={ref!r} is not a Minari dataset folder ({type(e).__name__}: {e})") from None
    from minari.storage.datasets_root_dir import get_dataset_path
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return minari.load_dataset(ref, download=False)
    except Exception as e:
        local = sorted(minari.list_local_datasets())
        raise ValueError(f"--dataset={ref!r} is neither a folder nor a dataset in the Minari root "
                         f"{get_dataset_path()} ({type(e).__name__}); local datasets: "
                         f"{', '.join(local) or 'none'}") from None


def dataset_env(dataset) -> Optional[dict]:
    """{"env", "env_options"} a dataset written here was played in; None for other datasets."""
    text = dataset.storage.metadata.get(ENV_KEY)
    return json.loads(text) if text else None


def check_matches(dataset, descriptor, env: str, ref: str = "the dataset") -> None:
    """ValueError (one line, naming both) unless the dataset's observation and action spaces
    are the env's, and, for a dataset written here, its env is ``env``."""
    import gymnasium
    observation_space, action_space = spaces_of(descriptor)
    theirs_obs, theirs_act = dataset.observation_space, dataset.action_space
    same_obs = (isinstance(theirs_obs, gymnasium.spaces.Box) and tuple(theirs_obs.shape) == observation_space.shape
                and theirs_obs.dtype == observation_space.dtype)
    if isinstance(action_space, gymnasium.spaces.Discrete):
        same_act = isinstance(theirs_act, gymnasium.spaces.Discrete) and int(theirs_act.n) == int(action_space.n)
    else:
        same_act = isinstance(theirs_act, gymnasium.spaces.Box) and tuple(theirs_act.shape) == action_space.shape
    if not (same_obs and same_act):
        raise ValueError(f"{ref} holds observations {_describe_space(theirs_obs)} and actions "
                         f"{_describe_space(theirs_act)}; env {env!r} has observations "
                         f"{_describe_space(observation_space)} and actions {_describe_space(action_space)}")
    recorded = dataset_env(dataset)
    if recorded is not None and recorded["env"] != env:
        raise ValueError(f"{ref} was recorded in env {recorded['env']!r}, not {env!r}")


def read_episodes(dataset) -> Iterator[Episode]:
    """The dataset's episodes, in order, as :class:`Episode`."""
    for data in dataset.iterate_episodes():
        terminations = np.asarray(data.terminations, bool)
        truncations = np.asarray(data.truncations, bool)
        yield Episode(observations=np.asarray(data.observations), actions=np.asarray(data.actions),
                      rewards=np.asarray(data.rewards, np.float32).reshape(-1),
                      terminated=bool(terminations[-1]), truncated=bool(truncations[-1] and not terminations[-1]))


class Enough(Exception):
    """Raised out of the player by :class:`EpisodeCollector` once its complete episodes hold
    ``max_steps`` steps: the caller catches it and writes what was collected."""


class EpisodeCollector:
    """Collects the episodes a player plays, as :class:`Episode`; with probability
    ``epsilon`` each step of each env plays a uniformly random legal action (a uniform one in
    the bounds for box actions) instead of the player's. With ``max_steps`` > 0 the step that
    completes the episode bringing the collected steps to ``max_steps`` raises :class:`Enough`.

        collector = EpisodeCollector(epsilon=0.25, seed=0)
        request = core.PlayRequest(..., make_batch=collector.make_batch)   # any algorithm's player
        builder.play_export(export_dir, request)
        collector.episodes                                                  # complete episodes, in order

    The episodes hold the actions the envs were stepped with. (The player is not told of a
    replaced action: a player that stacks its own past actions into its input, MuZero on
    image envs, sees its chosen one there.)"""

    def __init__(self, epsilon: float = 0.0, seed: int = 0, max_steps: int = 0):
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"--epsilon={epsilon!r} must be a number in [0, 1]")
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 0:
            raise ValueError(f"--steps={max_steps!r} must be an integer >= 0")
        self.epsilon = float(epsilon)
        self.max_steps = max_steps
        self.episode_steps = 0     # steps of the complete episodes
        self.rng = np.random.default_rng([seed, 77])
        self.episodes: list = []
        self.random_actions = 0
        self.steps = 0
        self.env, self.env_options, self.descriptor = None, {}, None   # set by make_batch

    def make_batch(self, env: str, num_envs: int, seed: int = 0, **options):
        import envs
        batch = envs.make_batch(env, num_envs, seed=seed, **options)
        if batch.descriptor.two_player:
            batch.close()
            raise ValueError(f"env {env!r} is a two-player game; recorded episodes hold one player's view only")
        self.env, self.env_options, self.descriptor = env, dict(options), batch.descriptor
        return _CollectingBatch(batch, self)


class _CollectingBatch:
    """An EnvBatch that records what :class:`EpisodeCollector` needs; the rest is the wrapped one's."""

    def __init__(self, batch, collector: EpisodeCollector):
        self._batch = batch
        self._collector = collector
        self._observations = None   # per env: the open episode's observations
        self._actions = None
        self._rewards = None
        self._legal = None

    def __getattr__(self, name):
        return getattr(self._batch, name)

    def reset(self):
        step = self._batch.reset()
        n = len(step.observation)
        self._observations = [[np.array(step.observation[i])] for i in range(n)]
        self._actions, self._rewards = [[] for _ in range(n)], [[] for _ in range(n)]
        self._legal = step.legal_mask
        return step

    def _explore(self, actions) -> np.ndarray:
        c, d = self._collector, self._batch.descriptor
        actions = np.array(actions, copy=True)
        if c.epsilon <= 0.0:
            return actions
        chosen = c.rng.random(len(actions)) < c.epsilon
        for i in np.flatnonzero(chosen):
            if d.is_continuous:
                actions[i] = c.rng.uniform(np.array(d.action_low), np.array(d.action_high)).astype(actions.dtype)
            else:
                legal = np.flatnonzero(self._legal[i]) if self._legal is not None else np.arange(d.num_actions)
                actions[i] = c.rng.choice(legal)
        c.random_actions += int(chosen.sum())
        return actions

    def step(self, actions):
        actions = self._explore(actions)
        nxt = self._batch.step(actions)
        c = self._collector
        c.steps += len(actions)
        for i in range(len(actions)):
            self._actions[i].append(np.array(actions[i]))
            self._rewards[i].append(float(nxt.reward[i]))
            if nxt.episode_length[i] >= 0:    # ended (env i is reset already)
                final = nxt.final_observation[i] if nxt.final_observation is not None else nxt.observation[i]
                self._observations[i].append(np.array(final))
                c.episodes.append(Episode(observations=np.stack(self._observations[i]),
                                          actions=np.stack(self._actions[i]),
                                          rewards=np.asarray(self._rewards[i], np.float32),
                                          terminated=bool(nxt.terminated[i]), truncated=bool(nxt.truncated[i])))
                c.episode_steps += c.episodes[-1].num_steps
                self._observations[i], self._actions[i], self._rewards[i] = [np.array(nxt.observation[i])], [], []
            else:
                self._observations[i].append(np.array(nxt.observation[i]))
        self._legal = nxt.legal_mask
        if 0 < c.max_steps <= c.episode_steps:
            raise Enough(f"{len(c.episodes)} episodes hold {c.episode_steps} steps")
        return nxt
