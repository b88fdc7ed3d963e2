"""MuZero's acting policy: one batched search per step and the move chosen from it.

Shared by the MuZero actor (``muzero.algorithms.muzero.actor``) and the evaluator
(``muzero.algorithms.muzero.evaluator``), so that both play by the same rules: root Dirichlet noise
(training only), the search, the visit-count temperature keyed on the learner's
training step, greedy moves from ``greedy_after_moves`` on, and legal masks (at the
root, and inside the tree for board games where a move occupies a cell).

Where the network answers is the caller's business: ``recurrent_fn(parent_node [E],
action [E], new_node [E]) -> (reward [E], value [E], policy_logits [E, A])`` may be an
RPC to the learner's latent cache or a local SavedModel.

``RandomPolicy`` is the acting policy of a pretraining run (``PretrainConfig``): moves
drawn uniformly from the legal ones, no search and no network.

Imports no TensorFlow.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

from muzero.mcts.config import SearchConfig
from muzero.mcts import RootOutputs, allocate_tree, search, select_action


class TreeLegalMasks:
    """Legal masks of in-tree nodes for board games where a move occupies a cell.

    Tracks, per tree and node, the actions taken on the path from the root
    (``taken [B, N, A]``); a node's legal actions are the root's legal actions minus
    those. Used for tic-tac-toe-like envs (``descriptor.has_legal_mask`` and
    two-player). Where nothing would be legal (a full board) every action is allowed:
    the learned model treats play past the end as absorbing.
    """

    def __init__(self, root_legal: np.ndarray, num_nodes: int):
        b, a = root_legal.shape
        self.root_legal = root_legal
        self.taken = np.zeros((b, num_nodes, a), bool)

    def __call__(self, parent_node, action, new_node) -> np.ndarray:
        rows = np.arange(len(parent_node))
        self.taken[rows, new_node] = self.taken[rows, parent_node]
        self.taken[rows, new_node, action] = True
        legal = self.root_legal & ~self.taken[rows, new_node]
        return np.where(legal.any(axis=1, keepdims=True), legal, True)


class SearchPolicy:
    """Chooses moves for E envs by a batched search.

    ``evaluation`` plays greedily (temperature 0, no root noise); otherwise the
    temperature follows ``search.temperature_at(training_step)`` and moves with an
    in-episode index >= ``search.greedy_after_moves`` are the most visited. With
    ``root_selection="gumbel"`` the search's own choice is played (training: with Gumbel
    noise at the root; evaluation: without), and no temperature applies. The last
    ``round(search.greedy_env_fraction * num_envs)`` envs always play the most visited action.
    ``in_tree_masks`` turns on :class:`TreeLegalMasks` (two-player board games).
    """

    def __init__(self, search_config: SearchConfig, num_envs: int, num_actions: int,
                 rng: np.random.Generator, *, evaluation: bool, in_tree_masks: bool):
        self.config = search_config
        self.rng = rng
        self.evaluation = evaluation
        self.in_tree_masks = in_tree_masks
        self.workspace = allocate_tree(num_envs, search_config.num_nodes, num_actions)
        greedy = int(round(search_config.greedy_env_fraction * num_envs))
        self.greedy_envs = np.arange(num_envs) >= num_envs - greedy

    def _with_masks(self, recurrent_fn: Callable, root_legal: np.ndarray) -> Callable:
        if not self.in_tree_masks:
            return recurrent_fn
        masks = TreeLegalMasks(root_legal, self.config.num_nodes)

        def masked(parent_node, action, new_node):
            reward, value, logits = recurrent_fn(parent_node, action, new_node)[:3]
            return reward, value, logits, masks(parent_node, action, new_node)
        return masked

    def act(self, root_value: np.ndarray, root_logits: np.ndarray, legal_mask: np.ndarray,
            to_play: np.ndarray, recurrent_fn: Callable, training_step: int = 0,
            move_index: Optional[np.ndarray] = None) -> tuple:
        """root_value [E], root_logits [E, A], legal_mask [E, A] bool, to_play [E] ->
        (actions [E] int, SearchResult). ``move_index`` [E]: moves made so far in each
        env's episode (for ``greedy_after_moves``)."""
        c = self.config
        result = search(RootOutputs(value=np.asarray(root_value, np.float32),
                                    policy_logits=np.asarray(root_logits, np.float32),
                                    legal_mask=legal_mask, to_play=to_play),
                        self._with_masks(recurrent_fn, legal_mask), c, self.rng,
                        add_noise=not self.evaluation, workspace=self.workspace)
        if result.action is not None:   # Gumbel MuZero: the search chose (its noise is the exploration)
            return result.action.astype(np.int64), result
        temperature = 0.0 if self.evaluation else c.temperature_at(training_step)
        actions = select_action(result.visit_counts, temperature, self.rng)
        if temperature > 0:
            greedy = self.greedy_envs
            if c.greedy_after_moves >= 0 and move_index is not None:
                greedy = greedy | (move_index >= c.greedy_after_moves)
            actions[greedy] = np.argmax(result.visit_counts[greedy], axis=1)
        return actions, result


@dataclasses.dataclass
class RandomResult:
    """What a segment records of a random move: root_value [E] (zeros: nothing was
    searched) and policy_target [E, A] (the behaviour policy, uniform over legal moves)."""

    root_value: np.ndarray
    policy_target: np.ndarray


class RandomPolicy:
    """Uniformly random legal moves for E envs (the actors of a pretraining run).

    ``act(legal_mask [E, A] bool) -> (actions [E] int64, RandomResult)``. A row with no
    legal action (never produced by the envs) is treated as all legal. Draws come from
    ``rng`` only, so an actor's moves are a function of its seed.
    """

    def __init__(self, num_actions: int, rng: np.random.Generator):
        self.num_actions = int(num_actions)
        self.rng = rng

    def act(self, legal_mask: np.ndarray) -> tuple:
        legal = np.asarray(legal_mask, bool).reshape(-1, self.num_actions)
        legal = np.where(legal.any(axis=1, keepdims=True), legal, True)
        # The argmax of i.i.d. uniform draws over the legal entries is uniform among them.
        draws = np.where(legal, self.rng.random(legal.shape), -1.0)
        actions = np.argmax(draws, axis=1).astype(np.int64)
        policy = legal / legal.sum(axis=1, keepdims=True)
        return actions, RandomResult(np.zeros(len(legal), np.float32), policy.astype(np.float32))
