"""Replay snapshots (round trip, corruption, atomicity), rate limiter and thread safety."""
import json
import os
import re
import threading
import time

import numpy as np
import pytest

from envs.base import EnvDescriptor
from muzero.algorithms.muzero.config import ReplayConfig, TargetConfig
from muzero.algorithms.muzero.replay import Replay, ReplayClosedError
from muzero.replay import SnapshotError
from muzero.replay import snapshot as snapshot_io

IMAGE = EnvDescriptor("img", (6, 6, 1), "uint8", 4, kind="image", frame_layout="HWC")
VECTOR = EnvDescriptor("vec", (3,), "float32", 2)


def random_segment(descriptor, rng, episode_id, start, t, terminated=False):
    a = descriptor.num_actions
    policies = rng.random((t, a)).astype(np.float32)
    policies /= policies.sum(axis=1, keepdims=True)
    if descriptor.is_image:
        obs = rng.integers(0, 256, (t,) + descriptor.observation_shape, dtype=np.uint8)
    else:
        obs = rng.standard_normal((t,) + descriptor.observation_shape).astype(np.float32)
    return dict(episode_id=np.int64(episode_id), start=np.int64(start), observations=obs,
                actions=rng.integers(0, a, t).astype(np.int32),
                rewards=rng.standard_normal(t).astype(np.float32),
                root_values=rng.standard_normal(t).astype(np.float32), policies=policies,
                to_play=np.zeros(t, np.int8), priorities=rng.random(t).astype(np.float32) + 0.1,
                terminated=np.bool_(terminated), truncated=np.bool_(False))


def filled_replay(capacity=60, seed=3):
    rc = ReplayConfig(capacity_steps=capacity, min_steps_to_sample=1, priority_exponent=0.7,
                      importance_sampling_exponent=0.5)
    rep = Replay(IMAGE, rc, TargetConfig(num_unroll_steps=3, td_steps=4, stack_frames=4), seed, discount=0.997)
    rng = np.random.default_rng(seed)
    for k in range(9):  # 3 interleaved episodes of 3 segments of 8 steps: wraps the ring
        rep.insert(random_segment(IMAGE, rng, k % 3, (k // 3) * 8, 8, terminated=k >= 6))
    return rep


def assert_same_batch(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_snapshot_round_trip_restores_identical_samples(tmp_path):
    rep = filled_replay()
    first = rep.sample(16)
    rep.update_priorities(first["index"], np.linspace(0.5, 5.0, 16).astype(np.float32))
    rep.snapshot(str(tmp_path / "snap"))
    expected = [rep.sample(32) for _ in range(3)]
    restored = Replay.restore(str(tmp_path / "snap"))
    assert restored.num_steps == rep.num_steps and restored.stats()["sampled"] == 16
    for batch in expected:
        assert_same_batch(batch, restored.sample(32))
    # both go on identically after the same insert
    seg = random_segment(IMAGE, np.random.default_rng(9), 11, 0, 5)
    rep.insert(dict(seg))
    restored.insert(dict(seg))
    assert_same_batch(rep.sample(32), restored.sample(32))
    # in-place load into an existing replay of the same env and capacity
    other = filled_replay(seed=4)
    other.load(str(tmp_path / "snap"))
    assert_same_batch(expected[0], other.sample(32))


def test_corrupted_or_partial_snapshot_raises_and_previous_still_loads(tmp_path, monkeypatch):
    rep = filled_replay()
    good, bad = str(tmp_path / "good"), str(tmp_path / "bad")
    rep.snapshot(good)
    rep.snapshot(bad)
    # flip one byte in the middle of the frames
    path = os.path.join(bad, "observations.npy")
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(SnapshotError, match="SHA-256"):
        Replay.restore(bad)
    # a truncated file
    with open(path, "r+b") as f:
        f.truncate(100)
    with pytest.raises(SnapshotError, match="partial or corrupted"):
        Replay.restore(bad)
    # no manifest: what an interrupted copy would leave
    os.remove(os.path.join(bad, "manifest.json"))
    with pytest.raises(SnapshotError, match="incomplete"):
        Replay.restore(bad)
    with pytest.raises(SnapshotError, match="no replay snapshot"):
        Replay.restore(str(tmp_path / "missing"))
    # a write that dies half way leaves the earlier snapshot under the same name intact
    real_save = np.save
    calls = []

    def failing_save(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk full (simulated)")
        return real_save(*args, **kwargs)

    monkeypatch.setattr(snapshot_io.np, "save", failing_save)
    rep.insert(random_segment(IMAGE, np.random.default_rng(1), 7, 0, 4))
    with pytest.raises(OSError, match="disk full"):
        rep.snapshot(good)
    monkeypatch.setattr(snapshot_io.np, "save", real_save)
    assert sorted(os.listdir(tmp_path)) == ["bad", "good"]  # no temporary left behind
    restored = Replay.restore(good)
    assert restored.num_steps == 56 and restored.stats()["inserted_steps"] == 72
    # overwriting an existing snapshot replaces it
    rep.snapshot(good)
    assert Replay.restore(good).stats()["inserted_steps"] == 76


def limited_replay(spi=2.0, tol=8.0, min_steps=10):
    rc = ReplayConfig(capacity_steps=1000, min_steps_to_sample=min_steps, samples_per_insert=spi,
                      samples_per_insert_tolerance=tol)
    return Replay(VECTOR, rc, TargetConfig(num_unroll_steps=1, td_steps=1, stack_frames=1), 0, discount=0.997)


def test_rate_limiter_holds_samples_per_insert():
    rep = limited_replay()
    rng = np.random.default_rng(0)
    rep.insert(random_segment(VECTOR, rng, 0, 0, 5))
    assert not rep.can_sample(1)  # 5 < min_steps_to_sample
    assert not rep.wait_until_can_sample(1, timeout=0.01)
    rep.insert(random_segment(VECTOR, rng, 0, 5, 5))
    # inserted 10 = min: allowance = 2 * (10 - 10) + tol 8 = 8 samples
    assert rep.can_sample(8) and not rep.can_sample(9)
    rep.sample(8)
    assert not rep.can_sample(1)
    with pytest.raises(TimeoutError):
        rep.sample(1, timeout=0.01)
    rep.insert(random_segment(VECTOR, rng, 0, 10, 3))  # + 3 steps -> + 6 samples allowed
    assert rep.can_sample(6) and not rep.can_sample(7)
    # inserts wait once the insert side is more than tol ahead of the sampler:
    rep.insert(random_segment(VECTOR, rng, 0, 13, 5))  # surplus 2 * (18 - 10) - 8 = 8 <= 8
    rep.insert(random_segment(VECTOR, rng, 0, 18, 1))  # surplus 2 * (19 - 10) - 8 = 10 > 8
    with pytest.raises(TimeoutError):
        rep.insert(random_segment(VECTOR, rng, 0, 19, 1), timeout=0.01)
    rep.sample(4)  # surplus 18 - 12 = 6 <= 8: inserts go again
    rep.insert(random_segment(VECTOR, rng, 0, 19, 1), timeout=0.01)
    assert rep.stats()["inserted_steps"] == 20 and rep.stats()["sampled"] == 12
    with pytest.raises(ValueError, match="samples_per_insert_tolerance"):
        rep.sample(17)


def test_stop_limiting_lets_a_blocked_insert_in():
    # The run stops while an actor's push waits for the trainer: the push is stored (and so
    # checkpointed) instead of waiting for samples that will never be drawn.
    rep = limited_replay()                                  # 2 samples per step, tolerance 8, min 10
    rng = np.random.default_rng(0)
    rep.insert(random_segment(VECTOR, rng, 0, 0, 15))      # surplus 2 * (15 - 10) - 0 = 10 > 8
    with pytest.raises(TimeoutError):
        rep.insert(random_segment(VECTOR, rng, 0, 15, 2), timeout=0.01)
    done = []
    thread = threading.Thread(target=lambda: done.append(rep.insert_many(
        [random_segment(VECTOR, rng, 0, 15, 2)], timeout=5)))
    thread.start()
    time.sleep(0.1)
    assert thread.is_alive() and not done                   # still held back
    rep.stop_limiting()
    thread.join(timeout=5)
    assert done == [2] and rep.stats()["inserted_steps"] == 17
    rep.insert(random_segment(VECTOR, rng, 0, 17, 3), timeout=0)   # later pushes do not wait either
    assert rep.stats()["inserted_steps"] == 20


def test_close_wakes_blocked_waiters():
    rep = limited_replay()
    errors = []

    def trainer():
        try:
            rep.sample(4)
        except ReplayClosedError as e:
            errors.append(e)

    thread = threading.Thread(target=trainer)
    thread.start()
    time.sleep(0.05)
    rep.close()
    thread.join(timeout=5)
    assert not thread.is_alive() and len(errors) == 1
    with pytest.raises(ReplayClosedError):
        rep.insert(random_segment(VECTOR, np.random.default_rng(0), 0, 0, 2))


def test_concurrent_inserts_and_samples_keep_state_consistent():
    rc = ReplayConfig(capacity_steps=300, min_steps_to_sample=20, samples_per_insert=4.0,
                      samples_per_insert_tolerance=64.0)
    rep = Replay(VECTOR, rc, TargetConfig(num_unroll_steps=3, td_steps=3, stack_frames=1), 0, discount=0.997)
    stop = threading.Event()
    failures = []

    def actor(actor_id):
        rng = np.random.default_rng(actor_id)
        try:
            for episode in range(6):
                for k in range(4):
                    rep.insert(random_segment(VECTOR, rng, actor_id * 100 + episode, k * 7, 7,
                                              terminated=k == 3), timeout=10)
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)

    def trainer():
        try:
            while not stop.is_set():
                if rep.wait_until_can_sample(16, timeout=0.01):
                    b = rep.sample(16)
                    assert np.all(np.isfinite(b["target_value"]))
                    rep.update_priorities(b["index"], np.abs(b["target_value"][:, 0]) + 0.1)
        except Exception as e:  # noqa: BLE001
            failures.append(e)

    actors = [threading.Thread(target=actor, args=(i,)) for i in range(3)]
    learner = threading.Thread(target=trainer)
    for t in actors + [learner]:
        t.start()
    for t in actors:
        t.join(timeout=30)
    stop.set()
    learner.join(timeout=30)
    assert not failures, failures
    stats = rep.stats()
    assert stats["inserted_steps"] == 3 * 6 * 4 * 7 == 504
    assert stats["num_steps"] == 294  # whole 7-step segments: 42 of them fit in 300
    store = rep._store
    assert store.num_sampleable == int(store.sampleable.sum()) == 294
    tree = store.tree.tree
    p = store.tree.num_leaves
    np.testing.assert_array_equal(tree[1:p], tree[2:2 * p:2] + tree[3:2 * p:2])
    leaves = store.tree.leaves()
    expected = np.where(store.sampleable, store.priorities.astype(np.float64) ** 1.0, 0.0)
    np.testing.assert_array_equal(leaves, expected)
    # the ratio held both ways: 4 samples per step after warm-up, within the tolerance (64)
    # plus, on the insert side, one segment's worth (4 * 7) let in while at the limit
    assert 4 * (504 - 20) - 64 - 4 * 7 <= stats["sampled"] <= 4 * (504 - 20) + 64


# ---------------------------------------------------------------- manifest integrity
def _edit_manifest(directory, edit):
    path = os.path.join(directory, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    edit(manifest)
    with open(path, "w") as f:
        json.dump(manifest, f)


def _set(path, value):
    def edit(manifest):
        node = manifest
        *parents, last = path.split(".")
        for key in parents:
            node = node[key]
        node[last] = value(node[last]) if callable(value) else value
    return edit


@pytest.mark.parametrize("field,value", [
    ("meta.store.head", lambda v: v ^ 4),             # one flipped bit: was accepted and carried forward
    ("meta.store.tail", lambda v: v + 1),
    ("meta.store.inserted_steps", lambda v: v + 8),
    ("meta.store.max_priority", lambda v: v * 2),
    ("meta.store.episodes", lambda v: v[:-1]),
    ("meta.limiter.sampled", lambda v: v + 1),
    ("meta.rng.state.state", lambda v: v ^ 1),
    ("meta.seed", 4),
    ("meta.target_config.td_steps", 5),
    ("arrays.actions.sha256", lambda v: "0" * 64),
    ("version", 1),                                   # does not switch the checksums off
])
def test_every_manifest_field_is_checksummed(tmp_path, field, value):
    rep = filled_replay()
    snap = str(tmp_path / "snap")
    rep.snapshot(snap)
    _edit_manifest(snap, _set(field, value))
    with pytest.raises(ValueError, match=re.escape(f"'{field}'")) as info:
        Replay.restore(snap)
    assert isinstance(info.value, SnapshotError) and info.value.field == field
    with pytest.raises(ValueError, match=re.escape(f"'{field}'")):
        filled_replay(seed=4).load(snap)


def test_missing_added_or_truncated_manifest_fields_fail_to_load(tmp_path):
    rep = filled_replay()
    snap = str(tmp_path / "snap")
    rep.snapshot(snap)
    pristine = open(os.path.join(snap, "manifest.json")).read()
    _edit_manifest(snap, lambda m: m["meta"]["store"].pop("num_sampleable"))
    with pytest.raises(ValueError, match="'meta.store.num_sampleable' is missing"):
        Replay.restore(snap)
    open(os.path.join(snap, "manifest.json"), "w").write(pristine)
    _edit_manifest(snap, lambda m: m["meta"]["store"].update(extra=1))
    with pytest.raises(ValueError, match="'meta.store.extra' is not covered by a checksum"):
        Replay.restore(snap)
    open(os.path.join(snap, "manifest.json"), "w").write(pristine)
    _edit_manifest(snap, lambda m: m.pop("checksums"))
    with pytest.raises(ValueError, match="no 'checksums'"):
        Replay.restore(snap)
    open(os.path.join(snap, "manifest.json"), "w").write(pristine[:len(pristine) // 2])
    with pytest.raises(SnapshotError, match="unreadable manifest.json"):
        Replay.restore(snap)
    open(os.path.join(snap, "manifest.json"), "w").write(pristine)
    assert Replay.restore(snap).num_steps == rep.num_steps


@pytest.mark.parametrize("field,value", [
    ("head", lambda v: v ^ 4), ("head", lambda v: v - 1), ("head", lambda v: v + 1000),
    ("tail", lambda v: v + 8), ("seg_head", lambda v: v + 1), ("seg_tail", lambda v: v + 1),
    ("num_sampleable", lambda v: v + 1), ("inserted_steps", lambda v: 3), ("max_priority", lambda v: 0.01),
    ("episodes", lambda v: v + v[:1]), ("head", "72"),
])
def test_version_1_snapshot_counters_are_checked_against_the_arrays(tmp_path, field, value):
    """Snapshots written before the checksums (version 1) still load; their counters must agree
    with the arrays they describe, so a flipped one is named instead of carried forward."""
    rep = filled_replay()
    snap = str(tmp_path / "snap")
    rep.snapshot(snap)

    def as_version_1(manifest):
        manifest.pop("checksums")
        manifest["version"] = 1
    _edit_manifest(snap, as_version_1)
    assert Replay.restore(snap).stats() == rep.stats()
    _edit_manifest(snap, _set(f"meta.store.{field}", value))
    with pytest.raises(ValueError, match=re.escape(f"meta.store.{field}")) as info:
        Replay.restore(snap)
    # tail and seg_tail describe the same point (the oldest live step, its segment): either is named
    assert info.value.field == f"meta.store.{'tail' if field == 'seg_tail' else field}"


def test_counter_checks_accept_every_state_a_store_goes_through(tmp_path):
    """Wrapping, eviction mid-episode, gaps and updated priorities never trip the checks."""
    rc = ReplayConfig(capacity_steps=50, min_steps_to_sample=1)
    rep = Replay(VECTOR, rc, TargetConfig(num_unroll_steps=2, td_steps=3, stack_frames=1), 0, discount=0.997)
    rng = np.random.default_rng(5)
    live = list(range(6))          # episode ids being played; one that ends is replaced by a new id
    starts = dict.fromkeys(live, 0)
    for k in range(60):
        slot = int(rng.integers(0, len(live)))
        episode = live[slot]
        start = starts[episode] + (5 if rng.random() < 0.1 else 0)   # sometimes a gap (lost segments)
        t = int(rng.integers(1, 12))
        done = bool(rng.random() < 0.15)
        rep.insert(random_segment(VECTOR, rng, episode, start, t, terminated=done))
        starts[episode] = start + t
        if done:
            live[slot] = 100 + k
            starts[100 + k] = 0
        if k % 7 == 0 and rep.can_sample(4):
            batch = rep.sample(4)
            rep.update_priorities(batch["index"], rng.random(4).astype(np.float32) * 3)
        arrays, counters = rep._store.state()
        snapshot_io.check_store_counters(arrays, json.loads(json.dumps(counters)))
    rep.snapshot(str(tmp_path / "snap"))
    assert Replay.restore(str(tmp_path / "snap")).stats() == rep.stats()


def test_a_ring_that_has_not_wrapped_saves_only_its_written_rows(tmp_path, monkeypatch):
    """Before the ring wraps only rows [0, head) were ever written: the snapshot holds those
    (24 of 1,000 here), and loading, even into a store that held other data, gives back
    every array of the original, rows never written included (their initial values)."""
    masked = EnvDescriptor("img", (6, 6, 1), "uint8", 4, kind="image", frame_layout="HWC", has_legal_mask=True)
    rc = ReplayConfig(capacity_steps=1000, min_steps_to_sample=1)
    tc = TargetConfig(num_unroll_steps=3, td_steps=4, stack_frames=4, reanalyse_fraction=0.5)
    rep = Replay(masked, rc, tc, 0, discount=0.997)
    rng = np.random.default_rng(0)
    for k in range(3):
        seg = random_segment(masked, rng, k, 0, 8)
        seg["legal_masks"] = rng.random((8, 4)) < 0.7
        rep.insert(seg)
    snap = str(tmp_path / "snap")
    rep.snapshot(snap)
    assert np.load(os.path.join(snap, "observations.npy")).shape == (24, 6, 6, 1)
    assert np.load(os.path.join(snap, "seg_next.npy")).shape == (24,)
    assert os.path.getsize(os.path.join(snap, "actions.npy")) < 128 + 24 * 4 + 1   # npy header + 24 int32
    other = Replay(masked, rc, tc, 1, discount=0.997)   # same capacity, more rows written: they must be reset
    for k in range(10):
        other.insert(random_segment(masked, rng, 50 + k, 0, 9))
    other.load(snap)
    fresh = Replay.restore(snap)
    for name in rep._store.array_fields():
        for loaded in (other, fresh):
            np.testing.assert_array_equal(getattr(loaded._store, name), getattr(rep._store, name), err_msg=name)
    assert fresh.stats() == rep.stats()
    assert_same_batch(rep.sample(16), fresh.sample(16))

    # A snapshot of the same ring written before stores saved only their written rows (whole
    # arrays, no capacity/rows counters) still loads, to the same contents.
    def whole_arrays(store):
        arrays = {name: getattr(store, name) for name in store.array_fields()}
        counters = {name: getattr(store, name) for name in store._COUNTERS}
        counters["episodes"] = [[k, v[0], v[1]] for k, v in store.episodes.items()]
        return arrays, counters
    monkeypatch.setattr(type(rep._store), "state", whole_arrays)
    rep.snapshot(str(tmp_path / "whole"))
    monkeypatch.undo()
    assert np.load(os.path.join(tmp_path, "whole", "actions.npy")).shape == (1000,)
    old = Replay.restore(str(tmp_path / "whole"))
    for name in rep._store.array_fields():
        np.testing.assert_array_equal(getattr(old._store, name), getattr(rep._store, name), err_msg=name)

    def as_version_1(manifest):   # no checksums: the counter checks alone must catch these
        manifest.pop("checksums")
        manifest["version"] = 1
    pristine = open(os.path.join(snap, "manifest.json")).read()
    for field, value, message in [("head", 25, "saves min(head, capacity) = 25 array rows; this snapshot has 24"),
                                  ("rows", 23, "=23, but the arrays have 24 rows"),
                                  ("seg_head", 30, "=30 is above head=24"),
                                  ("capacity", 20, "=20 is below the 24 array rows saved")]:
        open(os.path.join(snap, "manifest.json"), "w").write(pristine)
        _edit_manifest(snap, as_version_1)
        _edit_manifest(snap, _set(f"meta.store.{field}", value))
        with pytest.raises(ValueError, match=re.escape(message)) as info:
            Replay.restore(snap)
        assert info.value.field == f"meta.store.{field}"


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_restoring_a_small_snapshot_does_not_touch_a_fresh_rings_unwritten_rows(tmp_path):
    """A fresh store's arrays are lazily zeroed pages; loading 16 rows into a 200k-row ring
    must not write (and so commit) the other rows: 400 MB of frames here."""
    wide = EnvDescriptor("wide", (500,), "float32", 2)
    rc = ReplayConfig(capacity_steps=200_000, min_steps_to_sample=1)
    tc = TargetConfig(num_unroll_steps=3, td_steps=4, stack_frames=1)
    rep = Replay(wide, rc, tc, 0, discount=0.997)
    rng = np.random.default_rng(0)
    for k in range(2):
        rep.insert(random_segment(wide, rng, k, 0, 8))
    snap = str(tmp_path / "snap")
    rep.snapshot(snap)
    del rep
    before = _resident_bytes()
    fresh = Replay.restore(snap)
    grown = _resident_bytes() - before
    assert grown < 100e6, f"restoring 16 rows made {grown / 1e6:.0f} MB resident"
    store = fresh._store
    assert store.head == 16 and np.all(store.observations[16:20] == 0) and np.all(store.seg_next[16:20] == -1)
    assert set(fresh.sample(64)["index"].tolist()) <= set(range(16))   # only written rows are drawn
