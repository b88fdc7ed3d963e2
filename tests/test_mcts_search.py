"""Hand-worked small searches, argument checks, action choice and noise of ``muzero.mcts``.

The expected selections and values below are worked out in the comments from the pUCT
formula of docs/SEARCH.md (the MuZero pseudocode), not taken from the code:

    c(N)  = log((N + 19652 + 1) / 19652) + 1.25
    score = c(N) * sqrt(N + offset) / (n + 1) * prior + norm(Q)   (norm(Q) = 0 if n == 0)
    norm(Q) = (Q - min) / (max - min) over every Q seen in the tree (root: 0 + discount * V)
"""
import numpy as np
import pytest

from muzero.config import ConfigError
from muzero.mcts.config import SearchConfig
from muzero.mcts import RootOutputs, allocate_tree, dirichlet_noise, search, select_action


class TableNetwork:
    """recurrent_fn for one tree from a table {action path: (reward, value)}; logits 0."""

    def __init__(self, table, num_actions):
        self.table, self.num_actions = table, num_actions
        self.paths = {0: ()}
        self.trace = []

    def __call__(self, parent, action, new):
        path = self.paths[int(parent[0])] + (int(action[0]),)
        self.paths[int(new[0])] = path
        self.trace.append((int(parent[0]), int(action[0]), int(new[0])))
        reward, value = self.table.get(path, (0.0, 0.0))
        return (np.array([reward], np.float32), np.array([value], np.float32),
                np.zeros((1, self.num_actions), np.float32))


def test_one_player_tree_by_hand():
    # Two actions, priors 0.5 / 0.5 everywhere (all logits 0), discount 0.5, offset 0.
    # c(1)*sqrt(1) = 1.25010, c(2)*sqrt(2) = 1.76798, c(3)*sqrt(3) = 2.16542, c(4)*2 = 2.50051.
    # sim 0: root N=0, every score is 0 -> tie -> action 0 creates node 1 = path (0,)
    #        (r=-1, v=0): Q1 = -1 + 0.5*0 = -1, g = -1; root V = -1, root Q = 0.5*-1 = -0.5.
    #        min/max = [-1, -0.5].
    # sim 1: root N=1: a0 = 1.25010/2*0.5 + norm(-1)=0 = 0.31253; a1 = 1.25010*0.5 = 0.62505
    #        -> action 1 creates node 2 = (1,) (r=0, v=1): Q2 = 0.5, g = 0.5;
    #        root sum = -0.5, N=2, root Q = 0.5*-0.25 = -0.125. min/max = [-1, 0.5].
    # sim 2: root N=2: a0 = 1.76798/2*0.5 + 0 = 0.44200; a1 = 0.44200 + norm(0.5)=1 = 1.44200
    #        -> node 2 (N=1, both children unvisited, tie) -> action 0 creates node 3 =
    #        (1, 0) (r=0, v=2): Q3 = 1, g = 1; node 2 sum = 2, N=2, Q2 = 0.5*1 = 0.5,
    #        g = 0.5; root sum = 0, N=3. min/max = [-1, 1].
    # sim 3: root N=3: a0 = 2.16542/2*0.5 + norm(-1)=0 = 0.54135;
    #        a1 = 2.16542/3*0.5 + norm(0.5)=0.75 = 1.11090 -> node 2 (N=2):
    #        a0 = 1.76798/2*0.5 + norm(1)=1 = 1.44200; a1 = 1.76798*0.5 = 0.88399 -> node 3
    #        (N=1, tie) -> action 0 creates node 4 = (1, 0, 0) (r=0, v=-4): Q4 = -2, g = -2;
    #        node 3 sum 0, N=2, Q3 = 0, g = -1; node 2 sum 1, N=3, Q2 = 1/6, g = -0.5;
    #        root sum -0.5, N=4. min/max = [-2, 1].
    # sim 4: root N=4: a0 = 2.50051/2*0.5 + (-1+2)/3 = 0.95846;
    #        a1 = 2.50051/4*0.5 + (1/6+2)/3 = 1.03479 -> node 2 (N=3):
    #        a0 = 2.16542/3*0.5 + (0+2)/3 = 1.02757; a1 = 2.16542*0.5 = 1.08271 -> action 1
    #        creates node 5 = (1, 1) (r=0, v=0): Q5 = 0, g = 0; node 2 sum 1, N=4,
    #        Q2 = 0.5*1/4 = 0.125, g = 0; root sum -0.5, N=5 -> root value -0.1.
    table = {(0,): (-1.0, 0.0), (1,): (0.0, 1.0), (1, 0): (0.0, 2.0), (1, 0, 0): (0.0, -4.0)}
    net = TableNetwork(table, 2)
    config = SearchConfig(num_simulations=5, discount=0.5, parent_visit_offset=0)
    result = search(RootOutputs(np.zeros(1, np.float32), np.zeros((1, 2), np.float32)), net,
                    config, np.random.default_rng(0), add_noise=False)
    assert net.trace == [(0, 0, 1), (0, 1, 2), (2, 0, 3), (3, 0, 4), (2, 1, 5)]
    np.testing.assert_array_equal(result.visit_counts, [[1, 4]])
    np.testing.assert_allclose(result.policy_target, [[0.2, 0.8]])
    np.testing.assert_allclose(result.root_value, [-0.1], atol=1e-6)
    np.testing.assert_allclose(result.root_q, [[-1.0, 0.125]], atol=1e-6)
    tree = result.tree
    np.testing.assert_array_equal(tree.node_parent[0], [-1, 0, 0, 2, 3, 2])
    np.testing.assert_array_equal(tree.node_depth[0], [0, 1, 1, 2, 3, 2])
    np.testing.assert_array_equal(tree.node_visits[0], [5, 1, 4, 2, 1, 1])
    np.testing.assert_allclose(tree.min_max[0], [-2.0, 1.0])


def test_two_player_sign_flip_by_hand():
    # Two players, discount 1, known bounds (-1, 1), SEED's offset 1, priors 0.5 / 0.5.
    # Values are from the view of the player to move at the node; rewards from the view
    # of the player who acted. c(N)*sqrt(N+1): N=0 1.25005, N=1 1.76791, N=2 2.16533.
    # sim 0: root (player 0) N=0: both 1.25005*0.5 -> tie -> action 0 creates node 1
    #        (player 1 to move, v=+1 for player 1): Q1 for player 0 = 0 - 1 = -1, g = -1;
    #        root sum -1, N=1. min/max stays [-1, 1] (known bounds).
    # sim 1: root N=1: a0 = 1.76791/2*0.5 + norm(-1)=0 = 0.44198; a1 = 1.76791*0.5 = 0.88396
    #        -> action 1 creates node 2 (v=-1 for player 1): Q2 = 0 - (-1) = +1, g = +1;
    #        root sum 0, N=2. (Without the flip Q2 would be -1 and Q1 +1.)
    # sim 2: root N=2: a0 = 2.16533/2*0.5 + 0 = 0.54133; a1 = 0.54133 + norm(1)=1 = 1.54133
    #        -> node 2 (player 1, N=1, tie) -> action 0 creates node 3 (player 0 to move;
    #        reward 0.2 for player 1 who acted, v=0.5 for player 0):
    #        Q3 for player 1 = 0.2 - 0.5 = -0.3, g = -0.3 (player 1's view);
    #        node 2 sum = -1 - 0.3 = -1.3, N=2, Q2 = 0 - (-1.3/2) = 0.65, g = 0 - (-0.3) = 0.3;
    #        root sum 0.3, N=3 -> root value 0.1.
    table = {(0,): (0.0, 1.0), (1,): (0.0, -1.0), (1, 0): (0.2, 0.5)}
    net = TableNetwork(table, 2)
    config = SearchConfig(num_simulations=3, discount=1.0, parent_visit_offset=1,
                          known_bounds=(-1.0, 1.0), two_player=True)
    result = search(RootOutputs(np.zeros(1, np.float32), np.zeros((1, 2), np.float32)), net,
                    config, np.random.default_rng(0), add_noise=False)
    assert net.trace == [(0, 0, 1), (0, 1, 2), (2, 0, 3)]
    np.testing.assert_array_equal(result.visit_counts, [[1, 2]])
    np.testing.assert_allclose(result.root_value, [0.1], atol=1e-6)
    np.testing.assert_allclose(result.root_q, [[-1.0, 0.65]], atol=1e-6)
    np.testing.assert_array_equal(result.tree.node_to_play[0], [0, 1, 1, 0])


def test_root_mask_and_noise_stay_on_legal_actions():
    # Action 0 is illegal and has by far the largest logit; it must never be visited,
    # and its prior (after noise) must stay 0.
    logits = np.array([[10.0, 0.0, 0.0]], np.float32)
    mask = np.array([[False, True, True]])
    net = TableNetwork({}, 3)
    result = search(RootOutputs(np.zeros(1, np.float32), logits, mask), net,
                    SearchConfig(num_simulations=8), np.random.default_rng(1))
    assert result.visit_counts[0, 0] == 0 and result.visit_counts.sum() == 8
    assert result.root_prior[0, 0] == 0.0
    np.testing.assert_allclose(result.root_prior.sum(), 1.0, rtol=1e-6)


def test_depth_cut_off_re_evaluates_the_leaf():
    # max_depth=1: nodes at depth 1 are never expanded further; with one legal action
    # every simulation after the first re-creates the depth-1 node, which keeps its
    # statistics: simulation s creates node s+1 under (root, action 0).
    net = TableNetwork({(0,): (0.0, 1.0)}, 1)
    result = search(RootOutputs(np.zeros(1, np.float32), np.zeros((1, 1), np.float32)), net,
                    SearchConfig(num_simulations=4, max_depth=1, discount=1.0),
                    np.random.default_rng(0), add_noise=False)
    assert net.trace == [(0, 0, 1), (0, 0, 2), (0, 0, 3), (0, 0, 4)]
    np.testing.assert_array_equal(result.visit_counts, [[4]])
    np.testing.assert_allclose(result.root_value, [1.0])


def test_root_action_fn_replaces_root_selection():
    net = TableNetwork({}, 3)
    calls = []

    def always_two(tree, simulation):
        calls.append(simulation)
        return np.array([2], np.int32)
    result = search(RootOutputs(np.zeros(1, np.float32), np.zeros((1, 3), np.float32)), net,
                    SearchConfig(num_simulations=4), np.random.default_rng(0),
                    root_action_fn=always_two)
    assert calls == [0, 1, 2, 3]
    np.testing.assert_array_equal(result.visit_counts, [[0, 0, 4]])


def test_workspace_is_reused():
    ws = allocate_tree(2, 4, 3)
    root = RootOutputs(np.zeros(2, np.float32), np.zeros((2, 3), np.float32))
    fn = lambda p, a, n: (np.zeros(2), np.ones(2), np.zeros((2, 3)))   # noqa: E731
    result = search(root, fn, SearchConfig(num_simulations=3), np.random.default_rng(0),
                    workspace=ws)
    assert result.tree is ws and result.visit_counts.sum() == 6
    with pytest.raises(ValueError, match="workspace"):
        search(root, fn, SearchConfig(num_simulations=5), np.random.default_rng(0), workspace=ws)


def _root(batch=2, num_actions=3):
    return RootOutputs(np.zeros(batch, np.float32), np.zeros((batch, num_actions), np.float32))


def _fake(batch=2, num_actions=3):
    return lambda p, a, n: (np.zeros(batch), np.zeros(batch), np.zeros((batch, num_actions)))


@pytest.mark.parametrize("make_call, match", [
    (lambda: SearchConfig(num_simulations=0), "num_simulations=0"),
    (lambda: search(RootOutputs(np.zeros(3), np.zeros((2, 3))), _fake(), SearchConfig(),
                    np.random.default_rng()), r"root value has shape \(3,\); expected \(2,\)"),
    (lambda: search(RootOutputs(np.zeros(2), np.zeros(3)), _fake(), SearchConfig(),
                    np.random.default_rng()), r"policy_logits has shape \(3,\)"),
    (lambda: search(RootOutputs(np.zeros(2), np.zeros((2, 3)), np.array([[True] * 3, [False] * 3])),
                    _fake(), SearchConfig(), np.random.default_rng()), r"no action in trees \[1\]"),
    (lambda: search(RootOutputs(np.zeros(2), np.zeros((2, 3)), np.ones((2, 4), bool)), _fake(),
                    SearchConfig(), np.random.default_rng()), r"legal_mask has shape \(2, 4\)"),
    (lambda: search(RootOutputs(np.zeros(2), np.zeros((2, 3)), to_play=np.array([0, 2])), _fake(),
                    SearchConfig(), np.random.default_rng()), "to_play must be 0 or 1"),
    (lambda: search(_root(), _fake(2, 4), SearchConfig(num_simulations=2), np.random.default_rng()),
     r"recurrent_fn policy_logits has shape \(2, 4\); expected \(2, 3\)"),
    (lambda: search(_root(), lambda p, a, n: (np.zeros(2), np.full(2, np.nan), np.zeros((2, 3))),
                    SearchConfig(num_simulations=2), np.random.default_rng()), "not finite"),
    (lambda: search(_root(), _fake(), SearchConfig(), np.random.default_rng(),
                    noise=np.ones((2, 4))), r"noise has shape \(2, 4\)"),
    (lambda: search(_root(), lambda p, a, n: (np.zeros(2), np.zeros(2)), SearchConfig(),
                    np.random.default_rng()), "returned 2 items"),
    (lambda: select_action(np.array([[1, 2]]), -1.0, np.random.default_rng()), "temperature=-1.0"),
    (lambda: select_action(np.array([[0, 0]]), 1.0, np.random.default_rng()), "no visits"),
])
def test_invalid_arguments_name_the_problem(make_call, match):
    with pytest.raises((ValueError, ConfigError), match=match):
        make_call()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("num_actions, column", [(3, 2), (9, 5), (9, 8)])
def test_non_finite_interior_logits_are_reported(bad, num_actions, column):
    # One tree of three gets a non-finite logit in one column (one of the four-wide
    # lanes, or the remainder past them); the search names the simulation and the count.
    def fn(p, a, n):
        logits = np.zeros((3, num_actions), np.float32)
        logits[1, column] = bad
        return np.zeros(3, np.float32), np.zeros(3, np.float32), logits
    root = RootOutputs(np.zeros(3, np.float32), np.zeros((3, num_actions), np.float32))
    with pytest.raises(ValueError, match=r"simulation 0 are not finite .* in 1 tree"):
        search(root, fn, SearchConfig(num_simulations=2), np.random.default_rng(0))


def test_select_action_argmax_breaks_ties_to_lowest_id():
    counts = np.array([[3, 5, 5, 0], [7, 7, 7, 7], [0, 0, 1, 0]])
    np.testing.assert_array_equal(select_action(counts, 0.0, None), [1, 0, 2])


@pytest.mark.parametrize("temperature, expected", [
    (1.0, [0.1, 0.3, 0.0, 0.6]),               # counts / 10
    (0.5, [1 / 46, 9 / 46, 0.0, 36 / 46]),     # counts^2 / (1 + 9 + 36)
])
def test_select_action_samples_counts_to_the_power_one_over_t(temperature, expected):
    draws = 40_000
    counts = np.tile([1, 3, 0, 6], (draws, 1))
    actions = select_action(counts, temperature, np.random.default_rng(3))
    freq = np.bincount(actions, minlength=4) / draws
    # 4 standard deviations of a binomial proportion at n = 40000 is at most 0.01.
    np.testing.assert_allclose(freq, expected, atol=0.01)
    assert freq[2] == 0.0


def test_dirichlet_noise_is_a_distribution_over_legal_actions():
    legal = np.tile([True, False, True, True], (20_000, 1))
    noise = dirichlet_noise(np.random.default_rng(4), legal, alpha=0.3)
    np.testing.assert_allclose(noise.sum(axis=1), 1.0)
    assert np.all(noise[:, 1] == 0.0)
    # Dirichlet(0.3, 0.3, 0.3): each mean is 1/3, variance (1/3)(2/3)/(0.9 + 1) = 0.117.
    np.testing.assert_allclose(noise[:, [0, 2, 3]].mean(axis=0), 1 / 3, atol=0.01)
    np.testing.assert_allclose(noise[:, 0].var(), (1 / 3) * (2 / 3) / 1.9, rtol=0.05)


def test_search_draws_noise_from_rng_reproducibly():
    root = RootOutputs(np.zeros(4, np.float32), np.zeros((4, 5), np.float32))
    fn = lambda p, a, n: (np.zeros(4), np.zeros(4), np.zeros((4, 5)))   # noqa: E731
    config = SearchConfig(num_simulations=4)
    first = search(root, fn, config, np.random.default_rng(9)).root_prior
    second = search(root, fn, config, np.random.default_rng(9)).root_prior
    off = search(root, fn, config, np.random.default_rng(9), add_noise=False).root_prior
    np.testing.assert_array_equal(first, second)
    assert not np.allclose(first, 0.2)
    np.testing.assert_allclose(off, 0.2)


def test_polynomial_exp_matches_math_exp():
    from numba import njit

    from muzero.mcts.kernels import exp_nonpositive

    @njit(cache=True)
    def apply(x, out):
        for i in range(x.size):
            out[i] = exp_nonpositive(x[i])
    x = np.concatenate([-np.random.default_rng(0).random(20_000) * 60.0,
                        -np.random.default_rng(1).random(2_000) * 700.0,
                        [0.0, -1e-300, -0.5 * np.log(2.0), -700.0]])
    out = np.empty_like(x)
    apply(x, out)
    expected = np.exp(x)
    np.testing.assert_allclose(out, expected, rtol=4e-16, atol=0.0)
    # Outside [-700, 0] inputs are clamped (NaN to -700) so the table index stays valid.
    edge = np.array([1.0, -800.0, np.nan])
    apply(edge, out[:3])
    np.testing.assert_allclose(out[:3], [1.0, np.exp(-700.0), np.exp(-700.0)])


def test_mcts_imports_no_tensorflow():
    import subprocess
    import sys
    code = ("import sys, muzero.mcts, muzero.mcts.reference; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(__import__("pathlib").Path(
        __file__).resolve().parents[1]))


def test_dirichlet_noise_depends_on_the_tree_seed_only():
    # Tree b's noise is drawn from its own stream: the same seed and legal row give the
    # same draws whatever the other rows of the batch are.
    legal = np.ones((6, 9), bool)
    legal[2, [0, 4]] = False
    seeds = np.array([11, 12, 13, 14, 15, 16], np.int64)
    full = dirichlet_noise(None, legal, 0.3, seeds=seeds)
    part = dirichlet_noise(None, legal[[4, 2]], 0.3, seeds=seeds[[4, 2]])
    np.testing.assert_array_equal(part, full[[4, 2]])
    assert np.all(full[2, [0, 4]] == 0.0)
    assert not np.allclose(full[0], full[1])   # different seeds, different noise
    drawn = dirichlet_noise(np.random.default_rng(5), legal, 0.3)
    again = dirichlet_noise(np.random.default_rng(5), legal, 0.3)
    np.testing.assert_array_equal(drawn, again)


def test_dirichlet_noise_moments_without_the_small_alpha_boost():
    # alpha >= 1 skips the U^(1/alpha) boost. Dirichlet(2, 2, 2): mean 1/3, variance
    # (1/3)(2/3)/(6 + 1) = 0.0317.
    legal = np.ones((20_000, 3), bool)
    noise = dirichlet_noise(np.random.default_rng(6), legal, alpha=2.0)
    np.testing.assert_allclose(noise.mean(axis=0), 1 / 3, atol=0.01)
    np.testing.assert_allclose(noise[:, 0].var(), (1 / 3) * (2 / 3) / 7, rtol=0.05)


def test_root_hook_sees_up_to_date_root_statistics():
    # The hook forces action 2 every time; before simulation s, root action 2 has been
    # visited s times and the root s times (value 0 everywhere, so Q = 0).
    net = TableNetwork({}, 3)
    seen = []

    def always_two(tree, simulation):
        if simulation > 0:
            seen.append((int(tree.node_visits[0, 0]), int(tree.children_visits[0, 0, 2]),
                         float(tree.children_q[0, 0, 2])))
        return np.array([2], np.int32)
    search(RootOutputs(np.zeros(1, np.float32), np.zeros((1, 3), np.float32)), net,
           SearchConfig(num_simulations=4), np.random.default_rng(0), add_noise=False,
           root_action_fn=always_two)
    assert seen == [(1, 1, 0.0), (2, 2, 0.0), (3, 3, 0.0)]


def test_tree_edge_statistics_agree_with_the_nodes_after_search():
    # Definitions (docs/SEARCH.md): an existing edge (s, a) -> c has visits N(c),
    # Q = r(c) + discount * sign * V(c) and explore = P / (1 + N(c)); an edge without a
    # child has explore = P, an illegal one -inf; the root was visited S times.
    batch, num_actions, sims, discount = 3, 5, 30, 0.9
    rng = np.random.default_rng(8)
    outputs = (rng.normal(size=(sims, batch)), rng.normal(size=(sims, batch)),
               rng.normal(size=(sims, batch, num_actions)))
    mask = np.ones((batch, num_actions), bool)
    mask[1, 3] = False

    def fn(parent, action, new):
        row = new[0] - 1
        return outputs[0][row], outputs[1][row], outputs[2][row]
    result = search(RootOutputs(np.zeros(batch), rng.normal(size=(batch, num_actions)), mask),
                    fn, SearchConfig(num_simulations=sims, discount=discount, two_player=True), rng)
    t = result.tree
    np.testing.assert_array_equal(t.node_visits[:, 0], sims)
    for b in range(batch):
        for node in range(sims + 1):
            for a in range(num_actions):
                child, prior = t.children_index[b, node, a], t.children_prior[b, node, a]
                if child >= 0:
                    assert t.children_visits[b, node, a] == t.node_visits[b, child]
                    q = t.node_reward[b, child] - discount * (
                        t.node_value_sum[b, child] / t.node_visits[b, child])
                    np.testing.assert_allclose(t.children_q[b, node, a], q, rtol=1e-12)
                    np.testing.assert_allclose(t.children_explore[b, node, a],
                                               prior / (1 + t.node_visits[b, child]), rtol=1e-12)
                    assert t.node_depth[b, child] == t.node_depth[b, node] + 1
                    assert t.node_to_play[b, child] == 1 - t.node_to_play[b, node]
                elif child == -1:
                    assert t.children_explore[b, node, a] == prior
                else:
                    assert t.children_explore[b, node, a] == -np.inf


def test_value_sums_are_the_exact_sum_whatever_the_order():
    # docs/SEARCH.md, Ties: a node's value sum is a running sum plus the TwoSum errors of
    # its additions, which is the exact sum of its returns rounded once (math.fsum) when
    # n^2 * max|g| < 2^53 * min|g|: here magnitudes from 1e-4 to 2e3, at most 60 returns.
    import math
    from muzero.mcts import kernels
    rng = np.random.default_rng(3)
    records, _ = kernels.allocate_records(1, 1, 2)
    naive_differs = 0
    for _ in range(150):
        n = int(rng.integers(2, 61))
        returns = rng.choice([-1.0, 1.0], n) * rng.uniform(0.5, 1.0, n) * 10.0 ** rng.integers(-4, 4, n)
        exact = math.fsum(returns)
        sums = set()
        for order in (returns, rng.permutation(returns), returns[::-1]):
            records[0, 0, kernels._VALUE_SUM] = records[0, 0, kernels._VALUE_ERROR] = 0.0
            for g in order:
                total = kernels._add_return(records, 0, 0, float(g))
            assert total == exact
            naive = 0.0
            for g in order:
                naive += float(g)
            sums.add(naive)
        naive_differs += len(sums) > 1
    assert naive_differs > 50   # the orders matter to a running sum


@pytest.mark.parametrize("root_selection", ["puct", "gumbel"])
def test_warmup_compiles_the_signatures_an_actors_search_uses(root_selection):
    """An actor's network outputs arrive as read-only views of the gRPC message, which Numba
    types apart from writable arrays: the warm-up must compile those signatures too, or every
    actor of a fresh clone compiles the search again."""
    from muzero.mcts import gumbel_kernels, kernels
    from muzero.rpc import wire
    from muzero.warmup import compile_group

    compile_group(f"{root_selection}_serial")
    step = gumbel_kernels.gumbel_step_serial if root_selection == "gumbel" else kernels.step_serial
    warmed = {fn: set(fn.signatures) for fn in (kernels.init_roots, step)}
    rng = np.random.default_rng(3)
    root = wire.decode(wire.encode({"value": rng.random(5, dtype=np.float32),
                                    "logits": rng.random((5, 4), dtype=np.float32)}))
    assert not root["value"].flags.writeable and not root["logits"].flags.writeable

    def recurrent_fn(parent, action, node):
        out = wire.decode(wire.encode({"reward": rng.random(5, dtype=np.float32),
                                       "value": rng.random(5, dtype=np.float32),
                                       "logits": rng.random((5, 4), dtype=np.float32)}))
        return out["reward"], out["value"], out["logits"]
    config = SearchConfig(num_simulations=6, root_selection=root_selection)
    search(RootOutputs(value=root["value"], policy_logits=root["logits"]), recurrent_fn, config, rng)
    for fn, signatures in warmed.items():
        assert set(fn.signatures) == signatures, f"{fn.__name__} compiled a signature the warm-up did not"


def test_warmup_refuses_unknown_groups_and_bad_jobs(capsys):
    from muzero.warmup import compile_group, main
    with pytest.raises(ValueError, match="unknown kernel group 'nope'; known: puct_serial"):
        compile_group("nope")
    with pytest.raises(SystemExit):
        main(["--jobs=0"])
    assert "--jobs=0 must be >= 1" in capsys.readouterr().err
