"""Batched Monte-Carlo tree search for MuZero over flat arrays, compiled with Numba.

Public API:
    search(root_outputs, recurrent_fn, config, rng, *, noise=None, add_noise=True) -> SearchResult
    select_action(visit_counts, temperature, rng) -> [B] actions
    RootOutputs, SearchResult, Tree

How the search works (node numbering, formulas, deviations from the MuZero paper and
SEED RL) is in docs/SEARCH.md. This package imports NumPy and Numba only; never
TensorFlow.
"""
from muzero.mcts.search import dirichlet_noise, search, select_action
from muzero.mcts.tree import (ILLEGAL, ROOT_INDEX, UNVISITED, RootOutputs, SearchResult, Tree,
                              allocate_tree)

__all__ = [
    "search", "select_action", "dirichlet_noise", "RootOutputs", "SearchResult", "Tree",
    "allocate_tree", "ROOT_INDEX", "UNVISITED", "ILLEGAL",
]
