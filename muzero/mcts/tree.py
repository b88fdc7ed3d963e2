"""Search state for a batch of trees as flat arrays, plus the search's input and output records.

A batch of ``B`` trees with ``N = S + 1`` preallocated nodes each (``S`` simulations)
lives in a handful of arrays: one entry per node (``[B, N]``), one per edge
(``[B, N, A]``) and one min/max pair per tree. There is no Python object per node;
the Numba kernels in :mod:`muzero.mcts.kernels` read and write these arrays in place.

Node numbering is a wire contract: the root is node 0 of every tree and simulation
``s`` (0-based) creates node ``s + 1`` in every tree, so the inference server can key
its latent cache by ``(slot, node)``.

Imports only NumPy; never TensorFlow.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

ROOT_INDEX = 0
# children_index values that are not node ids.
UNVISITED = -1   # legal action whose child node does not exist yet
ILLEGAL = -2     # action masked out at this node; never selected

# Slots of Tree.min_max.
MIN_SLOT = 0
MAX_SLOT = 1


class Tree(NamedTuple):
    """All per-node, per-edge and per-tree statistics of B searches.

    Statistics are float64. ``node_value_sum`` is from the point of view of the player
    to move at that node. Edge statistics repeat the child's visits and Q next to the
    prior: ``children_q`` is ``reward + discount * sign * value_sum / visits`` of the
    child, from the point of view of the player choosing at the parent, with ``sign =
    -1`` when the two players differ (two-player games), else ``+1``;
    ``children_explore`` is the per-edge factor of the pUCT exploration term. During a
    search the kernels keep visits, value sums, depths, players and edge statistics in
    private records and write them here at its end (the root's before each root hook
    call); ``search`` returns a complete Tree.
    """

    node_visits: np.ndarray      # [B, N] int32   times the node was on a backed-up path
    node_value_sum: np.ndarray   # [B, N] float64 sum of backed-up returns (node's player;
    #                              the exact sum rounded once, whatever their order)
    node_reward: np.ndarray      # [B, N] float64 reward of the edge into the node (0 at the root)
    node_raw_value: np.ndarray   # [B, N] float64 the network's value when the node was created
    node_parent: np.ndarray      # [B, N] int32   parent node id (-1 at the root)
    node_action: np.ndarray      # [B, N] int32   action from the parent (-1 at the root)
    node_to_play: np.ndarray     # [B, N] int32   player to move at the node (0 or 1)
    node_depth: np.ndarray       # [B, N] int32   root is 0
    children_index: np.ndarray   # [B, N, A] int32 child node id, UNVISITED or ILLEGAL
    children_prior: np.ndarray   # [B, N, A] float64 prior (root: after exploration noise)
    children_explore: np.ndarray  # [B, N, A] float64 prior / (1 + child visits); -inf if illegal
    children_visits: np.ndarray  # [B, N, A] int32 visits of the child (unset if no child)
    children_q: np.ndarray       # [B, N, A] float64 Q of the edge (unset if no child)
    min_max: np.ndarray          # [B, 2] float64 (min, max) of Q seen in each tree

    @property
    def batch_size(self) -> int:
        return self.node_visits.shape[0]

    @property
    def num_nodes(self) -> int:
        return self.node_visits.shape[1]

    @property
    def num_actions(self) -> int:
        return self.children_index.shape[2]


def allocate_tree(batch_size: int, num_nodes: int, num_actions: int) -> Tree:
    """Uninitialised arrays for ``batch_size`` trees; the kernels write what they read.

    Every simulation creates exactly one node per tree and writes its node entries and
    its ``children_index`` and ``children_prior`` rows; the end of the search writes the
    other node entries, ``children_explore`` rows, and ``children_visits`` and
    ``children_q`` of existing edges; where ``children_index < 0`` those two are
    unspecified (SearchResult masks them).
    """
    b, n, a = batch_size, num_nodes, num_actions
    return Tree(
        node_visits=np.empty((b, n), np.int32),
        node_value_sum=np.empty((b, n), np.float64),
        node_reward=np.empty((b, n), np.float64),
        node_raw_value=np.empty((b, n), np.float64),
        node_parent=np.empty((b, n), np.int32),
        node_action=np.empty((b, n), np.int32),
        node_to_play=np.empty((b, n), np.int32),
        node_depth=np.empty((b, n), np.int32),
        children_index=np.empty((b, n, a), np.int32),
        children_prior=np.empty((b, n, a), np.float64),
        children_explore=np.empty((b, n, a), np.float64),
        children_visits=np.empty((b, n, a), np.int32),
        children_q=np.empty((b, n, a), np.float64),
        min_max=np.empty((b, 2), np.float64),
    )


class RootOutputs(NamedTuple):
    """The network's output at the B roots (from ``initial_inference``)."""

    value: np.ndarray                         # [B] float32, root player's point of view
    policy_logits: np.ndarray                 # [B, A] float32
    legal_mask: Optional[np.ndarray] = None   # [B, A] bool; None = every action legal
    to_play: Optional[np.ndarray] = None      # [B] int, 0 or 1; None = all 0


class SearchResult(NamedTuple):
    """What a search returns; the first four fields are what actors and replay store."""

    visit_counts: np.ndarray    # [B, A] int32 visits of the root's children
    policy_target: np.ndarray   # [B, A] float32 visit_counts / num_simulations (pUCT) or
    #                             softmax(log prior + sigma(completed Q)) (Gumbel)
    root_value: np.ndarray      # [B] float32 mean backed-up return at the root (root player)
    root_q: np.ndarray          # [B, A] float32 Q(root, a) (root player); 0 where unvisited
    root_prior: np.ndarray      # [B, A] float32 root prior after exploration noise
    root_network_value: np.ndarray  # [B] float32 the network's value at the root, unchanged
    tree: Tree                  # the whole search state, for inspection and reanalyse
    # Gumbel MuZero: the action [B] int32 the search chose (None for pUCT, whose actions
    # are sampled from the visit counts by select_action).
    action: Optional[np.ndarray] = None
