"""Replay storage: validation, FIFO eviction, byte accounting, sum-tree sampling, priorities."""
import numpy as np
import pytest

from envs.base import EnvDescriptor
from muzero.algorithms.muzero.config import ReplayConfig, TargetConfig
from muzero.algorithms.muzero.replay import Replay
from muzero.replay.sum_tree import SumTree

VECTOR = EnvDescriptor("vec", (4,), "float32", 2)
IMAGE = EnvDescriptor("img", (2, 2, 1), "uint8", 4, kind="image", frame_layout="HWC")

# Upper 0.1 % points of the chi-square distribution (standard tables).
CHI2_999 = {9: 27.877, 7: 24.322}


def segment(descriptor, episode_id, start, t, terminated=False, priorities=None, **overrides):
    a = descriptor.num_actions
    seg = dict(episode_id=np.int64(episode_id), start=np.int64(start),
               observations=np.zeros((t,) + descriptor.observation_shape, descriptor.observation_dtype),
               actions=np.zeros(t, np.int32), rewards=np.zeros(t, np.float32),
               root_values=np.zeros(t, np.float32), policies=np.full((t, a), 1.0 / a, np.float32),
               to_play=np.zeros(t, np.int8), terminated=np.bool_(terminated), truncated=np.bool_(False))
    if priorities is not None:
        seg["priorities"] = np.asarray(priorities, np.float32)
    seg.update(overrides)
    return seg


def replay(descriptor=VECTOR, capacity=100, alpha=1.0, beta=1.0, stack=1, seed=0):
    rc = ReplayConfig(capacity_steps=capacity, min_steps_to_sample=1, priority_exponent=alpha,
                      importance_sampling_exponent=beta, min_priority=1e-3)
    return Replay(descriptor, rc, TargetConfig(num_unroll_steps=2, td_steps=2, stack_frames=stack), seed,
                  discount=0.997)


@pytest.mark.parametrize("field,value,match", [
    ("observations", np.zeros((3, 5), np.float32), "observations"),
    ("observations", np.zeros((3, 4), np.float64), "observations"),
    ("actions", np.array([0, 1, 2], np.int32), "actions"),
    ("actions", np.zeros(2, np.int32), "actions"),
    ("rewards", np.array([0, np.nan, 0], np.float32), "rewards"),
    ("root_values", [0.0, 0.0, 0.0], "root_values"),
    ("policies", np.full((3, 2), 0.7, np.float32), "policies"),
    ("to_play", np.ones(3, np.int8), "to_play"),
    ("priorities", np.array([1, -1, 1], np.float32), "priorities"),
    ("terminated", np.array([True]), "terminated"),
    ("start", np.int64(-1), "start"),
    ("bogus", np.zeros(3), "bogus"),
    # Values, not only shapes: each of these once got in and killed the first training step.
    ("observations", np.array([[0, 0, 0, 0], [0, np.nan, 0, 0], [0, 0, 0, 0]], np.float32),
     "'observations' holds a non-finite value"),
    ("observations", np.full((3, 4), np.inf, np.float32), "'observations' holds a non-finite value"),
    ("root_values", np.array([0, np.inf, 0], np.float32), "'root_values' holds non-finite"),
    ("rewards", np.array([0, 3e38, 0], np.float32), "'rewards' holds 3e\\+38, beyond"),
    ("root_values", np.array([-3e38, 0, 0], np.float32), "'root_values' holds 3e\\+38, beyond"),
    ("priorities", np.array([1, np.inf, 1], np.float32), "'priorities' holds non-finite"),
    ("priorities", np.array([1, 3e38, 1], np.float32), "'priorities' holds 3e\\+38"),
    ("policies", np.array([[np.nan, 0.5]] * 3, np.float32), "'policies' holds non-finite"),
])
def test_malformed_segments_are_rejected_naming_the_field(field, value, match):
    rep = replay()
    seg = segment(VECTOR, 0, 0, 3)
    seg[field] = value
    with pytest.raises(ValueError, match=match):
        rep.insert(seg)
    assert rep.num_steps == 0


def test_missing_field_and_broken_chaining_are_rejected():
    rep = replay()
    seg = segment(VECTOR, 0, 0, 3)
    del seg["rewards"]
    with pytest.raises(ValueError, match="rewards"):
        rep.insert(seg)
    rep.insert(segment(VECTOR, 1, 0, 3))
    with pytest.raises(ValueError, match="'start'=2.*overlaps.*continues at start=3"):
        rep.insert(segment(VECTOR, 1, 2, 3))
    rep.insert(segment(VECTOR, 1, 3, 2, terminated=True))
    with pytest.raises(ValueError, match="terminated"):
        rep.insert(segment(VECTOR, 1, 5, 2))
    with pytest.raises(ValueError, match="both True"):
        rep.insert(segment(VECTOR, 2, 0, 2, terminated=np.bool_(True), truncated=np.bool_(True)))
    assert rep.num_steps == 5


def test_a_gap_starts_a_new_chain_and_pushes_are_all_or_nothing():
    rep = replay()
    rep.insert(segment(VECTOR, 7, 0, 3))
    # Steps 3..9 were lost (e.g. a learner restart): the segment at 10 starts a new chain.
    rep.insert(segment(VECTOR, 7, 10, 2))
    assert rep.num_steps == 5
    with pytest.raises(ValueError, match="overlaps"):
        rep.insert(segment(VECTOR, 7, 11, 2))
    # A push whose second segment overlaps its first stores nothing at all.
    with pytest.raises(ValueError, match="overlaps"):
        rep.insert_many([segment(VECTOR, 8, 0, 3), segment(VECTOR, 8, 1, 3)])
    assert rep.num_steps == 5
    assert rep.insert_many([segment(VECTOR, 8, 0, 3), segment(VECTOR, 8, 3, 1, terminated=True)]) == 4
    assert rep.num_steps == 9


def test_fifo_eviction_of_whole_segments_and_byte_accounting():
    rep = replay(capacity=10)
    # One step: obs 4*4 + action 4 + reward 4 + root value 4 + policy 2*4 + to_play 1
    #           + raw priority 4 + sampleable flag 1 + segment row 4 + sum-tree leaf 8 = 54 bytes.
    # One segment record: 6 int64 fields (episode, start, length, first slot, prev, next)
    #                     + 1 int8 end flag = 49 bytes.
    step_bytes, segment_bytes = 54, 49
    rep.insert(segment(VECTOR, 0, 0, 4))
    rep.insert(segment(VECTOR, 1, 0, 4))
    assert rep.num_steps == 8 and rep.bytes_used == 8 * step_bytes + 2 * segment_bytes
    rep.insert(segment(VECTOR, 2, 0, 3))  # 11 > 10: episode 0's segment (oldest) goes
    assert rep.num_steps == 7 and rep.bytes_used == 7 * step_bytes + 2 * segment_bytes
    indices = set(rep.sample(200)["index"].tolist())
    assert indices == set(range(4, 11))  # global indices 0..3 were episode 0's steps
    rep.insert(segment(VECTOR, 1, 4, 4))  # 11 > 10: episode 1's first segment goes
    assert rep.num_steps == 7
    assert set(rep.sample(200)["index"].tolist()) == set(range(8, 15))
    stats = rep.stats()
    assert stats["num_segments"] == 2 and stats["inserted_steps"] == 15
    assert rep.bytes_allocated >= rep.bytes_used
    # evicted indices are ignored by priority updates
    assert rep.update_priorities(np.array([0, 8, 14], np.int64), np.ones(3, np.float32)) == 2


def test_positions_that_lost_their_frame_history_are_not_sampled():
    # Stack 3: a position needs steps j-3..j stored (frames j-2..j and the action a_{j-3}).
    rep = replay(IMAGE, capacity=8, stack=3)
    rep.insert(segment(IMAGE, 0, 0, 4))   # global 0..3
    rep.insert(segment(IMAGE, 0, 4, 4))   # global 4..7
    rep.insert(segment(IMAGE, 1, 0, 4))   # evicts global 0..3; episode 0 now starts at step 4
    # Episode 0 keeps steps 4..7; only step 7 (= 4 + 3) has its whole history stored.
    assert set(rep.sample(300)["index"].tolist()) == {7, 8, 9, 10, 11}
    # A segment whose episode has no stored predecessor starts a chain at its own start.
    rep.insert(segment(IMAGE, 5, 100, 4))  # evicts episode 0 entirely
    assert set(rep.sample(300)["index"].tolist()) == {8, 9, 10, 11, 15}


def chi_square(counts, expected):
    return float(np.sum((counts - expected) ** 2 / expected))


def test_sum_tree_frequencies_match_weights():
    tree = SumTree(13)  # 16 leaves, 3 of them padding
    weights = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 0, 0], np.float64)
    tree.set(np.arange(13), weights)
    assert tree.total == 55.0
    n = 20_000
    leaves = tree.sample(np.random.default_rng(1).random(n))
    counts = np.bincount(leaves, minlength=13)
    assert counts[10:].sum() == 0  # zero leaves are never drawn
    assert chi_square(counts[:10], n * weights[:10] / 55.0) < CHI2_999[9]
    # u at the very top of the range still lands on a positive leaf
    assert tree.sample(np.array([1.0 - 1e-17, 0.0])).tolist() == [9, 0]


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_replay_sampling_follows_priority_exponent_and_weights(alpha):
    rep = replay(capacity=20, alpha=alpha, beta=1.0)
    priorities = np.arange(1, 9, dtype=np.float32)  # positions 0..7
    rep.insert(segment(VECTOR, 0, 0, 8, priorities=priorities))
    n = 8_000
    b = rep.sample(n)
    counts = np.bincount(b["index"], minlength=8)
    probs = priorities.astype(np.float64) ** alpha / np.sum(priorities.astype(np.float64) ** alpha)
    assert chi_square(counts, n * probs) < CHI2_999[7]
    # w_i = (N P(i))^-1 / max_j w_j: w_i * P(i) is the same for every sampled row.
    product = b["importance_weight"] * probs[b["index"]]
    np.testing.assert_allclose(product, product[0], rtol=1e-5)
    assert b["importance_weight"].max() == pytest.approx(1.0)


def test_priority_updates_change_sampling():
    rep = replay(capacity=20, alpha=1.0)
    rep.insert(segment(VECTOR, 0, 0, 10))  # no priorities: max priority so far (1.0) for each
    assert len(set(rep.sample(400)["index"].tolist())) == 10
    rep.update_priorities(np.array([3], np.int64), np.array([1e6], np.float32))
    counts = np.bincount(rep.sample(1000)["index"], minlength=10)
    # P(3) = 1e6 / (1e6 + 9) > 0.9999: the other 9 positions expect < 0.01 draws in total.
    assert counts[3] >= 999
    rep.update_priorities(np.arange(10, dtype=np.int64), np.zeros(10, np.float32))
    # zero priorities are clipped to min_priority, so every position stays reachable
    assert len(set(rep.sample(400)["index"].tolist())) == 10
    # a new segment gets the largest priority seen so far (1e6)
    rep.insert(segment(VECTOR, 1, 0, 1))
    assert np.mean(rep.sample(200)["index"] == 10) > 0.99
    with pytest.raises(ValueError, match="priorities"):
        rep.update_priorities(np.array([1], np.int64), np.array([np.inf], np.float32))


@pytest.mark.parametrize("td_steps,expected", [
    # Indices 0-3: episode 7's segment A, 4-5: episode 9, 6: episode 7's segment B (one
    # step), 7-8: its segment C. Sampling left 0-6 at priority 0.5, after index 4 had
    # reached 4.0 (the largest so far). When C links to B, the last td_steps steps of
    # the chain before C (B's step, then A's last ones) get 4.0 again, as C's own do.
    (2, [0.5, 0.5, 0.5, 4.0, 0.5, 0.5, 4.0, 4.0, 4.0]),
    (3, [0.5, 0.5, 4.0, 4.0, 0.5, 0.5, 4.0, 4.0, 4.0]),
    # Monte-Carlo targets change at every stored step of the chain; episode 9 keeps its own.
    (-1, [4.0, 4.0, 4.0, 4.0, 0.5, 0.5, 4.0, 4.0, 4.0]),
])
def test_steps_before_a_link_get_the_maximum_priority_again(td_steps, expected):
    rc = ReplayConfig(capacity_steps=20, min_steps_to_sample=1, priority_exponent=0.5,
                      min_priority=1e-3)
    rep = Replay(VECTOR, rc, TargetConfig(num_unroll_steps=2, td_steps=td_steps, stack_frames=1), 0, discount=0.997)
    rep.insert(segment(VECTOR, 7, 0, 4))
    rep.insert(segment(VECTOR, 9, 0, 2))
    rep.insert(segment(VECTOR, 7, 4, 1))  # B
    rep.update_priorities(np.array([4], np.int64), np.array([4.0], np.float32))
    rep.update_priorities(np.arange(7, dtype=np.int64), np.full(7, 0.5, np.float32))
    rep.insert(segment(VECTOR, 7, 5, 2))
    store = rep._store
    np.testing.assert_allclose(store.priorities[:9], expected)
    # Sum-tree leaves are priority ** alpha (alpha = 0.5): sampling follows the new priorities.
    np.testing.assert_allclose(store.tree.leaves()[:9], np.sqrt(expected), rtol=1e-6)
    # A gap (segments lost in between) starts a new chain: nothing before it changes.
    rep.update_priorities(np.arange(9, dtype=np.int64), np.full(9, 0.5, np.float32))
    rep.insert(segment(VECTOR, 7, 10, 1))
    np.testing.assert_allclose(store.priorities[:10], [0.5] * 9 + [4.0])


def test_reprioritised_steps_that_lost_their_frame_history_stay_unsampleable():
    # History 2 (stack_frames): after episode 0's first segment [0, 3) is evicted, steps
    # 3 and 4 of its second segment lack frames and keep leaf weight 0 when a third
    # segment links up and gives them (td_steps = 3 >= 2) the maximum priority.
    rc = ReplayConfig(capacity_steps=7, min_steps_to_sample=1, priority_exponent=1.0, min_priority=1e-3)
    rep = Replay(IMAGE, rc, TargetConfig(num_unroll_steps=2, td_steps=3, stack_frames=2), 0, discount=0.997)
    rep.insert(segment(IMAGE, 0, 0, 3))
    rep.insert(segment(IMAGE, 0, 3, 3))   # slots 3-5
    rep.update_priorities(np.arange(3, 6, dtype=np.int64), np.full(3, 0.25, np.float32))
    rep.insert(segment(IMAGE, 0, 6, 3))   # evicts [0, 3); slots 6, 0, 1
    store = rep._store
    np.testing.assert_allclose(store.priorities[3:6], [1.0, 1.0, 1.0])
    np.testing.assert_allclose(store.tree.leaves()[3:6], [0.0, 0.0, 1.0])
