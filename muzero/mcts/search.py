"""The search driver: S simulations over B trees, one ``recurrent_fn`` call per simulation.

``search`` checks its inputs, creates the roots, then loops: the kernel selects one edge
per tree, ``recurrent_fn(parent_node, action, new_node)`` evaluates the whole batch of
leaves (a gRPC client, a local model or a test fake), and the next kernel call expands
and backs up those leaves and selects the next edges in the same pass, so a simulation
costs one kernel call and one ``recurrent_fn`` call. The tree never holds hidden states:
the caller keys them by ``(tree, node)``, and node ``s + 1`` is created by simulation
``s`` in every tree.

``select_action`` turns root visit counts into actions with a temperature.

Imports NumPy, Numba (through the kernels) and :mod:`muzero.mcts.config`; never TensorFlow.
"""
from __future__ import annotations

import functools
import weakref
from typing import Callable, Optional

import numba
import numpy as np

from muzero.mcts.config import SearchConfig
from muzero.mcts import gumbel as gumbel_schedule
from muzero.mcts import gumbel_kernels, kernels
from muzero.mcts import noise as tree_noise
from muzero.mcts.tree import ILLEGAL, RootOutputs, SearchResult, Tree, allocate_tree

# recurrent_fn(parent_node [B] int32, action [B] int32, new_node [B] int32)
#   -> (reward [B], value [B], policy_logits [B, A]) or the same plus legal_mask [B, A] bool.
RecurrentFn = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple]
# root_action_fn(tree, simulation) -> [B] int32 root actions forced for that simulation.
RootActionFn = Callable[[Tree, int], np.ndarray]


class _Scratch:
    """What a search of one shape (B, N, A) needs besides the Tree: the selection records
    (:func:`kernels.allocate_records`), the [S, B] edge rows and their row views, and
    constant inputs. Kept with a reused workspace, so that its searches neither allocate
    nor page-fault them; the kernels overwrite what they read."""

    def __init__(self, shape: tuple):
        batch, num_nodes, num_actions = shape
        sims = num_nodes - 1
        self.shape = shape
        self.records = kernels.allocate_records(*shape)
        # Row s holds the edge simulation s expands; it creates node s + 1 in every tree.
        self.parents = np.empty((sims, batch), np.int32)   # [S, B]
        self.actions = np.empty((sims, batch), np.int32)   # [S, B]
        self.new_nodes = np.repeat(np.arange(1, num_nodes, dtype=np.int32)[:, None], batch, axis=1)
        self.new_nodes.flags.writeable = False   # only handed to recurrent_fn
        self.rows = (list(self.parents), list(self.actions), list(self.new_nodes))
        self.no_root_actions = np.full(batch, -1, np.int32)
        self.zeros = np.zeros(batch, np.float32)
        self.zero_logits = np.zeros((batch, num_actions), np.float32)
        self.all_legal = np.ones((batch, num_actions), np.bool_)


# Scratch of each workspace: id(workspace.node_visits) -> (weak reference to that array,
# _Scratch); an entry leaves when its array is freed.
_WORKSPACE_SCRATCH: dict = {}


def _scratch_for(workspace: Optional[Tree], shape: tuple) -> _Scratch:
    """Scratch for a search of ``shape`` (B, N, A): fresh, or kept with the workspace."""
    if workspace is None:
        return _Scratch(shape)
    key = workspace.node_visits
    entry = _WORKSPACE_SCRATCH.get(id(key))
    if entry is not None and entry[0]() is key and entry[1].shape == shape:
        return entry[1]
    scratch = _Scratch(shape)
    if entry is None or entry[0]() is not key:
        weakref.finalize(key, _WORKSPACE_SCRATCH.pop, id(key), None)
    _WORKSPACE_SCRATCH[id(key)] = (weakref.ref(key), scratch)
    return scratch


@functools.lru_cache(maxsize=64)
def _exploration_table(num_simulations: int, pb_c_base: float, pb_c_init: float, offset: int) -> np.ndarray:
    """kernels.puct_tables, computed once per setting (kernels only read it)."""
    return kernels.puct_tables(num_simulations, pb_c_base, pb_c_init, offset)


_FLOAT32 = np.dtype(np.float32)   # NumPy's one float32 dtype object (compared by identity)


def _as_float32(name: str, value, shape: tuple) -> np.ndarray:
    array = np.ascontiguousarray(value, dtype=np.float32)
    if array.shape != shape:
        raise ValueError(f"{name} has shape {array.shape}; expected {shape}")
    return array


def _as_mask(name: str, value, shape: tuple) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype != np.bool_:
        raise ValueError(f"{name} has dtype {array.dtype}; expected bool")
    if array.shape != shape:
        raise ValueError(f"{name} has shape {array.shape}; expected {shape}")
    return np.ascontiguousarray(array)


def _check_root(root_outputs: RootOutputs) -> tuple:
    """Validated root arrays: value [B] f32, logits [B, A] f32, mask [B, A] bool or None, to_play [B] i32."""
    if not isinstance(root_outputs, RootOutputs):
        raise TypeError(f"root_outputs must be a RootOutputs, got {type(root_outputs).__name__}")
    logits = np.ascontiguousarray(root_outputs.policy_logits, dtype=np.float32)
    if logits.ndim != 2 or logits.shape[0] < 1 or logits.shape[1] < 1:
        raise ValueError(f"root policy_logits has shape {logits.shape}; expected [B, A] with B, A >= 1")
    batch, num_actions = logits.shape
    value = _as_float32("root value", root_outputs.value, (batch,))
    if not np.all(np.isfinite(value)):
        raise ValueError(f"root value is not finite in trees {np.flatnonzero(~np.isfinite(value)).tolist()}")
    mask = None
    if root_outputs.legal_mask is not None:
        mask = _as_mask("root legal_mask", root_outputs.legal_mask, (batch, num_actions))
        empty = np.flatnonzero(~mask.any(axis=1))
        if empty.size:
            raise ValueError(f"root legal_mask allows no action in trees {empty.tolist()}; "
                             "every root needs at least one legal action")
    legal = mask if mask is not None else np.ones((batch, num_actions), bool)
    if not np.all(np.isfinite(logits) | ~legal):
        raise ValueError("root policy_logits are not finite at legal actions in trees "
                         f"{np.flatnonzero(~np.all(np.isfinite(logits) | ~legal, axis=1)).tolist()}")
    if root_outputs.to_play is None:
        to_play = np.zeros(batch, np.int32)
    else:
        to_play = np.asarray(root_outputs.to_play)
        if to_play.shape != (batch,):
            raise ValueError(f"root to_play has shape {to_play.shape}; expected {(batch,)}")
        if not np.all((to_play == 0) | (to_play == 1)):
            raise ValueError(f"root to_play must be 0 or 1, got values {np.unique(to_play).tolist()}")
        to_play = np.ascontiguousarray(to_play, dtype=np.int32)
    return value, logits, mask, to_play


def dirichlet_noise(rng: Optional[np.random.Generator], legal: np.ndarray, alpha: float,
                    seeds: Optional[np.ndarray] = None) -> np.ndarray:
    """Dirichlet(alpha) draws over each row's legal actions; [B, A] bool -> [B, A] float64.

    Row b comes from its own random stream seeded by ``seeds[b]`` (int64; drawn from rng
    in one call when None), so a tree's noise depends on its seed, legal actions and
    alpha only, not on the rest of the batch (:mod:`muzero.mcts.noise`). Each row
    normalises independent Gamma(alpha, 1) draws over its legal actions; illegal actions
    get 0; a row whose draws all underflow to 0 (tiny alpha) is uniform over its legal
    actions.
    """
    legal = np.ascontiguousarray(legal, dtype=np.bool_)
    if seeds is None:
        seeds = rng.integers(0, 2 ** 63 - 1, size=legal.shape[0], dtype=np.int64)
    seeds = np.ascontiguousarray(seeds, dtype=np.int64)
    if seeds.shape != legal.shape[:1]:
        raise ValueError(f"seeds has shape {seeds.shape}; expected {legal.shape[:1]}")
    if not alpha > 0.0:
        raise ValueError(f"alpha={alpha!r} is invalid: must be > 0")
    return tree_noise.dirichlet_rows(seeds, legal, float(alpha))


def search(root_outputs: RootOutputs, recurrent_fn: RecurrentFn, config: SearchConfig,
           rng: np.random.Generator, *, noise: Optional[np.ndarray] = None, add_noise: bool = True,
           root_action_fn: Optional[RootActionFn] = None, parallel: bool = False,
           workspace: Optional[Tree] = None) -> SearchResult:
    """Runs ``config.num_simulations`` simulations on B trees and returns root statistics.

    root_outputs: the network's value [B], policy_logits [B, A], optional legal_mask
    [B, A] and to_play [B] at the roots. recurrent_fn(parent_node [B] int32, action [B]
    int32, new_node [B] int32) returns (reward [B], value [B], policy_logits [B, A]) with
    an optional fourth legal_mask [B, A] bool; it is called once per simulation and must
    not keep the arrays it is given. rng: draws the per-tree noise seeds when ``noise``
    is None (:func:`dirichlet_noise`).
    noise: [B, A] Dirichlet draws to mix into the root prior (entries at illegal actions
    are ignored); with ``root_selection="gumbel"``, Gumbel(0, 1) draws instead (scaled by
    ``gumbel_scale``; drawn from rng when None). add_noise=False (evaluation) leaves the
    root prior as the network's (Gumbel: no Gumbel noise).
    With ``root_selection="gumbel"`` (Gumbel MuZero) the result's ``policy_target`` is the
    improved policy and ``action`` [B] int32 the action the search chose.
    root_action_fn(tree, simulation) -> [B] int32: if given, replaces pUCT at the root
    (e.g. Gumbel MuZero's sequential halving). parallel: spread trees over Numba threads.
    workspace: a Tree of shape (B, S + 1, A) from :func:`allocate_tree` (or an earlier
    result's ``tree``) to search in, instead of fresh memory; it is overwritten, and the
    result's ``tree`` is that same object. Reusing one saves the page faults of fresh
    memory (15-25% of the search time in the benchmark).

    Length: input checks, then the per-simulation loop, whose locals (row views, the step's
    arguments) stay in this one frame: the loop's overhead of a few µs per simulation is
    what small batches pay, and every call or attribute lookup added to it shows there.
    """
    if not isinstance(config, SearchConfig):
        raise TypeError(f"config must be a SearchConfig, got {type(config).__name__}")
    num_simulations = config.num_simulations
    if isinstance(num_simulations, bool) or not isinstance(num_simulations, int) or num_simulations < 1:
        raise ValueError(f"num_simulations={num_simulations!r} is invalid: must be an integer >= 1")
    value, logits, mask, to_play = _check_root(root_outputs)
    batch, num_actions = logits.shape
    legal = mask if mask is not None else np.ones((batch, num_actions), bool)

    gumbel = config.root_selection == "gumbel"
    if gumbel:
        if root_action_fn is not None:
            raise ValueError("root_action_fn cannot be combined with root_selection='gumbel', "
                             "whose sequential halving is the root rule")
        root_logp = gumbel_schedule.root_log_prior(logits, legal)
        root_base = root_logp
        if add_noise and config.gumbel_scale > 0.0:
            if noise is None:
                draws = rng.gumbel(size=(batch, num_actions))
            else:
                draws = np.asarray(noise, dtype=np.float64)
                if draws.shape != (batch, num_actions) or not np.all(np.isfinite(draws)):
                    raise ValueError(f"noise (Gumbel draws) must be finite with shape {(batch, num_actions)}")
            root_base = root_logp + float(config.gumbel_scale) * draws
    use_noise = bool(add_noise) and config.root_exploration_fraction > 0.0 and not gumbel
    if gumbel:
        noise_array = np.zeros((batch, num_actions), np.float64)
    elif noise is not None:
        noise_array = np.ascontiguousarray(noise, dtype=np.float64)
        if noise_array.shape != (batch, num_actions):
            raise ValueError(f"noise has shape {noise_array.shape}; expected {(batch, num_actions)}")
        if not np.all(np.isfinite(noise_array) & (noise_array >= 0.0)):
            raise ValueError("noise must be finite and >= 0")
    elif use_noise:
        noise_array = dirichlet_noise(rng, legal, config.dirichlet_alpha)
    else:
        noise_array = np.zeros((batch, num_actions), np.float64)

    shape = (batch, num_simulations + 1, num_actions)
    if workspace is None:
        tree = allocate_tree(*shape)
    elif not isinstance(workspace, Tree) or (
            workspace.batch_size, workspace.num_nodes, workspace.num_actions) != shape:
        raise ValueError(f"workspace must be a Tree of shape (B, S+1, A) = {shape}")
    else:
        tree = workspace
    scratch = _scratch_for(workspace, shape)
    records = scratch.records
    exploration_table = _exploration_table(num_simulations, float(config.pb_c_base),
                                           float(config.pb_c_init), int(config.parent_visit_offset))
    bound_low, bound_high = config.known_bounds if config.known_bounds is not None else (1.0, -1.0)
    all_legal = scratch.all_legal
    num_bad = kernels.init_roots(*tree, *records, value, logits,
                                 mask if mask is not None else all_legal, mask is not None,
                                 to_play, noise_array, use_noise,
                                 float(config.root_exploration_fraction), float(bound_low),
                                 float(bound_high), exploration_table)
    if num_bad:
        raise ValueError(f"root outputs are not finite in {num_bad} tree(s)")

    two_player = bool(config.two_player)
    params = (exploration_table, float(config.discount), two_player, int(config.max_depth))
    step_serial, step_parallel = kernels.step_serial, kernels.step_parallel
    if gumbel:
        table = gumbel_schedule.considered_visit_table(int(config.max_num_considered_actions), num_simulations)
        num_considered = np.minimum(legal.sum(axis=1), config.max_num_considered_actions).astype(np.int32)
        root_next = np.zeros(batch, np.int32)
        # Actions by g + log p, highest first, lowest id on ties (illegal ones, at -inf, last).
        root_order = np.argsort(-root_base, axis=1, kind="stable").astype(np.int32)
        params += (root_base, table, num_considered, float(config.gumbel_value_scale),
                   float(config.gumbel_maxvisit_init), root_order, root_next, config.gumbel_q_range == "tree")
        step_serial, step_parallel = gumbel_kernels.gumbel_step_serial, gumbel_kernels.gumbel_step_parallel
    if parallel:
        chunks = 4 * numba.get_num_threads()
        step = lambda *args: step_parallel(*args, chunks)   # noqa: E731
    else:
        step = step_serial
    # The Tree fields and records the steps touch, in step_serial's order.
    state = (tree.node_reward, tree.node_raw_value, tree.node_parent, tree.node_action,
             tree.children_index, tree.children_prior, tree.min_max,
             *records)
    parents, actions = scratch.parents, scratch.actions   # [S, B]; row s: simulation s's edge
    no_root_actions = scratch.no_root_actions
    dummy_f, dummy_logits = scratch.zeros, scratch.zero_logits
    logits_shape = (batch, num_actions)

    def root_actions_for(sim: int):
        if root_action_fn is None:
            return no_root_actions, False
        if sim > 0:   # the hook sees the root's statistics up to date
            kernels.sync_tree(*tree, *records, 0, two_player)
        forced = np.ascontiguousarray(root_action_fn(tree, sim), dtype=np.int32)
        if forced.shape != (batch,):
            raise ValueError(f"root_action_fn returned shape {forced.shape}; expected {(batch,)}")
        if np.any((forced < 0) | (forced >= num_actions)) or np.any(
                tree.children_index[np.arange(batch), 0, np.clip(forced, 0, num_actions - 1)] == ILLEGAL):
            raise ValueError(f"root_action_fn returned illegal root actions {forced.tolist()}")
        return forced, True

    # step(..., sim, ...) expands simulation sim's edge (none when sim = -1), then
    # selects simulation sim + 1's edge when asked to.
    forced, has_forced = root_actions_for(0)
    step(*state, -1, parents, actions, dummy_f, dummy_f, dummy_logits, all_legal, False, True,
         forced, has_forced, *params)
    hooked = root_action_fn is not None
    batch_shape = (batch,)
    # The loop below is the per-simulation overhead of the whole search (a few µs, which
    # matters at small B): row views are made once, and the common case (float32 C arrays
    # of the right shapes) is recognised with identity and equality tests only.
    parent_rows, action_rows, node_rows = scratch.rows
    ndarray = np.ndarray
    for sim in range(num_simulations):
        outputs = recurrent_fn(parent_rows[sim], action_rows[sim], node_rows[sim])
        if len(outputs) == 3:
            reward, leaf_value, leaf_logits = outputs
            leaf_mask = None
        elif len(outputs) == 4:
            reward, leaf_value, leaf_logits, leaf_mask = outputs
        else:
            raise ValueError(f"recurrent_fn returned {len(outputs)} items; expected 3 "
                             "(reward, value, policy_logits) or 4 (+ legal_mask)")
        if not (type(reward) is ndarray and type(leaf_value) is ndarray and type(leaf_logits) is ndarray
                and reward.dtype is _FLOAT32 and leaf_value.dtype is _FLOAT32
                and leaf_logits.dtype is _FLOAT32 and reward.shape == batch_shape
                and leaf_value.shape == batch_shape and leaf_logits.shape == logits_shape
                and reward.flags.c_contiguous and leaf_value.flags.c_contiguous
                and leaf_logits.flags.c_contiguous):
            reward = _as_float32("recurrent_fn reward", reward, batch_shape)
            leaf_value = _as_float32("recurrent_fn value", leaf_value, batch_shape)
            leaf_logits = _as_float32("recurrent_fn policy_logits", leaf_logits, logits_shape)
        if leaf_mask is None:
            has_mask = False
            leaf_mask = all_legal
        else:
            has_mask = True
            leaf_mask = _as_mask("recurrent_fn legal_mask", leaf_mask, logits_shape)
        select_next = sim + 1 < num_simulations
        # With a hook, the next selection waits until the hook has seen the backed-up tree.
        num_bad = step(*state, sim, parents, actions, reward, leaf_value, leaf_logits, leaf_mask,
                       has_mask, select_next and not hooked, no_root_actions, False, *params)
        if num_bad:
            raise ValueError(f"recurrent_fn outputs at simulation {sim} are not finite "
                             f"(reward, value or legal logits) in {num_bad} tree(s)")
        if select_next and hooked:
            forced, has_forced = root_actions_for(sim + 1)
            step(*state, -1 - (sim + 1), parents, actions, dummy_f, dummy_f, dummy_logits,
                 all_legal, False, True, forced, has_forced, *params)
    kernels.sync_tree(*tree, *records, num_simulations, two_player)
    result = _root_statistics(tree, value)
    if gumbel:
        improved, chosen = gumbel_kernels.gumbel_root_outputs(
            tree.children_index, tree.children_visits, tree.children_q, tree.children_prior,
            tree.node_raw_value, root_logp, root_base, float(config.gumbel_value_scale),
            float(config.gumbel_maxvisit_init), tree.min_max, config.gumbel_q_range == "tree")
        result = result._replace(policy_target=improved, action=chosen)
    return result


def _root_statistics(tree: Tree, root_network_value: np.ndarray) -> SearchResult:
    """Visit counts, visit distribution, root value and Q of the root's children."""
    visit_counts, policy_target, root_value, root_q, root_prior = kernels.root_statistics(
        tree.children_index, tree.children_visits, tree.children_q, tree.children_prior,
        tree.node_visits, tree.node_value_sum)
    return SearchResult(visit_counts=visit_counts, policy_target=policy_target,
                        root_value=root_value, root_q=root_q, root_prior=root_prior,
                        root_network_value=np.asarray(root_network_value, np.float32), tree=tree)


def select_action(visit_counts: np.ndarray, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """Samples one action per row of visit_counts [B, A] with probability ∝ counts^(1/T).

    temperature 0 picks the most visited action, ties going to the lowest action id
    (deterministic; rng is not used). Returns [B] int64.
    """
    counts = np.asarray(visit_counts)
    if counts.ndim != 2 or counts.shape[1] < 1:
        raise ValueError(f"visit_counts has shape {counts.shape}; expected [B, A] with A >= 1")
    if np.any(counts < 0):
        raise ValueError("visit_counts must be >= 0")
    if np.any(counts.sum(axis=1) <= 0):
        raise ValueError(f"visit_counts rows {np.flatnonzero(counts.sum(axis=1) <= 0).tolist()} "
                         "have no visits")
    if isinstance(temperature, bool) or not np.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature={temperature!r} is invalid: must be a number >= 0")
    if temperature == 0:
        return np.argmax(counts, axis=1)
    # Scale by the row maximum first so that counts^(1/T) cannot overflow.
    scaled = counts / counts.max(axis=1, keepdims=True)
    weights = scaled ** (1.0 / temperature)
    cdf = np.cumsum(weights, axis=1)
    draws = rng.random((counts.shape[0], 1)) * cdf[:, -1:]
    return np.argmax(cdf > draws, axis=1)
