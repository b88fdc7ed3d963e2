"""Plays exported SavedModels: greedy MuZero search over a batch of envs, no training code.

The model comes from ``tf.saved_model.load`` (its two signatures) and the
``muzero_export.json`` beside it; the network code in ``muzero.network`` is never
imported. Hidden states of the search trees stay in this process, in a NumPy array
``[E, N, *hidden]`` keyed by (env, node), exactly as the learner's latent cache
keys them.

``run.json`` (written by the learner next to each export) names the env, its
options and the search settings; without it, pass them explicitly.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional, Sequence

import numpy as np

import envs
from muzero.algorithms.muzero.acting import SearchPolicy
from muzero.config import from_dict, parse_override, to_dict
from muzero.mcts.config import SearchConfig
from muzero.observation import FrameHistory

RUN_JSON = "run.json"


class SavedModelPlayer:
    """Greedy (temperature 0, no noise) MuZero player for E envs from an exported SavedModel."""

    def __init__(self, export_dir: str, search_config: SearchConfig, num_envs: int):
        import tensorflow as tf  # the SavedModel runtime only
        self._tf = tf
        spec_path = os.path.join(export_dir, "muzero_export.json")
        if not os.path.isfile(spec_path):
            raise ValueError(f"--export_dir={export_dir!r} holds no muzero_export.json: pass a directory "
                             "written by the learner (<logdir>/export/step-<N>)")
        with open(spec_path) as f:
            self.spec = json.load(f)
        self.model = load_saved_model(export_dir)
        self._initial = self.model.signatures["initial_inference"]
        self._recurrent = self.model.signatures["recurrent_inference"]
        self.search_config = search_config
        self.num_envs = num_envs
        self.num_actions = int(self.spec["num_actions"])
        hidden = tuple(self.spec["hidden_shape"])
        self._hidden = np.zeros((num_envs, search_config.num_nodes) + hidden, np.float32)
        self.input_dtype = np.dtype(self.spec["observation"]["dtype"])
        self.last_root_value: Optional[np.ndarray] = None  # set by act()
        self.last_result = None   # act()'s SearchResult (root Q values, visits), for inspection
        self._policies: dict = {}   # in_tree_masks -> SearchPolicy (its tree workspace is reused)

    def _call(self, fn, **inputs) -> dict:
        out = fn(**{k: self._tf.constant(v) for k, v in inputs.items()})
        return {k: v.numpy() for k, v in out.items()}

    def act(self, observation: np.ndarray, legal_mask: np.ndarray, to_play: np.ndarray,
            rng: np.random.Generator, in_tree_masks: bool = False) -> np.ndarray:
        """observation [E, *input_shape] -> greedy actions [E]; ``last_root_value`` [E] is the
        model's value of those observations (before the search)."""
        root = self._call(self._initial, observation=observation.astype(self.input_dtype, copy=False))
        self.last_root_value = root["value"]
        self._hidden[:, 0] = root["hidden_state"]
        rows = np.arange(self.num_envs)

        def recurrent_fn(parent_node, action, new_node):
            out = self._call(self._recurrent, hidden_state=self._hidden[rows, parent_node],
                             action=action.astype(np.int32))
            self._hidden[rows, new_node] = out["hidden_state"]
            return out["reward"], out["value"], out["policy_logits"]

        policy = self._policies.get(in_tree_masks)
        if policy is None:
            policy = self._policies[in_tree_masks] = SearchPolicy(
                self.search_config.for_evaluation(), self.num_envs, self.num_actions, rng, evaluation=True,
                in_tree_masks=in_tree_masks)
        policy.rng = rng
        actions, self.last_result = policy.act(root["value"], root["policy_logits"], legal_mask, to_play, recurrent_fn)
        return actions


def load_saved_model(export_dir: str):
    """tf.saved_model.load, with a corrupt or partial export reported as one ValueError."""
    import tensorflow as tf
    try:
        return tf.saved_model.load(export_dir)
    except Exception as e:   # DataLossError, NotFoundError, ... from a damaged variables file
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        raise ValueError(f"the SavedModel in {export_dir!r} cannot be loaded ({type(e).__name__}: {first}); "
                         "the export is damaged: export again from the run's checkpoint") from None


def load_run(export_dir: str) -> Optional[dict]:
    path = os.path.join(export_dir, RUN_JSON)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def write_run(export_dir: str, env: str, env_options: dict, search_config: SearchConfig,
              stack_frames: int) -> None:
    with open(os.path.join(export_dir, RUN_JSON), "w") as f:
        json.dump({"env": env, "env_options": env_options, "stack_frames": stack_frames,
                   "search": to_dict(search_config)}, f, indent=2)


def search_config_from_run(run: dict) -> SearchConfig:
    return from_dict(SearchConfig, run["search"])


def override_search(search_config: Optional[SearchConfig], simulations: Optional[int] = None,
                    items: Sequence[str] = ()) -> Optional[SearchConfig]:
    """An export's search settings with ``simulations`` and each ``search.field=value`` of
    ``items`` (``python -m muzero.eval --set``) applied, each checked as the learner's
    ``--set`` is. ``search_config`` None (an export without run.json) needs ``simulations``.
    Returns ``search_config`` unchanged when there is nothing to apply."""
    if simulations is None and not items:
        return search_config
    if search_config is None and simulations is None:
        raise ValueError("this export has no run.json with its search settings: pass --simulations "
                         "(and --env) with --set")
    config = search_config if search_config is not None else SearchConfig()
    if simulations is not None:
        config = dataclasses.replace(config, num_simulations=simulations)
    named = set()
    for item in items:
        _, field, value = parse_override(item, {"search": SearchConfig})
        config = dataclasses.replace(config, **{field: value})
        named.add(field)
    # Here every search is an evaluation: a root rule or value scale named on the command
    # line is the one played, even where the export's run sets an evaluation-only one.
    if "root_selection" in named and "eval_root_selection" not in named:
        config = dataclasses.replace(config, eval_root_selection="")
    if "gumbel_value_scale" in named and "eval_gumbel_value_scale" not in named:
        config = dataclasses.replace(config, eval_gumbel_value_scale=0.0)
    return config


def evaluate(export_dir: str, episodes: int, num_envs: int = 8, seed: int = 0,
             env: Optional[str] = None, env_options: Optional[dict] = None,
             search_config: Optional[SearchConfig] = None, opponent=None, log=None,
             make_batch=None) -> dict:
    """Plays ``episodes`` episodes greedily; returns returns, lengths and their mean.
    ``make_batch`` makes the envs (default ``envs.make_batch``).

    ``opponent`` (two-player games): a callable ``(board, to_play) -> action`` playing
    the other side; the agent plays player 0 in even-numbered envs and player 1 in odd
    ones, and the result per game is +1 win / 0 draw / -1 loss for the agent.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes={episodes!r} must be an integer >= 1")
    if not os.path.isdir(export_dir):
        raise ValueError(f"--export_dir={export_dir!r} is not a directory")
    run = load_run(export_dir) or {}
    env = env or run.get("env")
    if env is None:
        raise ValueError(f"{export_dir} has no {RUN_JSON}: pass the env name")
    env_options = env_options if env_options is not None else run.get("env_options", {})
    if search_config is None:
        if "search" not in run:
            raise ValueError(f"{export_dir} has no {RUN_JSON} with search settings: pass --simulations")
        search_config = search_config_from_run(run)
    stack = int(run.get("stack_frames", 1))
    descriptor = envs.describe(env, **env_options)
    player = SavedModelPlayer(export_dir, search_config, num_envs)
    from muzero.observation import network_input_shape
    expected = tuple(network_input_shape(tuple(descriptor.observation_shape), descriptor.is_image, stack))
    exported = tuple(player.spec["observation"]["shape"])
    if expected != exported or descriptor.num_actions != player.num_actions:
        raise ValueError(f"env {env!r} gives network inputs {list(expected)} and {descriptor.num_actions} actions; "
                         f"the export takes {list(exported)} and {player.num_actions}: pass the env it was "
                         "trained on")
    batch = (make_batch or envs.make_batch)(env, num_envs, seed=seed, **env_options)
    history = FrameHistory(num_envs, descriptor.observation_shape, stack, descriptor.num_actions) \
        if descriptor.is_image else None
    rng = np.random.default_rng(seed)
    step = batch.reset()
    if history is not None:
        history.start(step.observation, np.ones(num_envs, bool))
    agent_side = np.arange(num_envs) % 2
    returns, lengths = [], []
    outcomes = {0: [], 1: []}   # agent's side -> +1 win / 0 draw / -1 loss per finished game
    per_side = -(-episodes // 2)

    def finished() -> bool:
        if opponent is None:
            return len(returns) >= episodes
        return min(len(outcomes[0]), len(outcomes[1])) >= per_side

    while not finished():
        obs = history.network_input() if history is not None else step.observation
        actions = player.act(obs, step.legal_mask, step.to_play, rng,
                             in_tree_masks=descriptor.two_player and descriptor.has_legal_mask)
        if opponent is not None:
            boards = batch.boards
            theirs = step.to_play != agent_side
            for i in np.flatnonzero(theirs):
                actions[i] = opponent(boards[i], int(step.to_play[i]))
        mover = step.to_play.copy()
        nxt = batch.step(actions)
        if history is not None:
            history.push(nxt.observation, actions)
            history.start(nxt.observation, nxt.done)
        for i in np.flatnonzero(nxt.episode_length >= 0):
            returns.append(float(nxt.episode_return[i]))
            lengths.append(int(nxt.episode_length[i]))
            if opponent is not None:
                won = nxt.reward[i] > 0
                outcomes[int(agent_side[i])].append(0 if not won else (1 if mover[i] == agent_side[i] else -1))
        step = nxt
    result = {"returns": returns[:episodes], "lengths": lengths[:episodes],
              "mean_return": float(np.mean(returns[:episodes]))}
    if opponent is not None:
        o = np.array(outcomes[0][:per_side] + outcomes[1][:per_side])   # first player's games first
        result.update(wins=int((o == 1).sum()), draws=int((o == 0).sum()), losses=int((o == -1).sum()),
                      losses_as_first=int((o[:per_side] == -1).sum()),
                      losses_as_second=int((o[per_side:] == -1).sum()))
    batch.close()
    return result
