"""The Numba search against the plain-Python pseudocode reference on seeded random cases.

Both searches see the same deterministic fake network: its outputs at a node depend only
on (case seed, tree, action path from the root), so two searches that take the same
decisions see the same numbers. The test demands the same (parent, new node, action) at
every simulation, the same root visit counts and argmax action, and root values and Q
values equal to 1e-6.
"""
import itertools
import math

import numpy as np
import pytest

from muzero.mcts.config import SearchConfig
from muzero.mcts import RootOutputs, search, select_action
from muzero.mcts.reference import run_mcts


class PathNetwork:
    """Fake network whose outputs are a pure function of (seed, tree, action path)."""

    def __init__(self, seed, batch, num_actions, use_masks):
        self.seed, self.batch, self.num_actions, self.use_masks = seed, batch, num_actions, use_masks
        self.paths = [{0: ()} for _ in range(batch)]

    def outputs(self, b, path):
        rng = np.random.default_rng([self.seed, b, len(path), *path])
        reward = np.float32(rng.normal())
        value = np.float32(rng.normal())
        logits = (1.5 * rng.normal(size=self.num_actions)).astype(np.float32)
        mask = None
        if self.use_masks:
            mask = rng.random(self.num_actions) < 0.6
            if rng.random() < 0.15:   # past the end of the game: nothing legal
                mask[:] = False
        return reward, value, logits, mask

    def root(self, rng):
        value = rng.normal(size=self.batch).astype(np.float32)
        logits = (1.5 * rng.normal(size=(self.batch, self.num_actions))).astype(np.float32)
        mask = None
        if self.use_masks:
            mask = rng.random((self.batch, self.num_actions)) < 0.6
            mask[np.arange(self.batch), rng.integers(0, self.num_actions, self.batch)] = True
        return value, logits, mask

    def one_tree(self, b):
        """network(parent_id, action, new_id) for the reference search of tree b."""
        paths = {0: ()}

        def network(parent, action, new):
            paths[new] = paths[parent] + (action,)
            return self.outputs(b, paths[new])
        return network

    def __call__(self, parent, action, new):
        """Batched recurrent_fn for the kernel search; records the trace."""
        self.trace.append((parent.copy(), action.copy(), new.copy()))
        rewards, values, logits, masks = [], [], [], []
        for b in range(self.batch):
            path = self.paths[b][int(parent[b])] + (int(action[b]),)
            self.paths[b][int(new[b])] = path
            r, v, l, m = self.outputs(b, path)
            rewards.append(r)
            values.append(v)
            logits.append(l)
            masks.append(np.ones(self.num_actions, bool) if m is None else m)
        out = (np.array(rewards), np.array(values), np.stack(logits))
        return out + (np.stack(masks),) if self.use_masks else out


CASES = list(itertools.product([1, 7], [2, 9, 18], [1, 10, 50], [False, True], [False, True]))


def _config_for(index, num_simulations, two_player):
    """Spreads the other settings over the cases so that each combination is exercised."""
    return SearchConfig(
        num_simulations=num_simulations,
        parent_visit_offset=index % 2,
        discount=(0.997, 1.0, 0.9)[index % 3],
        known_bounds=(-3.0, 3.0) if index % 4 == 1 else None,
        max_depth=3 if index % 5 == 2 else 0,
        pb_c_init=(1.25, 0.5)[index % 2],
        pb_c_base=(19652.0, 50.0)[(index // 2) % 2],
        two_player=two_player,
        root_exploration_fraction=0.25,
    )


@pytest.mark.parametrize("index", range(len(CASES)),
                         ids=[f"B{b}-A{a}-S{s}-{'2p' if p else '1p'}-{'mask' if m else 'nomask'}"
                              for b, a, s, p, m in CASES])
def test_kernel_matches_reference(index):
    batch, num_actions, num_simulations, two_player, use_masks = CASES[index]
    config = _config_for(index, num_simulations, two_player)
    rng = np.random.default_rng(1000 + index)
    net = PathNetwork(index, batch, num_actions, use_masks)
    value, logits, mask = net.root(rng)
    to_play = rng.integers(0, 2, batch) if two_player else None
    with_noise = index % 3 != 2
    noise = rng.dirichlet(np.full(num_actions, 0.3), size=batch) if with_noise else None

    net.trace = []
    result = search(RootOutputs(value, logits, mask, to_play), net, config, rng,
                    noise=noise, add_noise=with_noise)

    for b in range(batch):
        ref = run_mcts(config, float(value[b]), logits[b], None if mask is None else mask[b],
                       0 if to_play is None else int(to_play[b]), net.one_tree(b),
                       None if noise is None else noise[b])
        kernel_trace = [(int(p[b]), int(a[b]), int(n[b])) for p, a, n in net.trace]
        assert kernel_trace == ref["trace"], f"tree {b}: selection differs"
        np.testing.assert_array_equal(result.visit_counts[b], ref["visit_counts"])
        np.testing.assert_allclose(result.root_value[b], ref["root_value"], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(result.root_q[b], ref["root_q"], rtol=1e-6, atol=1e-6)
        # argmax with ties to the lowest id, computed from the reference's counts
        counts = ref["visit_counts"]
        assert select_action(result.visit_counts[b:b + 1], 0.0, rng)[0] == counts.index(max(counts))
    assert [n[0] for _, _, n in net.trace] == list(range(1, num_simulations + 1))


def test_parallel_kernel_matches_serial():
    batch, num_actions = 37, 9
    config = SearchConfig(num_simulations=20, two_player=True)
    rng = np.random.default_rng(5)
    results = []
    for parallel in (False, True):
        net = PathNetwork(77, batch, num_actions, use_masks=True)
        net.trace = []
        value, logits, mask = net.root(np.random.default_rng(6))
        results.append(search(RootOutputs(value, logits, mask), net, config, rng,
                              noise=np.full((batch, num_actions), 1.0 / num_actions),
                              parallel=parallel))
    np.testing.assert_array_equal(results[0].visit_counts, results[1].visit_counts)
    np.testing.assert_array_equal(results[0].root_value, results[1].root_value)


class TiedNetwork(PathNetwork):
    """PathNetwork whose logits take only the values 0 and 1: many equal priors, so the
    lowest-id tie rule decides among unvisited (and equally scored visited) children."""

    def outputs(self, b, path):
        reward, value, logits, mask = super().outputs(b, path)
        return reward, value, (logits > 0).astype(np.float32), mask

    def root(self, rng):
        value, logits, mask = super().root(rng)
        return value, (logits > 0).astype(np.float32), mask


@pytest.mark.parametrize("use_masks", [False, True])
def test_ties_between_equal_priors_match_reference(use_masks):
    batch, num_actions = 5, 9
    config = SearchConfig(num_simulations=40, two_player=use_masks)
    rng = np.random.default_rng(31)
    net = TiedNetwork(31, batch, num_actions, use_masks)
    value, logits, mask = net.root(rng)
    net.trace = []
    result = search(RootOutputs(value, logits, mask), net, config, rng, add_noise=False)
    for b in range(batch):
        ref = run_mcts(config, float(value[b]), logits[b], None if mask is None else mask[b], 0,
                       net.one_tree(b), None)
        assert [(int(p[b]), int(a[b]), int(n[b])) for p, a, n in net.trace] == ref["trace"]
        np.testing.assert_array_equal(result.visit_counts[b], ref["visit_counts"])


class ReorderedReturnsNetwork:
    """Two root actions with equal priors and one legal action below each; with
    max_depth=2 that grandchild is evaluated again on every visit, with the next value of
    ``grandchild_values[root action]``. Root child a is therefore backed up its own value
    v, then 0.997 w, 0.997 w' in the order of its list: the same returns for both root
    children when the lists are permutations of each other, added in another order."""

    def __init__(self, child_value, grandchild_values):
        self.child_value, self.grandchild_values = np.float32(child_value), grandchild_values
        self.paths, self.used, self.trace = {0: ()}, [0, 0], []

    def one(self, parent, action, new):
        path = self.paths[parent] + (action,)
        self.paths[new] = path
        self.trace.append((parent, action, new))
        value = self.child_value
        if len(path) > 1:
            value = np.float32(self.grandchild_values[path[0]][self.used[path[0]]])
            self.used[path[0]] += 1
        return np.float32(0.0), value, np.zeros(2, np.float32), np.array([True, False])

    def __call__(self, parent, action, new):   # recurrent_fn of a batch of one tree
        reward, value, logits, mask = self.one(int(parent[0]), int(action[0]), int(new[0]))
        return np.array([reward]), np.array([value]), logits[None], mask[None]


def test_equal_returns_added_in_another_order_tie_to_the_lowest_id():
    # Root child 0 gets the returns v, d*w1, d*w2 (simulations 0, 2, 5) and child 1 the same
    # three in the order v, d*w2, d*w1 (simulations 1, 3, 4). Added naively, the second sum
    # is one unit in the last place larger, so simulation 6, which finds both children with
    # equal priors, 3 visits each and mathematically equal Q, took child 1; the sums are
    # exact now (docs/SEARCH.md, "Ties") and the tie goes to the lowest id, action 0.
    v, w1, w2, d = -0.5, -0.8, -0.7, 0.997
    g1, g2 = d * float(np.float32(w1)), d * float(np.float32(w2))
    assert (v + g1) + g2 != (v + g2) + g1          # the naive sums differ ...
    assert math.fsum([v, g1, g2]) == math.fsum([v, g2, g1])   # ... the exact ones cannot
    lists = [[w1, w2, 0.0], [w2, w1, 0.0]]
    config = SearchConfig(num_simulations=7, discount=d, max_depth=2)
    root = RootOutputs(np.zeros(1, np.float32), np.zeros((1, 2), np.float32))
    net = ReorderedReturnsNetwork(v, lists)
    search(root, net, config, np.random.default_rng(0), add_noise=False)
    ref = run_mcts(config, 0.0, [0.0, 0.0], None, 0, ReorderedReturnsNetwork(v, lists).one, None)
    assert net.trace[:6] == [(0, 0, 1), (0, 1, 2), (1, 0, 3), (2, 0, 4), (2, 0, 5), (1, 0, 6)]
    assert net.trace[6] == (1, 0, 7)               # root action 0 (node 1), then its leaf again
    assert net.trace == ref["trace"]
    # After the six simulations both Q values are the exact mean, bit for bit, in the kernels
    # (tree edges) and in the reference.
    config6 = SearchConfig(num_simulations=6, discount=d, max_depth=2)
    result = search(root, ReorderedReturnsNetwork(v, lists), config6, np.random.default_rng(0),
                    add_noise=False)
    ref6 = run_mcts(config6, 0.0, [0.0, 0.0], None, 0, ReorderedReturnsNetwork(v, lists).one, None)
    exact = d * (math.fsum([v, g1, g2]) / 3)
    assert result.tree.children_q[0, 0, :2].tolist() == [exact, exact]
    assert [ref6["root"].children[a].value() * d for a in (0, 1)] == [exact, exact]
    assert result.tree.node_value_sum[0, 1] == result.tree.node_value_sum[0, 2] == math.fsum([v, g1, g2])
