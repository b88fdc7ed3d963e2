"""Gumbel MuZero (``SearchConfig.root_selection="gumbel"``): the schedule, the formulas on
worked examples, and the Numba search against the plain-Python reference."""
import itertools
import math

import numpy as np
import pytest

from muzero.algorithms.muzero.acting import SearchPolicy
from muzero.mcts.config import SearchConfig
from muzero.mcts import RootOutputs, search
from muzero.mcts import gumbel_kernels
from muzero.mcts.gumbel import considered_visit_sequence, considered_visit_table, root_log_prior
from muzero.mcts.reference import (Node, completed_sigma, considered_visits, gumbel_interior_child,
                                   run_gumbel_mcts)
from muzero.mcts.tree import UNVISITED
from tests.test_mcts_parity import PathNetwork


def test_sequential_halving_schedule_by_hand():
    # m = 16, S = 50 (mctx's defaults with 50 simulations): ceil(log2 16) = 4 rounds.
    # Round 1: max(1, floor(50 / (4 * 16))) = 1 pass over 16 actions at 0 visits.
    # Round 2: floor(50 / 32) = 1 pass over 8 actions at 1 visit.
    # Round 3: floor(50 / 16) = 3 passes over 4 actions (2, 3, 4 visits).
    # Round 4 and on: floor(50 / 8) = 6 passes over 2 actions (5 .. 10, then 11 ...), cut at 50.
    expected = ([0] * 16 + [1] * 8 + [2] * 4 + [3] * 4 + [4] * 4
                + [5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10] + [11, 11])
    assert len(expected) == 50
    assert considered_visit_sequence(16, 50) == expected
    # m = 4, S = 8: one pass over 4 (0 visits), then floor(8 / 4) = 2 passes over 2.
    assert considered_visit_sequence(4, 8) == [0, 0, 0, 0, 1, 1, 2, 2]
    # One considered action (or none) takes every simulation.
    assert considered_visit_sequence(1, 5) == [0, 1, 2, 3, 4]
    assert considered_visit_sequence(0, 3) == [0, 1, 2]
    table = considered_visit_table(16, 50)
    assert table.shape == (17, 50) and table.dtype == np.int32
    assert table[16].tolist() == expected and table[4].tolist() == considered_visit_sequence(4, 50)


@pytest.mark.parametrize("m,s", list(itertools.product([0, 1, 2, 3, 5, 8, 16, 18], [1, 2, 4, 7, 16, 50, 200])))
def test_schedule_matches_the_reference_transcription(m, s):
    assert considered_visit_sequence(m, s) == considered_visits(m, s)


def _config(**kw):
    return SearchConfig(root_selection="gumbel", discount=1.0, **kw)


def _worked_node():
    """Raw value 0.5; actions 0 (prior 0.5, 2 visits, Q 1), 1 (prior 0.25, 1 visit, Q -1),
    2 (prior 0.25, unvisited)."""
    node = Node(0.0, 0)
    node.raw_value = 0.5
    for action, prior, visits, value_sum in ((0, 0.5, 2, 2.0), (1, 0.25, 1, -1.0), (2, 0.25, 0, 0.0)):
        child = Node(prior, 1)
        child.visit_count, child.value_sum = visits, value_sum
        node.children[action] = child
    return node


# The worked example by hand: sum N = 3, visited prior mass 0.75,
# weighted Q = (0.5 * 1 + 0.25 * -1) / 0.75 = 1/3, v_mix = (0.5 + 3 * 1/3) / 4 = 0.375;
# completed Q = (1, -1, 0.375) -> rescaled (1, 0, 0.6875); max N = 2 -> (50 + 2) * 0.1 = 5.2;
# sigma = (5.2, 0, 3.575).
SIGMA = [5.2, 0.0, 0.6875 * 5.2]
WEIGHTS = [0.5 * math.exp(SIGMA[0]), 0.25 * math.exp(SIGMA[1]), 0.25 * math.exp(SIGMA[2])]
IMPROVED = [w / sum(WEIGHTS) for w in WEIGHTS]   # softmax(log p + sigma) = (0.9081, 0.0025, 0.0894)


def test_completed_q_by_mixed_value_worked_example():
    sigma = completed_sigma(_config(), _worked_node())
    assert [sigma[a] for a in range(3)] == pytest.approx(SIGMA, rel=1e-12)
    assert IMPROVED == pytest.approx([0.9081, 0.0025, 0.0894], abs=1e-4)


def test_interior_rule_worked_example():
    # scores: improved - N / (1 + 3): 0.9081 - 0.5, 0.0025 - 0.25, 0.0894 - 0 -> action 0
    action, _ = gumbel_interior_child(_config(), _worked_node())
    assert action == 0
    # Action 0 at 12 visits (sum N = 13): v_mix = (0.5 + 13/3) / 14 = 0.3452, rescaled
    # (1, 0, 0.6726), scale (50 + 12) * 0.1 = 6.2, softmax (0.9375, 0.0010, 0.0616); scores
    # 0.9375 - 12/14 = 0.0804, 0.0010 - 1/14, 0.0616: still action 0. At 20 visits (sum N =
    # 21): v_mix = 0.3409, scale 7.0, softmax (0.9522, 0.0004, 0.0474); scores 0.9522 - 20/22
    # = 0.0431 against 0.0474: the unvisited action 2.
    node = _worked_node()
    node.children[0].visit_count, node.children[0].value_sum = 12, 12.0
    assert gumbel_interior_child(_config(), node)[0] == 0
    node.children[0].visit_count, node.children[0].value_sum = 20, 20.0
    assert gumbel_interior_child(_config(), node)[0] == 2


def test_root_outputs_kernel_worked_example():
    b, n, a = 2, 3, 3
    children_index = np.full((b, n, a), UNVISITED, np.int32)
    children_visits = np.zeros((b, n, a), np.int32)
    children_q = np.zeros((b, n, a), np.float64)
    children_prior = np.zeros((b, n, a), np.float64)
    node_raw_value = np.zeros((b, n), np.float64)
    prior = np.array([0.5, 0.25, 0.25])
    for tree in range(2):
        children_index[tree, 0, :2] = [1, 2]
        children_q[tree, 0, :2] = [1.0, -1.0]
        children_prior[tree, 0] = prior
        node_raw_value[tree, 0] = 0.5
    children_visits[0, 0, :2] = [2, 1]
    children_visits[1, 0, :2] = [2, 2]
    logp = np.log(np.repeat(prior[None], 2, axis=0))
    gumbel = np.array([[0.0, 9.0, 9.0], [0.0, 6.0, 0.0]])
    no_bounds = np.array([[np.inf, -np.inf]] * 2)
    improved, action = gumbel_kernels.gumbel_root_outputs(children_index, children_visits, children_q, children_prior,
                                                   node_raw_value, logp, logp + gumbel, 0.1, 50.0, no_bounds, False)
    np.testing.assert_allclose(improved[0], IMPROVED, rtol=1e-6)
    # Tree 0: only action 0 has the most visits (2), whatever the noise on the others.
    assert action[0] == 0
    # Tree 1: actions 0 and 1 both have 2 visits. sum N = 4, v_mix = (0.5 + 4/3) / 5 = 0.36667,
    # completed (1, -1, 0.36667), sigma = 5.2 * (1, 0, 0.68333). Scores g + log p + sigma:
    # action 0: 0 + log 0.5 + 5.2 = 4.507; action 1: 6 + log 0.25 + 0 = 4.614 -> action 1.
    assert action[1] == 1
    sigma = 5.2 * np.array([1.0, 0.0, (0.36667 + 1.0) / 2.0])
    weights = prior * np.exp(sigma)
    np.testing.assert_allclose(improved[1], weights / weights.sum(), rtol=1e-4)


def test_tree_q_range_worked_example():
    """gumbel_q_range = "tree": Q rescaled over the node's range widened to the tree's bounds."""
    # The reference on the worked node, with tree bounds [-3, 2]: completed Q (1, -1, 0.375),
    # range [-3, 2] (width 5), scale 5.2 / 5 = 1.04, sigma = 1.04 * (4, 2, 3.375).
    from muzero.mcts.reference import MinMaxStats
    stats = MinMaxStats((-3.0, 2.0))
    sigma = completed_sigma(_config(gumbel_q_range="tree"), _worked_node(), tree_stats=stats)
    assert [sigma[a] for a in range(3)] == pytest.approx([4.16, 2.08, 3.51], rel=1e-9)
    # Bounds inside the node's range change nothing: [0, 0.5] within [-1, 1].
    sigma = completed_sigma(_config(gumbel_q_range="tree"), _worked_node(), tree_stats=MinMaxStats((0.0, 0.5)))
    assert [sigma[a] for a in range(3)] == pytest.approx(SIGMA, rel=1e-9)

    # The root-outputs kernel, tree 1 of the example above (actions 0 and 1 with 2 visits
    # each, Q 1 and -1, prior (0.5, 0.25, 0.25), raw value 0.5): v_mix = 0.36667.
    # Node range [-1, 1]: sigma = 5.2 * (1, 0, 0.68333); with g = (0, 3.5, 0) the scores are
    # action 0: log 0.5 + 5.2 = 4.507, action 1: 3.5 + log 0.25 + 0 = 2.114 -> action 0.
    # Tree bounds [-3, 2]: scale 5.2 / 5 = 1.04, sigma = 1.04 * (4, 2, 3.36667); scores
    # action 0: log 0.5 + 4.16 = 3.467, action 1: 3.5 + log 0.25 + 2.08 = 4.194 -> action 1.
    children_index = np.full((1, 3, 3), UNVISITED, np.int32)
    children_index[0, 0, :2] = [1, 2]
    children_visits = np.zeros((1, 3, 3), np.int32)
    children_visits[0, 0, :2] = [2, 2]
    children_q = np.zeros((1, 3, 3), np.float64)
    children_q[0, 0, :2] = [1.0, -1.0]
    prior = np.array([0.5, 0.25, 0.25])
    children_prior = np.zeros((1, 3, 3), np.float64)
    children_prior[0, 0] = prior
    node_raw_value = np.zeros((1, 3), np.float64)
    node_raw_value[0, 0] = 0.5
    logp = np.log(prior)[None]
    base = logp + np.array([[0.0, 3.5, 0.0]])
    bounds = np.array([[-3.0, 2.0]])
    outputs = {tree: gumbel_kernels.gumbel_root_outputs(children_index, children_visits, children_q, children_prior,
                                                 node_raw_value, logp, base, 0.1, 50.0, bounds, tree)
               for tree in (False, True)}
    assert int(outputs[False][1][0]) == 0 and int(outputs[True][1][0]) == 1
    v_mix = (0.5 + 4 * (0.5 - 0.25) / 0.75) / 5
    weights = prior * np.exp(1.04 * np.array([4.0, 2.0, v_mix + 3.0]))
    np.testing.assert_allclose(outputs[True][0][0], weights / weights.sum(), rtol=1e-5)


def test_first_simulations_visit_the_gumbel_top_k_in_order():
    # Before any action is revisited, the root picks unvisited actions, all completed by the
    # same v_mix: the order is that of g + log p (Gumbel-top-k without replacement).
    batch, num_actions, k = 4, 10, 6
    rng = np.random.default_rng(3)
    net = PathNetwork(3, batch, num_actions, use_masks=False)
    value, logits, _ = net.root(rng)
    gumbel = rng.gumbel(size=(batch, num_actions))
    net.trace = []
    config = SearchConfig(root_selection="gumbel", num_simulations=k, max_num_considered_actions=k)
    result = search(RootOutputs(value, logits), net, config, rng, noise=gumbel)
    first = np.array([[a[i] for _, a, _ in net.trace] for i in range(batch)])
    order = np.argsort(-(gumbel + root_log_prior(logits, np.ones_like(logits, bool))), axis=1, kind="stable")
    np.testing.assert_array_equal(first, order[:, :k])
    np.testing.assert_array_equal(result.visit_counts.sum(axis=1), k)
    assert result.visit_counts.max() == 1


CASES = list(itertools.product([1, 5], [2, 9, 18], [1, 4, 16, 50], [False, True], [False, True]))


@pytest.mark.parametrize("index", range(len(CASES)),
                         ids=[f"B{b}-A{a}-S{s}-{'2p' if p else '1p'}-{'mask' if m else 'nomask'}"
                              for b, a, s, p, m in CASES])
def test_gumbel_kernel_matches_reference(index):
    batch, num_actions, num_simulations, two_player, use_masks = CASES[index]
    config = SearchConfig(num_simulations=num_simulations, root_selection="gumbel", two_player=two_player,
                          discount=(0.997, 1.0, 0.9)[index % 3], max_depth=3 if index % 5 == 2 else 0,
                          max_num_considered_actions=(16, 4, 2)[index % 3],
                          gumbel_value_scale=(0.1, 0.5)[index % 2], gumbel_maxvisit_init=(50.0, 5.0)[index % 2],
                          gumbel_q_range=("node", "tree")[(index // 3) % 2])
    rng = np.random.default_rng(2000 + index)
    net = PathNetwork(index, batch, num_actions, use_masks)
    value, logits, mask = net.root(rng)
    to_play = rng.integers(0, 2, batch) if two_player else None
    training = index % 4 != 3
    gumbel = rng.gumbel(size=(batch, num_actions)) if training else np.zeros((batch, num_actions))
    net.trace = []
    result = search(RootOutputs(value, logits, mask, to_play), net, config, rng,
                    noise=gumbel if training else None, add_noise=training)
    for b in range(batch):
        ref = run_gumbel_mcts(config, float(value[b]), logits[b], None if mask is None else mask[b],
                              0 if to_play is None else int(to_play[b]), net.one_tree(b), gumbel[b])
        assert [(int(p[b]), int(a[b]), int(n[b])) for p, a, n in net.trace] == ref["trace"], f"tree {b}"
        np.testing.assert_array_equal(result.visit_counts[b], ref["visit_counts"])
        np.testing.assert_allclose(result.root_value[b], ref["root_value"], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(result.policy_target[b], ref["improved_policy"], rtol=1e-5, atol=1e-6)
        assert int(result.action[b]) == ref["action"]
        if mask is not None:
            assert np.all(result.policy_target[b][~mask[b]] == 0.0) and mask[b][result.action[b]]


@pytest.mark.parametrize("seed", range(4))
def test_gumbel_interior_rule_with_the_trees_range_at_large_value_scales(seed):
    # With gumbel_q_range "tree" a node's rescaling range reaches the tree's bounds, which can
    # lie far above its own children's Q. At value scale 30, (maxvisit_init + N) x value_scale
    # >= 1,500, so the children's sigmas sit up to ~1,500 below the range's top: exponents
    # taken from that top all clamp at the exp floor and every child ties, while the
    # reference's log-softmax still ranks them. The interior rule must pick as the reference.
    batch, num_actions = 6, 4
    config = SearchConfig(num_simulations=40, root_selection="gumbel", discount=0.997, gumbel_q_range="tree",
                          gumbel_value_scale=30.0, max_num_considered_actions=2)
    rng = np.random.default_rng(700 + seed)
    net = PathNetwork(700 + seed, batch, num_actions, use_masks=False)
    value, logits, _ = net.root(rng)
    gumbel = rng.gumbel(size=(batch, num_actions))
    net.trace = []
    result = search(RootOutputs(value, logits), net, config, rng, noise=gumbel)
    for b in range(batch):
        ref = run_gumbel_mcts(config, float(value[b]), logits[b], None, 0, net.one_tree(b), gumbel[b])
        assert [(int(p[b]), int(a[b]), int(n[b])) for p, a, n in net.trace] == ref["trace"], f"tree {b}"
        np.testing.assert_array_equal(result.visit_counts[b], ref["visit_counts"])


def test_gumbel_parallel_kernel_matches_serial():
    batch, num_actions = 23, 9
    config = SearchConfig(num_simulations=20, root_selection="gumbel", two_player=True)
    results = []
    for parallel in (False, True):
        net = PathNetwork(78, batch, num_actions, use_masks=True)
        net.trace = []
        value, logits, mask = net.root(np.random.default_rng(6))
        results.append(search(RootOutputs(value, logits, mask), net, config, np.random.default_rng(1),
                              parallel=parallel))
    np.testing.assert_array_equal(results[0].visit_counts, results[1].visit_counts)
    np.testing.assert_array_equal(results[0].action, results[1].action)
    np.testing.assert_array_equal(results[0].policy_target, results[1].policy_target)


def test_search_policy_plays_the_gumbel_choice_and_refuses_a_root_hook():
    batch, num_actions = 3, 5
    net = PathNetwork(9, batch, num_actions, use_masks=False)
    value, logits, _ = net.root(np.random.default_rng(9))
    config = SearchConfig(num_simulations=8, root_selection="gumbel")
    policy = SearchPolicy(config, batch, num_actions, np.random.default_rng(0), evaluation=True,
                          in_tree_masks=False)
    net.trace = []
    actions, result = policy.act(value, logits, np.ones((batch, num_actions), bool), np.zeros(batch, np.int32), net)
    np.testing.assert_array_equal(actions, result.action)
    np.testing.assert_allclose(result.policy_target.sum(axis=1), 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match="root_action_fn cannot be combined"):
        search(RootOutputs(value, logits), net, config, np.random.default_rng(0),
               root_action_fn=lambda tree, sim: np.zeros(batch, np.int32))
    with pytest.raises(Exception, match="root_selection"):
        SearchConfig(root_selection="ucb")


def test_equal_returns_added_in_another_order_tie_to_the_lowest_id():
    # As tests/test_mcts_parity.py's test of that name, with Gumbel MuZero's root in
    # evaluation (no noise, equal priors): with two actions sequential halving alternates
    # (0, 0, 1, 1, 2, 2, 3, ...), and at simulation 6 both root children have the same
    # three returns, added in another order. Once their Q differed by an ulp, the rescaled
    # sigma (span floored at 1e-8) turned that into 1e-7 and child 1 won; now they tie.
    from tests.test_mcts_parity import ReorderedReturnsNetwork
    v, lists = -0.5, [[-0.8, -0.7, 0.0], [-0.7, -0.8, 0.0]]
    config = SearchConfig(root_selection="gumbel", num_simulations=7, discount=0.997, max_depth=2)
    net = ReorderedReturnsNetwork(v, lists)
    result = search(RootOutputs(np.zeros(1, np.float32), np.zeros((1, 2), np.float32)), net, config,
                    np.random.default_rng(0), add_noise=False)
    ref = run_gumbel_mcts(config, 0.0, [0.0, 0.0], None, 0, ReorderedReturnsNetwork(v, lists).one, [0.0, 0.0])
    assert [a for p, a, _ in net.trace if p == 0] == [0, 1]
    assert net.trace[6] == (1, 0, 7)   # root action 0 (node 1), then its leaf again
    assert net.trace == ref["trace"]
    assert result.action[0] == ref["action"] == 0   # 4 visits against 3


def _first_round_rounding_ties(config, value, logits, draws, network, monkeypatch):
    """Runs the reference and counts the root selections where two candidates with
    different g + log p have the same score after sigma is added (a tie made by rounding)."""
    from muzero.mcts import reference
    calls = []
    original_sigma, original_score = reference.completed_sigma, reference._root_score

    def sigma(*args, **kw):
        calls.append(None)   # a new selection (root or interior) starts
        return original_sigma(*args, **kw)

    def score(config_, root, root_logp, gumbel, sigma_, a):
        out = original_score(config_, root, root_logp, gumbel, sigma_, a)
        calls.append((float(gumbel[a]) * config_.gumbel_scale + root_logp[a], out))
        return out
    monkeypatch.setattr(reference, "completed_sigma", sigma)
    monkeypatch.setattr(reference, "_root_score", score)
    ref = reference.run_gumbel_mcts(config, value, logits, None, 0, network, draws)
    monkeypatch.undo()
    ties, group = 0, []
    for call in calls + [None]:
        if call is not None:
            group.append(call)
            continue
        best = max((s for _, s in group), default=None)
        ties += len({base for base, s in group if s == best}) > 1
        group = []
    return ref, ties


def test_root_candidates_that_tie_by_rounding_go_to_the_lowest_id(monkeypatch):
    # In the first round the kernel takes the unvisited candidate with the largest g + log p
    # from a sorted order; when sigma(v_mix) is added, g + log p one ulp apart can round to
    # the same score, and the reference's rule (lowest id among equal scores) must still win.
    # Draws one or two ulps apart on three actions per tree, in shuffled ids.
    batch, num_actions = 48, 6
    config = SearchConfig(root_selection="gumbel", num_simulations=10, max_num_considered_actions=num_actions,
                          discount=0.97)
    rng = np.random.default_rng(11)
    net = PathNetwork(31, batch, num_actions, use_masks=False)
    value = rng.normal(size=batch).astype(np.float32)
    logits = np.zeros((batch, num_actions), np.float32)
    draws = rng.normal(size=(batch, num_actions))
    for b in range(batch):
        x = 3.0 + rng.random()
        for a, offset in zip(rng.permutation(num_actions)[:3], rng.permutation(3)):
            draws[b, a] = x + offset * np.spacing(x)
    net.trace = []
    result = search(RootOutputs(value, logits), net, config, rng, noise=draws)
    total_ties = 0
    for b in range(batch):
        ref, ties = _first_round_rounding_ties(config, float(value[b]), logits[b], draws[b], net.one_tree(b),
                                               monkeypatch)
        total_ties += ties
        assert [(int(p[b]), int(a[b]), int(n[b])) for p, a, n in net.trace] == ref["trace"], f"tree {b}"
        assert int(result.action[b]) == ref["action"]
    assert total_ties > 0   # the case this test is for did occur


def test_root_candidates_below_the_logit_floor_tie_at_minus_1e9():
    # log p far below -1e9 (a float32 logit of -3e9 against 0): mctx floors the root score
    # at -1e9, so those candidates tie and go in id order; the kernel then takes the lowest-id candidate.
    num_actions = 5
    config = SearchConfig(root_selection="gumbel", num_simulations=9, max_num_considered_actions=num_actions)
    logits = np.array([[-3e9, 0.0, -3e9, -3e9, 0.0]], np.float32)
    draws = np.array([[-1.0, 0.0, 1.0, 2.0, 0.5]])   # g + log p orders them 3, 2, 0
    net = PathNetwork(5, 1, num_actions, use_masks=False)
    value = np.array([0.3], np.float32)
    net.trace = []
    result = search(RootOutputs(value, logits), net, config, np.random.default_rng(0), noise=draws)
    ref = run_gumbel_mcts(config, 0.3, logits[0], None, 0, net.one_tree(0), draws[0])
    first = [a for p, a, _ in net.trace[:num_actions]]
    assert first == [4, 1, 0, 2, 3]   # 0.5 + 0, then 0 + 0, then the floored ones by id
    assert [(int(p[0]), int(a[0]), int(n[0])) for p, a, n in net.trace] == ref["trace"]
    assert int(result.action[0]) == ref["action"]
