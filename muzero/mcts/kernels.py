"""Numba kernels of the batched search: root set-up, expansion, backup, pUCT selection, sync.

Gumbel MuZero's selection and root outputs live in :mod:`muzero.mcts.gumbel_kernels` and
reuse this module's records, edge rows, attach and backup. Size: about 600 lines, kept in
one module because the phases share the record layout below and Numba inlines across them.

Kernels work on the flat arrays of :class:`muzero.mcts.tree.Tree` plus private selection
records (below), for all B trees at once. A simulation step has three phases, each a
function over a range of trees ``[first, stop)``: new edge rows (softmax), attach and
backup, selection. Phases take whole arrays plus indices and loop over trees inside:
Numba pays two atomic reference-count updates for every array argument of every (even
inlined) call and every row view. ``step_serial`` runs the phases over the whole batch;
``step_parallel`` hands chunks of trees to threads with ``prange`` (written out twice
because Numba's cache does not tell apart compilations that differ only in ``parallel=``).

During a search the visit counts, value sums and edge statistics live in the records;
``sync_tree`` writes them into the Tree after the last simulation (and the root's before
a root hook). Selection scores only a node's existing children plus its best unvisited
action, which stands for all unvisited ones. The formulas are those of
:mod:`muzero.mcts.reference` (the MuZero pseudocode) with the floating-point work
arranged for speed (pUCT factor from a table, ``1 / (max - min)``, a polynomial exp,
sums in four lanes), so results agree with the reference to rounding, not bit for bit;
the parity tests demand identical decisions and values to 1e-6 (docs/SEARCH.md). What
decides ties is the exception: value sums (exact, see :func:`_add_return`), Q and the
pUCT score are computed by the same operations in the same order as the reference, so
equal inputs give equal scores and the lowest action id wins ("Ties" in docs/SEARCH.md).
No kernel uses fastmath: it would let LLVM reassociate exactly these operations.

Imports only NumPy, Numba and the standard library; never TensorFlow.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from muzero.mcts.tree import ILLEGAL, UNVISITED

_INF = np.inf


# exp(x) for x <= 0 as 2^k * exp(r), |r| <= ln(2)/2, with exp(r) by its Taylor series to
# degree 13 (truncation error below 1e-17) evaluated by Estrin's scheme (four levels of
# independent products instead of Horner's chain of 13): a plain polynomial, so the
# compiler vectorises the softmax, where calls to libm's exp cost about half of expansion
# time. Agrees with math.exp to about 1 unit in the last place (test_mcts_search.py).
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e+00
_POW2 = 2.0 ** np.arange(-1022, 1, dtype=np.float64)   # 2^k for k = -1022 .. 0
_TAYLOR = tuple(1.0 / math.factorial(n) for n in range(14))   # 1/0! .. 1/13!


@njit(cache=True, inline='always')
def _exp_parts(x):
    """exp(x) = p * 2^k for x <= 0; returns (p, k) with k an int64 in [-1010, 0]. Inputs are
    clamped to [-700, 0] (NaN to -700): exp(-700) is about 1e-304."""
    if not x >= -700.0:
        x = -700.0
    if x > 0.0:
        x = 0.0
    k = math.floor(x * _INV_LN2 + 0.5)
    r = (x - k * _LN2_HI) - k * _LN2_LO
    r2 = r * r
    r4 = r2 * r2
    # 1 + r + r^2 (c2 + c3 r) + r^4 (c4 + ... + c13 r^9): the small terms are summed first
    # and 1 + r last, which keeps the rounding error near half a unit.
    high = ((_TAYLOR[8] + _TAYLOR[9] * r) + (_TAYLOR[10] + _TAYLOR[11] * r) * r2) + (
        _TAYLOR[12] + _TAYLOR[13] * r) * r4
    middle = ((_TAYLOR[4] + _TAYLOR[5] * r) + (_TAYLOR[6] + _TAYLOR[7] * r) * r2) + high * r4
    tail = (_TAYLOR[2] + _TAYLOR[3] * r) * r2 + middle * r4
    return 1.0 + (r + tail), np.int64(k)


@njit(cache=True, inline='always')
def exp_nonpositive(x):
    """exp(x) for x <= 0 (scalar form of the softmax's exp; inputs clamped as in _exp_parts)."""
    p, k = _exp_parts(x)
    return p * _POW2[k + 1022]


# Selection records, private to a search: per node, a 64-byte line of statistics, then
# the node ids of its existing children in creation order, in one 64-byte aligned buffer
# [B, N, R] float64 (R a multiple of 8) seen twice: ``records`` (float64 fields) and
# ``child_ids`` (the same memory as int32 [B, N, 2 R]: int fields and child ids, child k
# of a node at ``child_ids[b, node, _CHILDREN + k]``). A level of the descent reads the
# node's lines and its children's first lines (loads that do not wait on each other)
# instead of three [A] rows of the Tree; the backup touches one line per node on its path
# and the value-sum error in the second (which the descent has just read for the ids).
_VISITS = 0            # N, times the node was on a backed-up path
_VALUE_SUM = 1         # sum of backed-up returns (node's player)
_EXPLORATION = 2       # c(N) * sqrt(N + offset), the pUCT factor for the current N
_PRIOR = 3             # prior of the edge into this node (after noise at the root's edges)
_EXPLORE = 4           # prior / (1 + visits) of the edge into this node
_Q = 5                 # Q of the edge into this node, from the parent player's view
# int32 fields of the first line (indices into child_ids):
_ACTION = 12           # action of the edge into this node
_UNVISITED_ACTION = 13  # legal action without a child with the largest prior (lowest id); -1
_NUM_CHILDREN = 14     # existing children
# second line:
_UNVISITED_PRIOR = 8   # prior of that action (a float64 field)
_VALUE_ERROR = 9       # rounding errors of the _VALUE_SUM additions (TwoSum): the value sum
#                        is _VALUE_SUM + _VALUE_ERROR, see _add_return
_CHILDREN = 20         # int32 index of the first child id


def allocate_records(batch_size, num_nodes, num_actions):
    """Uninitialised (records [B, N, R] float64, child_ids [B, N, 2 R] int32), two views of
    one 64-byte aligned buffer, for a Tree of that shape; kernels write what they read."""
    width = 8 * ((_CHILDREN + num_actions + 15) // 16)
    size = batch_size * num_nodes * width
    buffer = np.empty(size + 8, np.float64)
    start = (-buffer.ctypes.data % 64) // 8
    records = buffer[start:start + size].reshape(batch_size, num_nodes, width)
    return records, records.view(np.int32)


@njit(cache=True)
def _edges_range(first, stop, node, logits, mask, has_mask, children_index, children_prior,
                 records, child_ids):
    """Writes the edge rows of node ``node`` in trees [first, stop) from the network's policy.

    logits [B, A] float32, mask [B, A] bool (read only when ``has_mask``). Priors are the
    softmax over legal actions; children start UNVISITED (ILLEGAL where masked);
    ``children_explore`` = prior (-inf if illegal). Visits and Q of the new edges are
    left unset. The node's record gets no children and its best unvisited action. A
    mask that allows no action at an interior node means the model is past the end of
    the game: every action then counts as legal. Returns the number of trees with a
    non-finite legal logit.

    Length: one loop over trees whose phases (max, exp and sum in four lanes, priors, the
    best unvisited action) share row views; split into helpers, each would pay Numba's
    reference counting per array argument per tree (module docstring).
    """
    num_actions = logits.shape[1]
    num_trees = stop - first
    num_bad = 0
    # [trees, A] scratch: exp(logit - top) (0 if illegal), the bit patterns of its 2^k
    # (read back as float64 through ``powers``), and which actions are legal. The exp runs
    # as one loop over every (tree, action) so that it vectorises without remainders.
    exps = np.empty((num_trees, num_actions), np.float64)
    bits = np.empty((num_trees, num_actions), np.int64)
    powers = bits.view(np.float64)
    legal = np.empty((num_trees, num_actions), np.bool_)
    if not has_mask:   # the common case, without the selects on ``legal``
        legal[:] = True
        for t in range(num_trees):
            b = first + t
            # Four lanes of max and of x - x (0 for finite x, NaN otherwise).
            top0 = top1 = top2 = top3 = -_INF
            bad0 = bad1 = bad2 = bad3 = 0.0
            a = 0
            while a + 4 <= num_actions:
                x0 = np.float64(logits[b, a])
                x1 = np.float64(logits[b, a + 1])
                x2 = np.float64(logits[b, a + 2])
                x3 = np.float64(logits[b, a + 3])
                top0 = max(top0, x0)
                top1 = max(top1, x1)
                top2 = max(top2, x2)
                top3 = max(top3, x3)
                bad0 += x0 - x0
                bad1 += x1 - x1
                bad2 += x2 - x2
                bad3 += x3 - x3
                a += 4
            while a < num_actions:
                x0 = np.float64(logits[b, a])
                top0 = max(top0, x0)
                bad0 += x0 - x0
                a += 1
            top = max(max(top0, top1), max(top2, top3))
            if not (bad0 + bad1) + (bad2 + bad3) == 0.0:
                num_bad += 1
                top = 0.0
            for a in range(num_actions):
                exps[t, a] = np.float64(logits[b, a]) - top
    for t in range(num_trees if has_mask else 0):
        b = first + t
        use_mask = False   # an all-False row (past a game's end) allows every action
        for a in range(num_actions):
            use_mask = use_mask or mask[b, a]
        for a in range(num_actions):
            legal[t, a] = not use_mask or mask[b, a]
        # Reductions run in four independent lanes: a chain of A dependent max or add
        # steps would cost more than all the arithmetic.
        top0 = top1 = top2 = top3 = -_INF
        a = 0
        while a + 4 <= num_actions:
            top0 = max(top0, np.float64(logits[b, a]) if legal[t, a] else -_INF)
            top1 = max(top1, np.float64(logits[b, a + 1]) if legal[t, a + 1] else -_INF)
            top2 = max(top2, np.float64(logits[b, a + 2]) if legal[t, a + 2] else -_INF)
            top3 = max(top3, np.float64(logits[b, a + 3]) if legal[t, a + 3] else -_INF)
            a += 4
        while a < num_actions:
            top0 = max(top0, np.float64(logits[b, a]) if legal[t, a] else -_INF)
            a += 1
        top = max(max(top0, top1), max(top2, top3))
        finite = True
        for a in range(num_actions):
            finite = finite and (math.isfinite(logits[b, a]) or not legal[t, a])
        if not finite:
            num_bad += 1
            top = 0.0
        for a in range(num_actions):
            exps[t, a] = np.float64(logits[b, a]) - top
    flat_exps = exps.reshape(-1)
    flat_bits = bits.reshape(-1)
    for i in range(flat_exps.size):
        flat_exps[i], k = _exp_parts(flat_exps[i])
        flat_bits[i] = (k + 1023) << 52
    flat_powers = powers.reshape(-1)
    flat_legal = legal.reshape(-1)
    if has_mask:
        for i in range(flat_exps.size):
            flat_exps[i] = flat_exps[i] * flat_powers[i] if flat_legal[i] else 0.0
    else:
        for i in range(flat_exps.size):
            flat_exps[i] = flat_exps[i] * flat_powers[i]
    for t in range(num_trees):
        b = first + t
        total0 = total1 = total2 = total3 = 0.0
        best0 = best1 = best2 = best3 = 0.0
        a = 0
        while a + 4 <= num_actions:
            total0 += exps[t, a]
            total1 += exps[t, a + 1]
            total2 += exps[t, a + 2]
            total3 += exps[t, a + 3]
            best0 = max(best0, exps[t, a])
            best1 = max(best1, exps[t, a + 1])
            best2 = max(best2, exps[t, a + 2])
            best3 = max(best3, exps[t, a + 3])
            a += 4
        while a < num_actions:
            total0 += exps[t, a]
            best0 = max(best0, exps[t, a])
            a += 1
        inv_total = 1.0 / ((total0 + total1) + (total2 + total3))
        # x -> x * inv_total never decreases, so the largest prior is best * inv_total
        best = max(max(best0, best1), max(best2, best3)) * inv_total
        for a in range(num_actions):
            children_prior[b, node, a] = exps[t, a] * inv_total
            children_index[b, node, a] = UNVISITED if legal[t, a] else ILLEGAL
        action = 0
        while action < num_actions - 1 and not (legal[t, action]
                                                and children_prior[b, node, action] == best):
            action += 1
        child_ids[b, node, _UNVISITED_ACTION] = action
        records[b, node, _UNVISITED_PRIOR] = children_prior[b, node, action]
        child_ids[b, node, _NUM_CHILDREN] = 0
    return num_bad


@njit(cache=True, inline='always')
def _next_unvisited(children_index, children_prior, records, child_ids, b, node):
    """Records the legal action of ``node`` without a child that has the largest prior
    (lowest id on ties), or -1 if every legal action has a child. Two passes: the
    largest prior (a loop the compiler vectorises), then the first action that has it."""
    num_actions = children_index.shape[2]
    best = -1.0
    for a in range(num_actions):
        best = max(best, children_prior[b, node, a] if children_index[b, node, a] == UNVISITED
                   else -1.0)
    action = -1
    if best >= 0.0:
        action = 0
        while (children_index[b, node, action] != UNVISITED
               or children_prior[b, node, action] != best):
            action += 1
    child_ids[b, node, _UNVISITED_ACTION] = action
    records[b, node, _UNVISITED_PRIOR] = best


@njit(cache=True)
def init_roots(node_visits, node_value_sum, node_reward, node_raw_value, node_parent,
               node_action, node_to_play, node_depth, children_index, children_prior,
               children_explore, children_visits, children_q, min_max, records, child_ids,
               value, logits, mask, has_mask, to_play, noise, use_noise, exploration_fraction,
               bound_low, bound_high, exploration_table):
    """Creates node 0 of every tree (the Tree's entries and its record) from the network's
    root outputs.

    value [B] float32, logits [B, A] float32, mask [B, A] bool (read when ``has_mask``),
    to_play [B] int32, noise [B, A] float64 (read when ``use_noise``). The root prior is
    the softmax over legal actions, then ``prior * (1 - fraction) + noise * fraction``
    over legal actions. ``bound_low > bound_high`` means no known bounds: the min/max
    statistics start empty. Returns the number of trees with non-finite outputs.
    """
    batch = value.shape[0]
    num_bad = _edges_range(0, batch, 0, logits, mask, has_mask, children_index, children_prior,
                           records, child_ids)
    for b in range(batch):
        node_visits[b, 0] = 0
        node_value_sum[b, 0] = 0.0
        node_reward[b, 0] = 0.0
        node_raw_value[b, 0] = value[b]
        node_parent[b, 0] = -1
        node_action[b, 0] = -1
        node_to_play[b, 0] = to_play[b]
        node_depth[b, 0] = 0
        records[b, 0, _VISITS] = 0.0
        records[b, 0, _VALUE_SUM] = 0.0
        records[b, 0, _VALUE_ERROR] = 0.0
        records[b, 0, _PRIOR] = 0.0
        records[b, 0, _EXPLORATION] = exploration_table[0]
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
            _next_unvisited(children_index, children_prior, records, child_ids, b, 0)
    return num_bad


@njit(cache=True, inline='always')
def _add_return(records, b, node, g):
    """Adds the return ``g`` to the node's value sum; returns the value sum, rounded once.

    The sum is kept as a pair: _VALUE_SUM is the running floating-point sum and
    _VALUE_ERROR collects the rounding error of each addition, found exactly by Knuth's
    TwoSum (no branch, six additions; valid without fastmath, which would reassociate it
    away). While the errors add up without rounding, which holds unless a node's returns
    span extreme magnitudes (docs/SEARCH.md, "Ties"), the pair is the exact sum of the
    returns and ``sum + error`` is that exact sum correctly rounded: the same float
    whatever order the returns came in, so Q values that are sums of the same returns
    tie exactly. :mod:`muzero.mcts.reference` does the same additions.
    """
    total = records[b, node, _VALUE_SUM]
    new_total = total + g
    moved = new_total - total
    error = (total - (new_total - moved)) + (g - moved)
    new_error = records[b, node, _VALUE_ERROR] + error
    records[b, node, _VALUE_SUM] = new_total
    records[b, node, _VALUE_ERROR] = new_error
    return new_total + new_error


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
def _attach_backup_range(first, stop, sim, parents, actions, reward, value, node_reward,
                         node_raw_value, node_parent, node_action, children_index,
                         children_prior, min_max, records, child_ids, exploration_table,
                         discount, two_player):
    """Hangs node ``sim + 1`` under ``(parents[sim, b], actions[sim, b])`` in trees
    [first, stop) and backs it up.

    parents, actions [S, B] int32; reward [B] float32 (parent player's view), value [B]
    float32 (new node's player's view). A new edge joins the parent's child list; if it
    was the parent's best unvisited action, the next one is looked up (one scan of a row
    per simulation instead of one per level of every descent). If the edge already had a
    child (a depth cut-off), the new node takes its place in the list and inherits its
    visits and value sum. Going up, the return is ``g <- reward + discount * sign * g``
    (sign = -1 in two-player games, where the player alternates every ply); every node
    on the path adds g (its own player's view) to its value sum and one visit, and
    caches the Q and prior / (1 + visits) of the edge into it, and the tree's min/max
    widens with that Q. The root's Q is ``0 + discount * value``, as in the pseudocode.
    Visits, value sums and edge statistics reach the Tree at the sync. Returns the
    number of trees whose reward or value is not finite.
    """
    num_bad = 0
    new_node = sim + 1
    sign_discount = -discount if two_player else discount
    for b in range(first, stop):
        parent = parents[sim, b]
        action = actions[sim, b]
        if not (math.isfinite(reward[b]) and math.isfinite(value[b])):
            num_bad += 1
        replaced = children_index[b, parent, action]
        children_index[b, parent, action] = new_node
        if replaced >= 0:
            k = 0
            while child_ids[b, parent, _CHILDREN + k] != replaced:
                k += 1
            child_ids[b, parent, _CHILDREN + k] = new_node
            records[b, new_node, _PRIOR] = records[b, replaced, _PRIOR]
            records[b, new_node, _VISITS] = records[b, replaced, _VISITS]
            records[b, new_node, _VALUE_SUM] = records[b, replaced, _VALUE_SUM]
            records[b, new_node, _VALUE_ERROR] = records[b, replaced, _VALUE_ERROR]
        else:
            count = child_ids[b, parent, _NUM_CHILDREN]
            child_ids[b, parent, _CHILDREN + count] = new_node
            child_ids[b, parent, _NUM_CHILDREN] = count + 1
            records[b, new_node, _PRIOR] = children_prior[b, parent, action]
            records[b, new_node, _VISITS] = 0.0
            records[b, new_node, _VALUE_SUM] = 0.0
            records[b, new_node, _VALUE_ERROR] = 0.0
            if child_ids[b, parent, _UNVISITED_ACTION] == action:
                _next_unvisited(children_index, children_prior, records, child_ids, b, parent)
        node_parent[b, new_node] = parent
        node_action[b, new_node] = action
        child_ids[b, new_node, _ACTION] = action
        node_reward[b, new_node] = reward[b]
        node_raw_value[b, new_node] = value[b]
        low = min_max[b, 0]
        high = min_max[b, 1]
        g = np.float64(value[b])
        node = new_node
        while node != 0:
            value_sum = _add_return(records, b, node, g)
            visits = records[b, node, _VISITS] + 1.0
            records[b, node, _VISITS] = visits
            records[b, node, _EXPLORATION] = exploration_table[int(visits)]
            r = node_reward[b, node]
            q = r + sign_discount * (value_sum / visits)
            g = r + sign_discount * g
            records[b, node, _EXPLORE] = records[b, node, _PRIOR] / (visits + 1.0)
            records[b, node, _Q] = q
            high = max(high, q)
            low = min(low, q)
            node = node_parent[b, node]
        value_sum = _add_return(records, b, 0, g)
        visits = records[b, 0, _VISITS] + 1.0
        records[b, 0, _VISITS] = visits
        records[b, 0, _EXPLORATION] = exploration_table[int(visits)]
        q = discount * (value_sum / visits)
        min_max[b, 0] = min(low, q)
        min_max[b, 1] = max(high, q)
    return num_bad


@njit(cache=True)
def _select_range(first, stop, sim, parents, actions, root_actions, has_root_actions,
                  children_index, min_max, records, child_ids, max_depth):
    """Descends trees [first, stop) by pUCT to the edge that simulation ``sim`` creates.

    Writes ``parents[sim] [B]`` and ``actions[sim] [B]`` (int32 [S, B] arrays). At a node
    with N visits, score(a) = E * explore(a) + value_score(a), where E = table[N] =
    c(N) * sqrt(N + offset), explore is prior / (1 + n), and value_score is ``(q - min) /
    (max - min)`` for an existing (hence visited) child (the raw Q while the tree has
    fewer than two distinct Q values, as in the pseudocode) and 0 otherwise. The highest
    score wins; ties go to the lowest action id. Only the existing children and the best
    unvisited action are scored: any other unvisited action scores E * prior, no more
    than the best unvisited one, and loses a tie to it (the lowest id among the largest
    priors). With E = 0 (a root before its first visit, offset 0) every legal score is 0
    and the lowest legal action wins. The descent stops at an edge without a child, or
    at an edge whose child sits at ``max_depth`` (> 0): that child is then evaluated
    again as a new node that keeps its statistics. ``root_actions[b]`` replaces the
    root's choice when ``has_root_actions`` (the hook for other root-selection rules).
    """
    for b in range(first, stop):
        low = min_max[b, 0]
        high = min_max[b, 1]
        if high > low:
            inv_span = 1.0 / (high - low)
        else:
            low = 0.0
            inv_span = 1.0
        node = 0
        depth = 0
        while True:
            child = -1
            if node == 0 and has_root_actions:
                action = root_actions[b]
                child = children_index[b, 0, action]
            else:
                exploration = records[b, node, _EXPLORATION]
                action = -1
                if exploration != 0.0:
                    best = -_INF
                    unvisited = child_ids[b, node, _UNVISITED_ACTION]
                    if unvisited >= 0:
                        best = exploration * records[b, node, _UNVISITED_PRIOR]
                        action = unvisited
                    for k in range(child_ids[b, node, _NUM_CHILDREN]):
                        c = child_ids[b, node, _CHILDREN + k]
                        a = child_ids[b, c, _ACTION]
                        score = exploration * records[b, c, _EXPLORE] + (
                            records[b, c, _Q] - low) * inv_span
                        if score > best or (score == best and a < action):
                            best = score
                            action = a
                            child = c
                if action < 0:   # zero exploration factor (or non-finite scores)
                    action = 0
                    while children_index[b, node, action] == ILLEGAL:
                        action += 1
                    child = children_index[b, node, action]
            if child < 0 or (max_depth > 0 and depth + 1 >= max_depth):
                parents[sim, b] = node
                actions[sim, b] = action
                break
            node = child
            depth += 1


@njit(cache=True)
def sync_tree(node_visits, node_value_sum, node_reward, node_raw_value, node_parent,
              node_action, node_to_play, node_depth, children_index, children_prior,
              children_explore, children_visits, children_q, min_max, records, child_ids,
              last_node, two_player):
    """Writes what the steps keep only in the records into the Tree, for nodes
    0..last_node: visits and value sums, depth and player to move (from the parent:
    parents have lower ids), and ``children_explore`` (prior / (1 + n) of every existing
    edge, the prior of the others, -inf if illegal) with the visits and Q of existing
    edges. The driver calls it after the last simulation, and for the root alone
    (last_node 0) before each call of a root hook."""
    for b in range(node_visits.shape[0]):
        for node in range(last_node + 1):
            node_visits[b, node] = int(records[b, node, _VISITS])
            node_value_sum[b, node] = records[b, node, _VALUE_SUM] + records[b, node, _VALUE_ERROR]
            if node > 0:
                parent = node_parent[b, node]
                node_depth[b, node] = node_depth[b, parent] + 1
                player = node_to_play[b, parent]
                node_to_play[b, node] = 1 - player if two_player else player
            for a in range(children_index.shape[2]):
                legal = children_index[b, node, a] != ILLEGAL
                children_explore[b, node, a] = children_prior[b, node, a] if legal else -_INF
            for k in range(child_ids[b, node, _NUM_CHILDREN]):
                c = child_ids[b, node, _CHILDREN + k]
                a = node_action[b, c]
                children_visits[b, node, a] = int(records[b, c, _VISITS])
                children_q[b, node, a] = records[b, c, _Q]
                children_explore[b, node, a] = records[b, c, _EXPLORE]


@njit(cache=True)
def root_statistics(children_index, children_visits, children_q, children_prior, node_visits,
                    node_value_sum):
    """What a search returns about its roots, from a synced Tree: visit_counts [B, A]
    int32 (0 where no child), policy_target [B, A] float32 (visits / total), root_value
    [B] float32 (value sum / visits), root_q [B, A] float32 (0 where no child) and
    root_prior [B, A] float32."""
    batch, num_actions = children_index.shape[0], children_index.shape[2]
    visit_counts = np.zeros((batch, num_actions), np.int32)
    policy_target = np.empty((batch, num_actions), np.float32)
    root_value = np.empty(batch, np.float32)
    root_q = np.zeros((batch, num_actions), np.float32)
    root_prior = np.empty((batch, num_actions), np.float32)
    for b in range(batch):
        total = 0
        for a in range(num_actions):
            if children_index[b, 0, a] >= 0:
                visit_counts[b, a] = children_visits[b, 0, a]
                root_q[b, a] = children_q[b, 0, a]
            total += visit_counts[b, a]
            root_prior[b, a] = children_prior[b, 0, a]
        for a in range(num_actions):
            policy_target[b, a] = visit_counts[b, a] / total
        root_value[b] = node_value_sum[b, 0] / node_visits[b, 0]
    return visit_counts, policy_target, root_value, root_q, root_prior


@njit(cache=True)
def step_serial(node_reward, node_raw_value, node_parent, node_action, children_index,
                children_prior, min_max, records, child_ids,
                sim, parents, actions, reward, value, logits, mask, has_mask, do_select,
                root_actions, has_root_actions, exploration_table, discount, two_player,
                max_depth):
    """One simulation's tree work for all B trees, one phase after another.

    Takes the Tree fields the steps touch, then :func:`allocate_records`; parents and
    actions are [S, B] int32, row s being simulation s's edge. If ``sim >= 0``: creates
    node ``sim + 1`` under ``(parents[sim], actions[sim])`` from reward [B], value [B]
    float32, logits [B, A] float32 and mask [B, A] bool, and backs it up; then, if
    ``do_select``, writes simulation sim + 1's edges into row sim + 1. ``sim < 0`` only
    selects, for simulation ``-1 - sim`` (the first one, or after a root hook).
    ``root_actions [B]`` int32 forces the root's choice when ``has_root_actions``;
    exploration_table is :func:`puct_tables`. Returns the number of trees whose outputs
    were not finite. (Few arguments on purpose: each costs about 65 ns per call.)
    """
    batch = node_parent.shape[0]
    do_expand = sim >= 0
    next_sim = sim + 1 if do_expand else -1 - sim
    num_bad = 0
    if do_expand:
        num_bad += _edges_range(0, batch, sim + 1, logits, mask, has_mask, children_index,
                                children_prior, records, child_ids)
        num_bad += _attach_backup_range(
            0, batch, sim, parents, actions, reward, value, node_reward, node_raw_value,
            node_parent, node_action, children_index, children_prior, min_max, records,
            child_ids, exploration_table, discount, two_player)
    if do_select:
        _select_range(0, batch, next_sim, parents, actions, root_actions, has_root_actions,
                      children_index, min_max, records, child_ids, max_depth)
    return num_bad


@njit(cache=True, parallel=True)
def step_parallel(node_reward, node_raw_value, node_parent, node_action, children_index,
                  children_prior, min_max, records, child_ids,
                  sim, parents, actions, reward, value, logits, mask, has_mask, do_select,
                  root_actions, has_root_actions, exploration_table, discount, two_player,
                  max_depth, num_chunks):
    """:func:`step_serial` with ``num_chunks`` chunks of trees spread over Numba's threads.

    A few chunks per thread let uneven trees balance out (the driver passes 4 per thread).
    """
    batch = node_parent.shape[0]
    num_chunks = max(1, min(batch, num_chunks))
    do_expand = sim >= 0
    next_sim = sim + 1 if do_expand else -1 - sim
    num_bad = 0
    for chunk in prange(num_chunks):
        first = chunk * batch // num_chunks
        stop = (chunk + 1) * batch // num_chunks
        bad = 0
        if do_expand:
            bad += _edges_range(first, stop, sim + 1, logits, mask, has_mask, children_index,
                                children_prior, records, child_ids)
            bad += _attach_backup_range(
                first, stop, sim, parents, actions, reward, value, node_reward,
                node_raw_value, node_parent, node_action, children_index, children_prior,
                min_max, records, child_ids, exploration_table, discount, two_player)
        if do_select:
            _select_range(first, stop, next_sim, parents, actions, root_actions,
                          has_root_actions, children_index, min_max, records, child_ids,
                          max_depth)
        num_bad += bad
    return num_bad
