"""Numba kernels of Gumbel MuZero's search (``SearchConfig.root_selection = "gumbel"``).

Danihelka et al. 2022, as mctx implements it (``gumbel_muzero_policy`` with
``qtransform_completed_by_mix_value``). A simulation step reuses the edge rows, attach and
backup of the pUCT kernels (:mod:`muzero.mcts.kernels`, whose module docstring explains
the records and the phases); only the selection differs, and the search's outputs come
from :func:`gumbel_root_outputs`. Parity with mctx's golden trees and with
:mod:`muzero.mcts.reference` is tested in tests/test_gumbel.py.

Imports only NumPy, Numba and the standard library; never TensorFlow.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from muzero.mcts.kernels import (_ACTION, _CHILDREN, _INF, _NUM_CHILDREN, _PRIOR, _Q, _UNVISITED_ACTION,
                                 _UNVISITED_PRIOR, _VISITS, _attach_backup_range, _edges_range,
                                 exp_nonpositive)
from muzero.mcts.tree import ILLEGAL, UNVISITED


# -- Gumbel MuZero (SearchConfig.root_selection = "gumbel") ---------------------------------------
# Danihelka et al. 2022, as mctx implements it (gumbel_muzero_policy with
# qtransform_completed_by_mix_value). The steps reuse the edge rows, attach and backup of
# pUCT; only the selection differs, and the search's outputs come from gumbel_root_outputs.
# Every node's Q values are "completed" and squashed to sigma (all in the view of the
# player choosing at the node, over its legal actions a):
#   v_mix    = (v_net + sum_b N(b) * sum_{N(b)>0} p(b) q(b) / sum_{N(b)>0} p(b)) / (1 + sum_b N(b))
#   qc(a)    = q(a) if N(a) > 0 else v_mix
#   sigma(a) = (maxvisit_init + max_b N(b)) * value_scale * (qc(a) - min qc) / max(max qc - min qc, 1e-8)
# (priors floored at the smallest normal float in v_mix, as mctx does). Interior nodes take
#   argmax_a softmax(log p + sigma)(a) - N(a) / (1 + sum_b N(b))
# and the root takes, among the actions whose visits equal the sequential-halving table's
# entry for this simulation, argmax_a max(-1e9, g(a) + log p(a) + sigma(a)) with g the
# root's Gumbel noise. Ties go to the lowest action id.
_TINY = 2.2250738585072014e-308   # mctx's floor on prior probabilities in the mixed value
_RESCALE_EPSILON = 1e-8           # mctx's floor on max - min when rescaling Q to [0, 1]
_LOW_LOGIT = -1e9                 # mctx's floor on g + log p + sigma at the root


# The completion's arithmetic, shared by the selection (over a node's child list, in
# creation order) and the root outputs (over the synced Tree, in action order). Scalars
# only: a helper that took arrays would cost Numba's reference counting per call.
# (sum N, max N, sum p, sum p q, min q, max q) before any child is added
_COMPLETION_START = (0.0, 0.0, 0.0, 0.0, _INF, -_INF)


@njit(cache=True, inline='always')
def _completion_add(sum_n, max_n, sum_p, sum_pq, low, high, n, prior, q):
    """Adds a visited child (visits n, prior, Q q) to the completion's running sums:
    returns the new (sum N, max N, sum p, sum p q, min q, max q)."""
    p = max(prior, _TINY)
    return sum_n + n, max(max_n, n), sum_p + p, sum_pq + p * q, min(low, q), max(high, q)


@njit(cache=True, inline='always')
def _completion_finish(raw, sum_n, max_n, sum_p, sum_pq, low, high, has_unvisited, value_scale,
                       maxvisit_init, tree_low, tree_high):
    """From the sums over the visited children and the network's value ``raw`` at the node:
    (v_mix, min and max of the completed Q over legal actions, the sigma scale). With
    ``tree_low <= tree_high`` (SearchConfig.gumbel_q_range = "tree": the tree's min_max
    row) the range is widened to include [tree_low, tree_high]; pass (inf, -inf) for the
    node's own range (mctx)."""
    v_mix = raw if sum_n == 0.0 else (raw + sum_n * (sum_pq / sum_p)) / (sum_n + 1.0)
    if has_unvisited:   # some legal action is completed by v_mix
        low = min(low, v_mix)
        high = max(high, v_mix)
    low = min(low, tree_low)
    high = max(high, tree_high)
    scale = (maxvisit_init + max_n) * value_scale / max(high - low, _RESCALE_EPSILON)
    return v_mix, low, high, scale


@njit(cache=True)
def _gumbel_select_range(first, stop, sim, parents, actions, children_index, node_raw_value, records,
                         child_ids, max_depth, root_base, table, num_considered, value_scale,
                         maxvisit_init, root_order, root_next, min_max, tree_range):
    """:func:`muzero.mcts.kernels._select_range` for Gumbel MuZero: sequential halving at the root, the
    deterministic interior rule below it; same outputs and depth cut-off.

    One loop body for every level, with no calls that take arrays (Numba pays atomic
    reference counts for each array argument of every call, inlined or not, which cost
    more than the arithmetic here). At each node: the completion over its existing
    children (sum N, max N, v_mix, min and max of the completed Q), then the root's or the
    interior's rule.

    Root: while every candidate is unvisited (the first round of sequential halving) they
    share sigma(v_mix), and the best is the first unvisited action in ``root_order``
    [B, A] int32 (actions by g + log p, highest first, lowest id on ties; illegal ones
    last); ``root_next`` [B] int32 is where that walk stopped last time (actions only gain
    children). Later rounds score the root's existing children only (candidates have
    visits). Interior: the unvisited actions share sigma(v_mix) and N = 0, so the best of
    them is the one with the largest prior (lowest id), which the record already holds;
    ``weights`` [A] is scratch for the children's p * exp(sigma - top), top being the
    node's own largest sigma. With ``tree_range`` the Q range of every node includes the
    tree's ``min_max`` row.
    """
    num_actions = children_index.shape[2]
    weights = np.empty(num_actions, np.float64)
    for b in range(first, stop):
        node = 0
        depth = 0
        tree_low, tree_high = (min_max[b, 0], min_max[b, 1]) if tree_range else (_INF, -_INF)
        while True:
            at_root = node == 0
            num_children = child_ids[b, node, _NUM_CHILDREN]
            unvisited = child_ids[b, node, _UNVISITED_ACTION]
            if num_children == 0 and unvisited >= 0 and not at_root:
                # No child yet: every legal action is unvisited, and the interior rule
                # below would pick the largest prior (lowest id), the record's action.
                parents[sim, b] = node
                actions[sim, b] = unvisited
                break
            sum_n, max_n, sum_p, sum_pq, low, high = _COMPLETION_START
            for k in range(num_children):
                c = child_ids[b, node, _CHILDREN + k]
                sum_n, max_n, sum_p, sum_pq, low, high = _completion_add(
                    sum_n, max_n, sum_p, sum_pq, low, high, records[b, c, _VISITS], records[b, c, _PRIOR],
                    records[b, c, _Q])
            own_high = high   # the node's best visited Q, before any widening to the tree's range
            v_mix, low, high, scale = _completion_finish(node_raw_value[b, node], sum_n, max_n, sum_p, sum_pq,
                                                         low, high, unvisited >= 0, value_scale, maxvisit_init,
                                                         tree_low, tree_high)
            action = -1
            if at_root:
                # Among the legal actions whose visits equal the table's entry, the argmax of
                # max(-1e9, g + log p + sigma); lowest id on ties.
                considered_visit = table[num_considered[b], int(records[b, 0, _VISITS])]
                best = -_INF
                if considered_visit == 0:   # the candidates are the unvisited actions
                    i = root_next[b]
                    while i < num_actions and children_index[b, 0, root_order[b, i]] >= 0:
                        i += 1
                    root_next[b] = i
                    if i < num_actions and children_index[b, 0, root_order[b, i]] == UNVISITED:
                        sigma = scale * (v_mix - low)
                        best = root_base[b, root_order[b, i]] + sigma
                        if best > _LOW_LOGIT:   # else every candidate ties at -1e9: below
                            action = root_order[b, i]
                            # Others whose sum rounds to the same float tie: lowest id.
                            i += 1
                            while i < num_actions and children_index[b, 0, root_order[b, i]] != ILLEGAL:
                                other = root_order[b, i]
                                if children_index[b, 0, other] == UNVISITED:
                                    if root_base[b, other] + sigma != best:
                                        break
                                    action = min(action, other)
                                i += 1
                else:
                    for k in range(num_children):   # the candidates have children
                        c = child_ids[b, 0, _CHILDREN + k]
                        if records[b, c, _VISITS] == considered_visit:
                            a = child_ids[b, c, _ACTION]
                            score = max(_LOW_LOGIT, root_base[b, a] + scale * (records[b, c, _Q] - low))
                            if score > best or (score == best and a < action):
                                best = score
                                action = a
                if action < 0:
                    # Every candidate's score is at the -1e9 floor, so they tie: the lowest id
                    # among them. (The table guarantees a candidate; the first legal action
                    # only guards against a corrupt one.)
                    first_legal = -1
                    for a in range(num_actions):
                        child = children_index[b, 0, a]
                        if child == ILLEGAL:
                            continue
                        if first_legal < 0:
                            first_legal = a
                        if (records[b, child, _VISITS] if child >= 0 else 0.0) == considered_visit:
                            action = a
                            break
                    if action < 0:
                        action = first_legal
            else:
                # argmax_a softmax(log p + sigma)(a) - N(a) / (1 + sum N); lowest id on ties.
                # Exponents are taken relative to the largest sigma among this node's own
                # completed Q values (its best child, or v_mix for the unvisited actions): with
                # the tree's range the range's top can lie far above them, and exponents
                # relative to it underflowed to the same floor for every child.
                if unvisited >= 0:
                    own_high = max(own_high, v_mix)
                top = scale * (own_high - low)
                z = 0.0
                visited_prior = 0.0
                for k in range(num_children):
                    c = child_ids[b, node, _CHILDREN + k]
                    p = records[b, c, _PRIOR]
                    visited_prior += p
                    weights[k] = p * exp_nonpositive(scale * (records[b, c, _Q] - low) - top)
                    z += weights[k]
                e_unvisited = 0.0
                if unvisited >= 0:
                    e_unvisited = exp_nonpositive(scale * (v_mix - low) - top)
                    z += max(1.0 - visited_prior, 0.0) * e_unvisited   # the unvisited prior mass
                inv_z = 1.0 / z if z > 0.0 else 1.0
                inv_n = 1.0 / (1.0 + sum_n)
                best = -_INF
                if unvisited >= 0:
                    best = records[b, node, _UNVISITED_PRIOR] * e_unvisited * inv_z
                    action = unvisited
                for k in range(num_children):
                    c = child_ids[b, node, _CHILDREN + k]
                    a = child_ids[b, c, _ACTION]
                    score = weights[k] * inv_z - records[b, c, _VISITS] * inv_n
                    if score > best or (score == best and a < action):
                        best = score
                        action = a
            child = children_index[b, node, action]
            if child < 0 or (max_depth > 0 and depth + 1 >= max_depth):
                parents[sim, b] = node
                actions[sim, b] = action
                break
            node = child
            depth += 1


@njit(cache=True)
def gumbel_step_serial(node_reward, node_raw_value, node_parent, node_action, children_index,
                       children_prior, min_max, records, child_ids,
                       sim, parents, actions, reward, value, logits, mask, has_mask, do_select,
                       root_actions, has_root_actions, exploration_table, discount, two_player,
                       max_depth, root_base, table, num_considered, value_scale, maxvisit_init,
                       root_order, root_next, tree_range):
    """:func:`muzero.mcts.kernels.step_serial` with Gumbel MuZero's selection (root_actions is not used). The
    extra arguments: root_base [B, A] float64 (g + log p at the root), table [m + 1, S]
    int32 (:func:`muzero.mcts.gumbel.considered_visit_table`), num_considered [B] int32,
    the sigma constants, root_order [B, A] int32 and root_next [B] int32 (zeros before
    the first step; above :func:`_gumbel_select_range`) and tree_range (bool:
    SearchConfig.gumbel_q_range == "tree")."""
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
        _gumbel_select_range(0, batch, next_sim, parents, actions, children_index, node_raw_value,
                             records, child_ids, max_depth, root_base, table, num_considered,
                             value_scale, maxvisit_init, root_order, root_next, min_max, tree_range)
    return num_bad


@njit(cache=True, parallel=True)
def gumbel_step_parallel(node_reward, node_raw_value, node_parent, node_action, children_index,
                         children_prior, min_max, records, child_ids,
                         sim, parents, actions, reward, value, logits, mask, has_mask, do_select,
                         root_actions, has_root_actions, exploration_table, discount, two_player,
                         max_depth, root_base, table, num_considered, value_scale, maxvisit_init,
                         root_order, root_next, tree_range, num_chunks):
    """:func:`gumbel_step_serial` over chunks of trees on Numba's threads."""
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
            _gumbel_select_range(first, stop, next_sim, parents, actions, children_index, node_raw_value,
                                 records, child_ids, max_depth, root_base, table, num_considered,
                                 value_scale, maxvisit_init, root_order, root_next, min_max, tree_range)
        num_bad += bad
    return num_bad


@njit(cache=True)
def gumbel_root_outputs(children_index, children_visits, children_q, children_prior, node_raw_value,
                        root_logp, root_base, value_scale, maxvisit_init, min_max, tree_range):
    """Gumbel MuZero's outputs from a synced Tree: the improved policy [B, A] float32,
    softmax over legal actions of log p + sigma (0 at illegal actions), and the action [B]
    int32, argmax of max(-1e9, g + log p + sigma) among the legal actions visited most
    (lowest id on ties). root_logp [B, A] float64 is log p (-inf where illegal), root_base
    g + log p."""
    batch, num_actions = children_index.shape[0], children_index.shape[2]
    improved = np.zeros((batch, num_actions), np.float32)
    chosen = np.empty(batch, np.int32)
    sigma = np.empty(num_actions, np.float64)
    for b in range(batch):
        sum_n, max_n, sum_p, sum_pq, low, high = _COMPLETION_START
        has_unvisited = False
        for a in range(num_actions):
            child = children_index[b, 0, a]
            if child == ILLEGAL:
                continue
            if child >= 0 and children_visits[b, 0, a] > 0:
                sum_n, max_n, sum_p, sum_pq, low, high = _completion_add(
                    sum_n, max_n, sum_p, sum_pq, low, high, np.float64(children_visits[b, 0, a]),
                    children_prior[b, 0, a], children_q[b, 0, a])
            else:
                has_unvisited = True
        tree_low, tree_high = (min_max[b, 0], min_max[b, 1]) if tree_range else (_INF, -_INF)
        v_mix, low, high, scale = _completion_finish(node_raw_value[b, 0], sum_n, max_n, sum_p, sum_pq, low,
                                                     high, has_unvisited, value_scale, maxvisit_init,
                                                     tree_low, tree_high)
        top = -_INF
        for a in range(num_actions):
            child = children_index[b, 0, a]
            visited = child >= 0 and children_visits[b, 0, a] > 0
            sigma[a] = scale * ((children_q[b, 0, a] if visited else v_mix) - low)
            if child != ILLEGAL:
                top = max(top, root_logp[b, a] + sigma[a])
        total = 0.0
        for a in range(num_actions):
            if children_index[b, 0, a] != ILLEGAL:
                total += exp_nonpositive(root_logp[b, a] + sigma[a] - top)
        best = -_INF
        action = -1
        for a in range(num_actions):
            child = children_index[b, 0, a]
            if child == ILLEGAL:
                continue
            improved[b, a] = exp_nonpositive(root_logp[b, a] + sigma[a] - top) / total
            n = np.float64(children_visits[b, 0, a]) if child >= 0 else 0.0
            score = max(_LOW_LOGIT, root_base[b, a] + sigma[a])
            if n == max_n and score > best:
                best = score
                action = a
        chosen[b] = action
    return improved, chosen
