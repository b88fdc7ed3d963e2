"""Golden trees: seeded searches whose full outputs are stored in tests/data/golden_trees.json.

Eight cases (pUCT and Gumbel roots, one and two players, with and without legal masks)
run on the deterministic path network of the parity tests. The stored outputs — the
(parent, action, new node) of every simulation, visit counts, root values and Q, the
policy target (visit distribution or improved policy) and the chosen action — were
produced by the search when it matched the plain-Python reference, and any change of
behaviour shows up here as a diff against that file.

To regenerate after an intended change (say why in the commit):
    MUZERO_WRITE_GOLDEN=1 python -m pytest -q tests/test_golden_trees.py
"""
import itertools
import json
import os

import numpy as np
import pytest

from muzero.mcts.config import SearchConfig
from muzero.mcts import RootOutputs, search, select_action
from muzero.mcts.reference import run_gumbel_mcts, run_mcts
from tests.test_mcts_parity import PathNetwork

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "golden_trees.json")
CASES = [dict(root=root, two_player=two_player, masks=masks)
         for root, two_player, masks in itertools.product(["puct", "gumbel"], [False, True], [False, True])]


def _name(case: dict) -> str:
    return f"{case['root']}-{'2p' if case['two_player'] else '1p'}-{'mask' if case['masks'] else 'nomask'}"


def run_case(index: int, case: dict) -> dict:
    batch, num_actions, sims = 3, 7, 25
    config = SearchConfig(num_simulations=sims, root_selection=case["root"], two_player=case["two_player"],
                          discount=0.97, max_num_considered_actions=4)
    rng = np.random.default_rng(4200 + index)
    net = PathNetwork(4200 + index, batch, num_actions, case["masks"])
    value, logits, mask = net.root(rng)
    to_play = rng.integers(0, 2, batch) if case["two_player"] else None
    noise = (rng.gumbel(size=(batch, num_actions)) if case["root"] == "gumbel"
             else rng.dirichlet(np.full(num_actions, 0.3), size=batch))
    net.trace = []
    result = search(RootOutputs(value, logits, mask, to_play), net, config, rng, noise=noise)
    action = result.action if result.action is not None else select_action(result.visit_counts, 0.0, rng)
    return {"trace": [[[int(p[b]), int(a[b]), int(n[b])] for p, a, n in net.trace] for b in range(batch)],
            "visit_counts": result.visit_counts.tolist(),
            "root_value": [float(v) for v in result.root_value],
            "root_q": [[float(q) for q in row] for row in result.root_q],
            "policy_target": [[float(p) for p in row] for row in result.policy_target],
            "action": [int(a) for a in action]}


def _check_against_reference(index: int, case: dict, got: dict) -> None:
    """The decisions of ``got`` are those of the plain-Python reference (before writing them)."""
    batch, num_actions = 3, 7
    config = SearchConfig(num_simulations=25, root_selection=case["root"], two_player=case["two_player"],
                          discount=0.97, max_num_considered_actions=4)
    rng = np.random.default_rng(4200 + index)
    net = PathNetwork(4200 + index, batch, num_actions, case["masks"])
    value, logits, mask = net.root(rng)
    to_play = rng.integers(0, 2, batch) if case["two_player"] else np.zeros(batch, np.int64)
    noise = (rng.gumbel(size=(batch, num_actions)) if case["root"] == "gumbel"
             else rng.dirichlet(np.full(num_actions, 0.3), size=batch))
    for b in range(batch):
        args = (config, float(value[b]), logits[b], None if mask is None else mask[b], int(to_play[b]),
                net.one_tree(b), noise[b])
        ref = run_gumbel_mcts(*args) if case["root"] == "gumbel" else run_mcts(*args)
        assert [tuple(t) for t in got["trace"][b]] == ref["trace"]
        assert got["visit_counts"][b] == ref["visit_counts"]


def test_golden_file_covers_every_case():
    if os.environ.get("MUZERO_WRITE_GOLDEN"):
        cases = {}
        for i, case in enumerate(CASES):
            cases[_name(case)] = run_case(i, case)
            _check_against_reference(i, case, cases[_name(case)])
        os.makedirs(os.path.dirname(PATH), exist_ok=True)
        with open(PATH, "w") as f:
            json.dump(cases, f, indent=1)
            f.write("\n")
    with open(PATH) as f:
        stored = json.load(f)
    assert sorted(stored) == sorted(_name(case) for case in CASES)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[_name(case) for case in CASES])
def test_search_reproduces_golden_tree(index):
    with open(PATH) as f:
        expected = json.load(f)[_name(CASES[index])]
    got = run_case(index, CASES[index])
    assert got["trace"] == expected["trace"]
    assert got["visit_counts"] == expected["visit_counts"]
    assert got["action"] == expected["action"]
    for key in ("root_value", "root_q", "policy_target"):
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-6, atol=1e-7, err_msg=key)
