"""Numba kernels of the batched search: root set-up, leaf selection, expansion and backup.

Every kernel works on the flat arrays of :class:`muzero.mcts.tree.Tree`, passed field by
field in the Tree's order (``*tree`` from Python), for all B trees at once.

Layout of the work. A simulation step has three phases, each a function over a range of
trees ``[first, stop)``: new edge rows (softmax), attach-and-backup, selection. The
phases take whole arrays plus indices and loop over trees inside, because Numba pays two
atomic reference-count updates for every array argument of every (even inlined) call and
for every row view; calling per tree made those updates the largest cost in profiles.
``step_serial`` runs each phase once over the whole batch; ``step_parallel`` hands
chunks of trees to Numba's threads with ``prange`` (trees share no memory). The two are
written out separately because Numba's on-disk cache does not tell apart two
compilations of one function that differ only in ``parallel=``.

The formulas are those of :mod:`muzero.mcts.reference` (the MuZero pseudocode), with the
floating-point operations arranged for speed: the pUCT factor ``c(N) * sqrt(N + offset)``
comes from a table, the per-edge ``prior / (1 + n)`` is kept up to date by the backup,
normalisation multiplies by ``1 / (max - min)``, and the softmax uses a polynomial exp
(1 ulp). Results therefore agree with the reference to rounding, not bit for bit
(docs/SEARCH.md); the parity tests demand identical decisions and values to 1e-6.

Imports only NumPy, Numba and the standard library; never TensorFlow.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from muzero.mcts.tree import ILLEGAL, UNVISITED

_INF = np.inf


# exp(x) for x <= 0 as 2^k * exp(r), |r| <= ln(2)/2, with exp(r) by its Taylor series to
# degree 13 (truncation error below 1e-17): a plain polynomial, so the compiler can
# vectorise the softmax, where calls to libm's exp cost about half of expansion time.
# Agrees with math.exp to about 1 unit in the last place (tested in test_mcts_search.py).
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e+00
_POW2 = 2.0 ** np.arange(-1022, 1, dtype=np.float64)   # 2^k for k = -1022 .. 0
_EXP_COEFFS = np.array([1.0 / math.factorial(n) for n in range(13, -1, -1)])   # 1/13! .. 1/0!


@njit(cache=True, inline='always')
def exp_nonpositive(x):
    """exp(x) for x <= 0. Inputs are clamped to [-700, 0] (NaN to -700) so that the table
    index stays in range whatever the input: exp(-700) is about 1e-304."""
    if not x >= -700.0:
        x = -700.0
    if x > 0.0:
        x = 0.0
    k = math.floor(x * _INV_LN2 + 0.5)
    r = (x - k * _LN2_HI) - k * _LN2_LO
    p = _EXP_COEFFS[0]
    for i in range(1, 14):
        p = p * r + _EXP_COEFFS[i]
    return p * _POW2[int(k) + 1022]


@njit(cache=True)
def _edges_range(first, stop, node, logits, mask, has_mask, children_index, children_prior,
                 children_explore):
    """Writes the edge rows of node ``node`` in trees [first, stop) from the network's policy.

    logits [B, A] float32, mask [B, A] bool (read only when ``has_mask``). Priors are the
    softmax over legal actions; children start UNVISITED (ILLEGAL where masked);
    ``children_explore`` = prior (-inf if illegal). Visits and Q of the new edges are
    left unset: selection reads them only where a child exists. A mask that allows no
    action at an interior node means the model is past the end of the game: every action
    then counts as legal. Returns the number of trees with a non-finite legal logit.
    """
    num_actions = logits.shape[1]
    num_bad = 0
    for b in range(first, stop):
        use_mask = False
        if has_mask:
            for a in range(num_actions):
                use_mask = use_mask or mask[b, a]
        top = -_INF
        finite = True
        for a in range(num_actions):
            x = np.float64(logits[b, a])
            if not use_mask or mask[b, a]:
                finite = finite and math.isfinite(x)
                top = max(top, x)
        if not finite:
            num_bad += 1
            top = 0.0
        for a in range(num_actions):
            legal = not use_mask or mask[b, a]
            e = exp_nonpositive(np.float64(logits[b, a]) - top)
            children_prior[b, node, a] = e if legal else 0.0
            children_index[b, node, a] = UNVISITED if legal else ILLEGAL
        total = 0.0
        for a in range(num_actions):
            total += children_prior[b, node, a]
        inv_total = 1.0 / total
        for a in range(num_actions):
            prior = children_prior[b, node, a] * inv_total
            children_prior[b, node, a] = prior
            legal = children_index[b, node, a] != ILLEGAL
            children_explore[b, node, a] = prior if legal else -_INF
    return num_bad


@njit(cache=True)
def init_roots(node_visits, node_value_sum, node_reward, node_raw_value, node_parent,
               node_action, node_to_play, node_depth, children_index, children_prior,
               children_explore, children_visits, children_q, min_max,
               value, logits, mask, has_mask, to_play, noise, use_noise, exploration_fraction,
               bound_low, bound_high):
    """Creates node 0 of every tree from the network's root outputs.

    value [B] float32, logits [B, A] float32, mask [B, A] bool (read when ``has_mask``),
    to_play [B] int32, noise [B, A] float64 (read when ``use_noise``). The root prior is
    the softmax over legal actions, then ``prior * (1 - fraction) + noise * fraction``
    over legal actions. ``bound_low > bound_high`` means no known bounds: the min/max
    statistics start empty. Returns the number of trees with non-finite outputs.
    """
    batch = value.shape[0]
    num_bad = _edges_range(0, batch, 0, logits, mask, has_mask, children_index, children_prior,
                           children_explore)
    for b in range(batch):
        node_visits[b, 0] = 0
        node_value_sum[b, 0] = 0.0
        node_reward[b, 0] = 0.0
        node_raw_value[b, 0] = value[b]
        node_parent[b, 0] = -1
        node_action[b, 0] = -1
        node_to_play[b, 0] = to_play[b]
        node_depth[b, 0] = 0
        if bound_low <= bound_high:
            min_max[b, 0] = bound_low
            min_max[b, 1] = bound_high
        else:
            min_max[b, 0] = _INF
            min_max[b, 1] = -_INF
        if not math.isfinite(value[b]):
            num_bad += 1
        if use_noise:
            for a in range(logits.shape[1]):
                if children_index[b, 0, a] != ILLEGAL:
                    mixed = (children_prior[b, 0, a] * (1.0 - exploration_fraction)
                             + noise[b, a] * exploration_fraction)
                    children_prior[b, 0, a] = mixed
                    children_explore[b, 0, a] = mixed
    return num_bad


@njit(cache=True)
def puct_tables(max_visits, pb_c_base, pb_c_init, parent_visit_offset):
    """pUCT exploration factor by parent visit count: [max_visits + 1] float64.

    Entry N is c(N) * sqrt(N + offset) with c(N) = log((N + pb_c_base + 1) / pb_c_base)
    + pb_c_init, computed once per search instead of once per visited node.
    """
    table = np.empty(max_visits + 1, np.float64)
    for n in range(max_visits + 1):
        pb_c = math.log((n + pb_c_base + 1.0) / pb_c_base) + pb_c_init
        table[n] = pb_c * math.sqrt(n + parent_visit_offset)
    return table


@njit(cache=True)
def _attach_backup_range(first, stop, new_node, parents, actions, reward, value, node_visits,
                         node_value_sum, node_reward, node_raw_value, node_parent, node_action,
                         node_to_play, node_depth, children_index, children_prior,
                         children_explore, children_visits, children_q, min_max, discount,
                         two_player):
    """Hangs ``new_node`` under ``(parents[b], actions[b])`` in trees [first, stop) and backs up.

    parents, actions [B] int32; reward [B] float32 (parent player's view), value [B]
    float32 (new node's player's view). If the edge already had a child (a depth
    cut-off), the new node inherits its visits and value sum. Going up, the return is
    ``g <- reward + discount * sign * g``; every node on the path adds g (its own
    player's view) to its value sum, refreshes its edge's visits, Q and exploration
    factor prior / (1 + n), and widens the tree's min/max with its Q. The root's Q is
    ``0 + discount * value``, as in the pseudocode. Returns the number of trees whose
    reward or value is not finite.
    """
    num_bad = 0
    for b in range(first, stop):
        parent = parents[b]
        action = actions[b]
        if not (math.isfinite(reward[b]) and math.isfinite(value[b])):
            num_bad += 1
        replaced = children_index[b, parent, action]
        children_index[b, parent, action] = new_node
        node_parent[b, new_node] = parent
        node_action[b, new_node] = action
        node_depth[b, new_node] = node_depth[b, parent] + 1
        parent_player = node_to_play[b, parent]
        node_to_play[b, new_node] = 1 - parent_player if two_player else parent_player
        node_reward[b, new_node] = reward[b]
        node_raw_value[b, new_node] = value[b]
        if replaced >= 0:
            node_visits[b, new_node] = node_visits[b, replaced]
            node_value_sum[b, new_node] = node_value_sum[b, replaced]
        else:
            node_visits[b, new_node] = 0
            node_value_sum[b, new_node] = 0.0
        low = min_max[b, 0]
        high = min_max[b, 1]
        g = np.float64(value[b])
        node = new_node
        while node != 0:
            value_sum = node_value_sum[b, node] + g
            visits = node_visits[b, node] + 1
            node_value_sum[b, node] = value_sum
            node_visits[b, node] = visits
            up = node_parent[b, node]
            edge = node_action[b, node]
            r = node_reward[b, node]
            if node_to_play[b, node] != node_to_play[b, up]:
                q = r - discount * (value_sum / visits)
                g = r - discount * g
            else:
                q = r + discount * (value_sum / visits)
                g = r + discount * g
            children_visits[b, up, edge] = visits
            children_q[b, up, edge] = q
            children_explore[b, up, edge] = children_prior[b, up, edge] / (visits + 1)
            high = max(high, q)
            low = min(low, q)
            node = up
        value_sum = node_value_sum[b, 0] + g
        visits = node_visits[b, 0] + 1
        node_value_sum[b, 0] = value_sum
        node_visits[b, 0] = visits
        q = discount * (value_sum / visits)
        min_max[b, 0] = min(low, q)
        min_max[b, 1] = max(high, q)
    return num_bad


@njit(cache=True)
def _select_range(first, stop, next_parents, next_actions, root_actions, has_root_actions,
                  children_index, children_explore, children_q, node_visits, node_depth,
                  min_max, exploration_table, max_depth):
    """Descends trees [first, stop) by pUCT to the edge each tree's next simulation creates.

    Writes ``next_parents [B]`` and ``next_actions [B]`` int32. At a node with N visits,
    score(a) = table[N] * children_explore[a] + value_score(a), where table[N] is
    c(N) * sqrt(N + offset), children_explore is prior / (1 + n) (-inf if illegal), and
    value_score is ``(q - min) / (max - min)`` for an existing (hence visited) child (the raw Q while the
    tree has fewer than two distinct Q values, as in the pseudocode) and 0 otherwise.
    The highest score wins; ties go to the lowest action id. With table[N] = 0 (a root
    before its first visit, offset 0) every legal score is 0 and the lowest legal action
    wins. The descent stops at an edge without a child, or at an edge whose child sits
    at ``max_depth`` (> 0): that child is then evaluated again as a new node that keeps
    its statistics. ``root_actions[b]`` replaces the root's choice when
    ``has_root_actions`` (the hook for other root-selection rules).
    """
    num_actions = children_index.shape[2]
    scores = np.empty(num_actions, np.float64)   # [A] scratch
    for b in range(first, stop):
        low = min_max[b, 0]
        high = min_max[b, 1]
        if high > low:
            inv_span = 1.0 / (high - low)
        else:
            low = 0.0
            inv_span = 1.0
        node = 0
        while True:
            if node == 0 and has_root_actions:
                action = root_actions[b]
            else:
                exploration = exploration_table[node_visits[b, node]]
                action = -1
                if exploration == 0.0:
                    for a in range(num_actions):
                        if children_index[b, node, a] != ILLEGAL:
                            action = a
                            break
                else:
                    # Scores first (a loop the compiler vectorises), then their maximum
                    # with four independent running maxima, then the first action that
                    # reaches it: a short dependency chain, since the descent waits on it.
                    for a in range(num_actions):
                        value_score = (children_q[b, node, a] - low) * inv_span
                        scores[a] = exploration * children_explore[b, node, a] + (
                            value_score if children_index[b, node, a] >= 0 else 0.0)
                    best0 = best1 = best2 = best3 = -_INF
                    a = 0
                    while a + 4 <= num_actions:
                        best0 = max(best0, scores[a])
                        best1 = max(best1, scores[a + 1])
                        best2 = max(best2, scores[a + 2])
                        best3 = max(best3, scores[a + 3])
                        a += 4
                    while a < num_actions:
                        best0 = max(best0, scores[a])
                        a += 1
                    best = max(max(best0, best1), max(best2, best3))
                    action = 0
                    while action < num_actions - 1 and scores[action] != best:
                        action += 1
            child = children_index[b, node, action]
            if child < 0 or (max_depth > 0 and node_depth[b, child] >= max_depth):
                next_parents[b] = node
                next_actions[b] = action
                break
            node = child


@njit(cache=True)
def step_serial(node_visits, node_value_sum, node_reward, node_raw_value, node_parent,
                node_action, node_to_play, node_depth, children_index, children_prior,
                children_explore, children_visits, children_q, min_max,
                do_expand, parents, actions, new_node, reward, value, logits, mask, has_mask,
                do_select, next_parents, next_actions, root_actions, has_root_actions,
                exploration_table, discount, two_player, max_depth):
    """One simulation's tree work for all B trees, one phase after another.

    If ``do_expand``: creates node ``new_node`` under ``(parents [B], actions [B])`` from
    reward [B], value [B] float32, logits [B, A] float32 and mask [B, A] bool, and backs
    it up. Then, if ``do_select``: writes the next simulation's edges into
    ``next_parents [B]`` and ``next_actions [B]`` int32; ``root_actions [B]`` int32 forces
    the root's choice when ``has_root_actions``; exploration_table is
    :func:`puct_tables`. Returns the number of trees whose outputs were not finite.
    """
    batch = node_visits.shape[0]
    num_bad = 0
    if do_expand:
        num_bad += _edges_range(0, batch, new_node, logits, mask, has_mask, children_index,
                                children_prior, children_explore)
        num_bad += _attach_backup_range(
            0, batch, new_node, parents, actions, reward, value, node_visits, node_value_sum,
            node_reward, node_raw_value, node_parent, node_action, node_to_play, node_depth,
            children_index, children_prior, children_explore, children_visits, children_q,
            min_max, discount, two_player)
    if do_select:
        _select_range(0, batch, next_parents, next_actions, root_actions, has_root_actions,
                      children_index, children_explore, children_q, node_visits, node_depth,
                      min_max, exploration_table, max_depth)
    return num_bad


@njit(cache=True, parallel=True)
def step_parallel(node_visits, node_value_sum, node_reward, node_raw_value, node_parent,
                  node_action, node_to_play, node_depth, children_index, children_prior,
                  children_explore, children_visits, children_q, min_max,
                  do_expand, parents, actions, new_node, reward, value, logits, mask, has_mask,
                  do_select, next_parents, next_actions, root_actions, has_root_actions,
                  exploration_table, discount, two_player, max_depth, num_chunks):
    """:func:`step_serial` with ``num_chunks`` chunks of trees spread over Numba's threads.

    A few chunks per thread let uneven trees balance out (the driver passes 4 per thread).
    """
    batch = node_visits.shape[0]
    num_chunks = max(1, min(batch, num_chunks))
    num_bad = 0
    for chunk in prange(num_chunks):
        first = chunk * batch // num_chunks
        stop = (chunk + 1) * batch // num_chunks
        bad = 0
        if do_expand:
            bad += _edges_range(first, stop, new_node, logits, mask, has_mask, children_index,
                                children_prior, children_explore)
            bad += _attach_backup_range(
                first, stop, new_node, parents, actions, reward, value, node_visits,
                node_value_sum, node_reward, node_raw_value, node_parent, node_action,
                node_to_play, node_depth, children_index, children_prior, children_explore,
                children_visits, children_q, min_max, discount, two_player)
        if do_select:
            _select_range(first, stop, next_parents, next_actions, root_actions,
                          has_root_actions, children_index, children_explore, children_q,
                          node_visits, node_depth, min_max, exploration_table, max_depth)
        num_bad += bad
    return num_bad
