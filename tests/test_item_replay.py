"""muzero.algorithms.item_replay: ring buffer, priorities, importance weights, ratio, save/restore."""
import threading
import time

import numpy as np
import pytest

from muzero.algorithms.item_replay import ItemReplay

SPEC = {"x": ((2,), np.float32), "a": ((), np.int32)}


def _items(values):
    v = np.asarray(values, np.float32)
    return {"x": np.stack([v, -v], axis=1), "a": v.astype(np.int32)}


def test_ring_overwrites_the_oldest_items():
    replay = ItemReplay(4, SPEC, seed=0)
    replay.add(_items([1, 2, 3]))
    replay.add(_items([4, 5]))
    assert len(replay) == 4
    _, items, weights = replay.sample(200)
    assert set(items["a"].tolist()) == {2, 3, 4, 5}          # item 1 was overwritten
    np.testing.assert_array_equal(items["x"][:, 1], -items["x"][:, 0])
    np.testing.assert_array_equal(weights, 1.0)


def test_prioritized_sampling_importance_weights_and_refresh():
    replay = ItemReplay(4, SPEC, priority_exponent=1.0, importance_sampling_exponent=1.0, seed=0)
    replay.add(_items([0, 1, 2, 3]), priorities=np.array([1.0, 1.0, 1.0, 5.0]))
    np.testing.assert_allclose(replay.sampling_probabilities(), [0.125, 0.125, 0.125, 0.625])
    indices, items, weights = replay.sample(4000)
    share = np.mean(items["a"] == 3)
    assert abs(share - 0.625) < 0.03
    # w_i = (N P(i))^-1 / max: N P = 0.5 for the light items, 2.5 for the heavy one -> 1 and 0.2.
    np.testing.assert_allclose(weights[items["a"] == 3], 0.2, rtol=1e-6)
    np.testing.assert_allclose(weights[items["a"] != 3], 1.0, rtol=1e-6)
    # Refreshing the heavy item's priority to 1 makes the draw uniform.
    heavy = indices[items["a"] == 3][:1]
    assert replay.update_priorities(heavy, [1.0]) == 1
    np.testing.assert_allclose(replay.sampling_probabilities(), 0.25)


def test_priority_updates_for_overwritten_items_are_ignored():
    replay = ItemReplay(2, SPEC, priority_exponent=1.0, seed=0)
    replay.add(_items([0, 1]), priorities=np.array([1.0, 1.0]))
    indices, items, _ = replay.sample(10)
    replay.add(_items([7, 8]), priorities=np.array([1.0, 1.0]))     # both slots overwritten
    assert replay.update_priorities(indices, np.full(len(indices), 9.0)) == 0
    np.testing.assert_allclose(replay.sampling_probabilities(), 0.5)
    with pytest.raises(ValueError, match="finite and > 0"):
        replay.update_priorities(indices[:1], [np.nan])


def test_replay_ratio_blocks_each_side_in_turn():
    # 2 samples per insert, 2 items before sampling, tolerance 4.
    replay = ItemReplay(100, SPEC, samples_per_insert=2.0, min_size=2, tolerance=4, seed=0)
    assert replay.sample(2) is None                                  # nothing stored yet
    replay.add(_items([0, 1, 2]))                                    # allows 2 * (3 - 2) + 4 = 6
    assert replay.sample(4) is not None and replay.sample(2) is not None
    assert replay.sample(2) is None                                  # 8 > 6: the learner waits
    # Inserting is allowed until the surplus of allowed samples exceeds the tolerance.
    assert replay.add(_items([3, 4, 5, 6, 7]), timeout=0.1)          # surplus -4 <= 4; after: 2*6 - 6 = 6
    assert not replay.add(_items([8]), timeout=0.1)                  # surplus 6 > 4: actors wait
    got = {}
    thread = threading.Thread(target=lambda: got.setdefault("ok", replay.add(_items([8]), timeout=5)))
    thread.start()
    time.sleep(0.1)
    assert replay.sample(6) is not None                              # surplus 0: frees the insert
    thread.join(5)
    assert got["ok"] is True
    replay.close()
    assert replay.sample(1, timeout=1) is None and not replay.add(_items([1]))


def test_stop_limiting_lets_a_blocked_insert_in_and_keeps_its_items():
    # The run stops while an actor's insert waits for the learner: the insert must go in (and
    # be checkpointed) instead of waiting for samples that will never come.
    replay = ItemReplay(100, SPEC, samples_per_insert=2.0, min_size=2, tolerance=4, seed=0)
    assert replay.add(_items([0, 1, 2, 3, 4]))       # surplus before 2 * (0 - 2) = -4 <= 4: goes in
    assert not replay.add(_items([5]), timeout=0.05)  # surplus 2 * (5 - 2) - 0 sampled = 6 > 4: held
    got = {}
    thread = threading.Thread(target=lambda: got.setdefault("ok", replay.add(_items([9]), timeout=5)))
    thread.start()
    time.sleep(0.1)
    assert thread.is_alive()                                         # still held back by the ratio
    replay.stop_limiting()
    thread.join(5)
    assert got["ok"] is True and len(replay) == 6
    assert replay.add(_items([10, 11]), timeout=0)                   # later inserts do not wait either
    assert len(replay) == 8


def test_bad_items_are_refused():
    replay = ItemReplay(4, SPEC)
    with pytest.raises(ValueError, match="fields"):
        replay.add({"x": np.zeros((1, 2), np.float32)})
    with pytest.raises(ValueError, match=r"items\['x'\] has shape"):
        replay.add({"x": np.zeros((1, 3), np.float32), "a": np.zeros(1, np.int32)})
    with pytest.raises(ValueError, match="1 to 4 items"):
        replay.add(_items(range(5)))


def test_save_and_restore_round_trip(tmp_path):
    replay = ItemReplay(8, SPEC, priority_exponent=0.5, samples_per_insert=1.0, seed=3)
    replay.add(_items([1, 2, 3]), priorities=np.array([1.0, 4.0, 9.0]))
    replay.sample(2)
    replay.save(str(tmp_path))
    other = ItemReplay(8, SPEC, priority_exponent=0.5, samples_per_insert=1.0, seed=99)
    assert other.restore(str(tmp_path))
    assert len(other) == 3 and other.stats() == replay.stats()
    np.testing.assert_allclose(other.sampling_probabilities(), replay.sampling_probabilities())
    a, b = replay.sample(1), other.sample(1)                          # same generator state
    np.testing.assert_array_equal(a[0], b[0])
    assert not ItemReplay(8, SPEC).restore(str(tmp_path / "none"))
    with pytest.raises(ValueError, match="saved replay"):
        ItemReplay(16, SPEC).restore(str(tmp_path))
