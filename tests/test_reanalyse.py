"""Reanalyse (docs/REANALYSE.md): the learner's worker re-searches stored positions with the
served weights, through the same batched inference as the actors, and a fraction of every
training batch is drawn from the positions it refreshed.

The network is ``muzero.rpc.testing.ToyModel`` (small-integer arithmetic, exact in float32),
served by a real ``MuZeroService`` on a started ``BatchingServer``."""
import hashlib
import threading
import time

import numpy as np
import pytest

from envs.base import EnvDescriptor
from muzero.algorithms.muzero.reanalyse import ReanalyseWorker
from muzero.algorithms.muzero.service import MuZeroService
from muzero.algorithms.muzero.config import ReplayConfig, TargetConfig
from muzero.config import ConfigError
from muzero.mcts.config import SearchConfig
from muzero.mcts import RootOutputs, search
from muzero.algorithms.muzero.replay import Replay
from muzero.algorithms.muzero.config import CacheServiceConfig
from muzero.rpc.config import ServerConfig
from muzero.rpc.server import BatchingServer
from muzero.rpc.testing import ToyModel

# ToyModel's shapes: 2 floats in, 3 actions.
VECTOR = EnvDescriptor("vec", (2,), "float32", 3)


def segment(episode_id, start, length, rng, terminated=False):
    a = VECTOR.num_actions
    policies = rng.random((length, a)).astype(np.float32) + 0.1
    policies /= policies.sum(axis=1, keepdims=True)
    # Observations in quarters (exact in float32) keep ToyModel's values small.
    obs = (rng.integers(-4, 5, size=(length, 2)) / 4).astype(np.float32)
    return dict(episode_id=np.int64(episode_id), start=np.int64(start), observations=obs,
                actions=rng.integers(0, a, size=length).astype(np.int32),
                rewards=rng.integers(0, 3, size=length).astype(np.float32),
                root_values=rng.integers(-5, 6, size=length).astype(np.float32), policies=policies,
                to_play=np.zeros(length, np.int8), terminated=np.bool_(terminated), truncated=np.bool_(False))


def make_replay(fraction=0.0, capacity=256, alpha=0.6, beta=0.4, seed=3, whole_unroll=True):
    return Replay(VECTOR, ReplayConfig(capacity_steps=capacity, min_steps_to_sample=1, priority_exponent=alpha,
                                       importance_sampling_exponent=beta),
                  TargetConfig(num_unroll_steps=3, td_steps=2, stack_frames=1,
                               reanalyse_fraction=fraction, reanalyse_whole_unroll=whole_unroll), seed,
                  discount=0.9)


def fill(rep, seed=0):
    """Three episodes, 40 steps in all (global indices 0..39)."""
    rng = np.random.default_rng(seed)
    rep.insert(segment(1, 0, 10, rng))
    rep.insert(segment(2, 0, 12, rng, terminated=True))
    rep.insert(segment(1, 10, 8, rng, terminated=True))
    rep.insert(segment(3, 0, 10, rng))
    return rep


def serve_toy(**cache):
    service = MuZeroService(ToyModel(), CacheServiceConfig(max_nodes=17, cache_slots=64, **cache))
    server = service.bind(BatchingServer(ServerConfig()))
    server.start()
    return server, service


@pytest.fixture
def toy_server():
    server, service = serve_toy()
    yield service
    server.stop(grace=0)


def direct_search(observations, config):
    """The search run directly on ToyModel (no server, no replay): (policy_target, root_value)."""
    model = ToyModel()
    root = model.initial_inference(observations)
    b, n = len(observations), config.num_nodes
    hidden = np.zeros((b, n, 2), np.float32)
    hidden[:, 0] = root["hidden_state"]
    rows = np.arange(b)

    def recurrent_fn(parent, action, new):
        out = model.recurrent_inference(hidden[rows, parent], action)
        hidden[rows, new] = out["hidden_state"]
        return out["reward"], out["value"], out["policy_logits"]

    result = search(RootOutputs(root["value"], root["policy_logits"], np.ones((b, 3), bool), np.zeros(b, np.int64)),
                    recurrent_fn, config, np.random.default_rng(0), add_noise=False)
    return result.policy_target, result.root_value


@pytest.mark.parametrize("root_selection", ["puct", "gumbel"])
def test_root_noise_is_on_by_default_and_changes_the_targets(toy_server, root_selection):
    # The actors' root noise (Dirichlet / Gumbel) in the worker's search: the refreshed
    # targets differ from the noiseless search of the same positions, and two workers with
    # different seeds disagree.
    config = SearchConfig(num_simulations=16, discount=0.9, root_selection=root_selection)
    targets = []
    for seed in (1, 2):
        rep = fill(make_replay(fraction=0.5))
        worker = ReanalyseWorker(rep, toy_server, config, VECTOR, batch_size=8, seed=seed)
        assert worker.run_once() == 8
        refreshed = np.flatnonzero(rep._store.target_version[:40] >= 0)
        noiseless, _ = direct_search(rep._store.observations[refreshed], config)
        assert not np.array_equal(rep._store.policies[refreshed], noiseless)
        targets.append(rep._store.policies[:40].copy())
    assert not np.array_equal(targets[0], targets[1])


@pytest.mark.parametrize("root_selection", ["puct", "gumbel"])
def test_refreshed_positions_get_the_search_target_and_the_served_version(toy_server, root_selection):
    config = SearchConfig(num_simulations=16, discount=0.9, root_selection=root_selection)
    rep = fill(make_replay(fraction=0.5))
    store = rep._store
    before = store.policies[:40].copy()
    toy_server.set_weights_version(17)                  # what the loop does after publishing step 17
    worker = ReanalyseWorker(rep, toy_server, config, VECTOR, batch_size=8, seed=1, root_noise=False)
    assert worker.run_once() == 8
    refreshed = np.flatnonzero(store.target_version[:40] >= 0)
    assert 1 <= len(refreshed) <= 8                     # 8 draws by priority, repeats possible
    assert set(store.target_version[:40].tolist()) == {-1, 17}
    expected_policy, expected_value = direct_search(store.observations[refreshed], config)
    np.testing.assert_array_equal(store.policies[refreshed], expected_policy)
    np.testing.assert_array_equal(store.root_values[refreshed], expected_value)
    untouched = np.setdiff1d(np.arange(40), refreshed)
    np.testing.assert_array_equal(store.policies[untouched], before[untouched])
    if root_selection == "puct":                        # visit counts / 16 simulations
        assert np.all(np.round(expected_policy * 16) == expected_policy * 16)
    assert toy_server.leases.num_active == 0            # the lease is held only during a search
    assert rep.stats()["reanalysed_live"] == len(refreshed)


def test_whole_unroll_windows_follow_the_episode_across_segments():
    # K = 3. Episode 1 is stored as indices 0..9 then (a later segment) 22..29; episode 2 is
    # 10..21 and terminated. Only one position has a priority: the others keep the floor of
    # 1e-3, which priority exponent 4 makes a weight of 1e-12, so every draw is that one.
    rng = np.random.default_rng(0)

    def only(rep, index):
        priorities = np.zeros(40)
        priorities[index] = 1.0
        rep.update_priorities(np.arange(40, dtype=np.int64), priorities)
        return rep

    # From 8: 8, 9, then the next segment of its episode, 22, 23 (what a batch row at 8 unrolls over).
    rep = only(fill(make_replay(fraction=0.5, alpha=4.0)), 8)
    assert rep.reanalyse_positions(4, rng)["index"].tolist() == [8, 9, 22, 23]
    # From 20 the episode ends after 21; with nothing else to draw, four rounds give only
    # 20 and 21, and the rest are plain draws (repeats, as without windows).
    rep = only(fill(make_replay(fraction=0.5, alpha=4.0)), 20)
    assert rep.reanalyse_positions(3, rng)["index"].tolist() == [20, 21, 20]
    # Without whole windows: the drawn positions only.
    rep = only(fill(make_replay(fraction=0.5, alpha=4.0, whole_unroll=False)), 20)
    assert rep.reanalyse_positions(3, rng)["index"].tolist() == [20, 20, 20]
    # Two windows that overlap give each position once, in the order drawn.
    rep = fill(make_replay(fraction=0.5, alpha=4.0))
    priorities = np.zeros(40)
    priorities[[30, 31]] = 1.0
    rep.update_priorities(np.arange(40, dtype=np.int64), priorities)
    index = rep.reanalyse_positions(5, rng)["index"].tolist()
    assert index in ([30, 31, 32, 33, 34], [31, 32, 33, 34, 30])


def batch_digest(batch):
    h = hashlib.sha256()
    for key in sorted(batch):
        a = np.ascontiguousarray(batch[key])
        h.update(f"{key}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


# sha256 of the two batches below, sampled by the replay of commit 2a85c17 (before reanalyse
# existed): fraction 0 must reproduce them bit for bit.
BEFORE_REANALYSE = ("66481611990a088ea9f4b46d5425c43dc3b2a4427f837718c440ab88ee7a142c",
                    "b6f81e709878ca4c00e71ded9e427afcabffb908400b82174f7c3df8b08df212")


def test_fraction_zero_leaves_batches_bit_identical():
    rep = fill(make_replay(fraction=0.0))
    assert rep._store.target_version is None and rep._store.refreshed_tree is None
    first = rep.sample(16)
    rep.update_priorities(first["index"], np.linspace(0.1, 3.0, 16))
    second = rep.sample(16, values_fn=lambda obs, index: obs.sum(axis=1))
    assert "target_version" not in first
    assert (batch_digest(first), batch_digest(second)) == BEFORE_REANALYSE


def test_the_fraction_of_a_batch_comes_from_refreshed_positions():
    # alpha = 0 (every weight 1) and beta = 1 make the importance weights easy to check.
    rep = fill(make_replay(fraction=0.25, alpha=0.0, beta=1.0))
    batch = rep.sample(16)                              # nothing refreshed yet: all rows as before
    assert np.all(batch["target_version"][:, 0] == -1)
    refreshed = np.array([3, 11, 30], np.int64)
    policy = np.tile(np.array([[0.0, 1.0, 0.0]], np.float32), (3, 1))
    assert rep.write_reanalysed(refreshed, policy, np.array([7.0, 8.0, 9.0], np.float32), version=5) == 3
    for _ in range(5):
        batch = rep.sample(16)
        # R = round(0.25 * 16) = 4 rows from the 3 refreshed positions, first; then 12 by
        # priority from all 40 (where a refreshed one may come up again).
        assert set(batch["index"][:4].tolist()) <= set(refreshed.tolist())
        assert np.all(batch["target_version"][:4, 0] == 5)
        np.testing.assert_array_equal(batch["target_policy"][:4, 0], np.tile([[0.0, 1.0, 0.0]], (4, 1)))
        again = np.isin(batch["index"][4:], refreshed)
        assert np.array_equal(batch["target_version"][4:, 0] == 5, again)
        # P(i) = 12/16 * 1/40 + 4/16 * 1/3 [refreshed]; weights (40 P)^-1 / max.
        p = 0.75 / 40 + 0.25 / 3 * np.isin(batch["index"], refreshed)
        w = 1.0 / (40 * p)
        np.testing.assert_allclose(batch["importance_weight"], w / w.max(), rtol=1e-6)
    # The trainer meant 4 rows per batch for refreshed positions: 6 batches, 3 written.
    assert rep.reanalyse_backlog() == 6 * 4 - 3


def test_evicted_positions_are_not_written_and_new_ones_start_unrefreshed():
    rep = fill(make_replay(fraction=0.5, capacity=40))
    rep.write_reanalysed(np.array([0, 1], np.int64), np.full((2, 3), 1 / 3, np.float32), np.zeros(2, np.float32), 2)
    rep.insert(segment(4, 0, 5, np.random.default_rng(9)))   # evicts episode 1's first segment (0..9)
    assert rep.write_reanalysed(np.array([0, 41], np.int64), np.full((2, 3), 1 / 3, np.float32),
                                np.zeros(2, np.float32), 3) == 1
    store = rep._store
    assert store.target_version[41 % 40] == 3 and store.target_version[0] == -1   # slot 0 now holds step 40
    assert store.refreshed_tree.total == pytest.approx(store.tree.leaves()[1])


def test_refreshed_targets_and_versions_survive_a_snapshot(tmp_path):
    rep = fill(make_replay(fraction=0.5))
    policy = np.array([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]], np.float32)
    rep.write_reanalysed(np.array([4, 20], np.int64), policy, np.array([1.5, -2.0], np.float32), 9)
    rep.snapshot(str(tmp_path / "snap"))
    back = make_replay(fraction=0.5)
    back.load(str(tmp_path / "snap"))
    np.testing.assert_array_equal(back._store.target_version, rep._store.target_version)
    np.testing.assert_array_equal(back._store.policies, rep._store.policies)
    assert back._store.refreshed_tree.total == pytest.approx(rep._store.refreshed_tree.total)
    assert back.sample(8)["target_version"][:4, 0].tolist() == [9, 9, 9, 9]
    # Without reanalyse the refreshed targets stay (they are the stored targets); versions go.
    plain = make_replay(fraction=0.0)
    plain.load(str(tmp_path / "snap"))
    np.testing.assert_array_equal(plain._store.policies[[4, 20]], policy)
    # A snapshot written without reanalyse loads with every target the actors'.
    fill(make_replay(fraction=0.0)).snapshot(str(tmp_path / "old"))
    upgraded = make_replay(fraction=0.5)
    upgraded.load(str(tmp_path / "old"))
    assert np.all(upgraded._store.target_version == -1) and upgraded._store.refreshed_tree.total == 0.0


def test_the_worker_batches_with_an_actor_through_the_server():
    from muzero.algorithms.muzero.client import InferenceClient
    # An initial_inference batch closes 0.5 s after its first request: the actor's and the
    # worker's, sent together, meet in it.
    server, service = serve_toy(initial_max_wait_ms=500.0, recurrent_max_wait_ms=1.0,
                                close_when_all_leases_waiting=False)
    try:
        rep = fill(make_replay(fraction=0.5))
        config = SearchConfig(num_simulations=4, discount=0.9)
        worker = ReanalyseWorker(rep, service, config, VECTOR, batch_size=4, seed=0)
        with InferenceClient(f"127.0.0.1:{server.port}", actor_id=0) as actor:
            actor.register(2, config.num_nodes)
            out = {}
            thread = threading.Thread(target=lambda: out.update(actor.initial_inference(np.ones((2, 2), np.float32))))
            started = time.monotonic()
            thread.start()
            assert worker.run_once() == 4
            thread.join(10)
        stats = server.stats()
        assert time.monotonic() - started < 5.0
        assert stats["initial_inference/batches"] == 1 and stats["initial_inference/max_batch_requests"] == 2
        assert stats["initial_inference/rows"] == 6 and out["value"].tolist() == [2.0, 2.0]
    finally:
        server.stop(grace=0)


def test_the_worker_thread_refreshes_as_far_as_the_trainer_asks(toy_server):
    rep = fill(make_replay(fraction=0.5))
    worker = ReanalyseWorker(rep, toy_server, SearchConfig(num_simulations=4, discount=0.9), VECTOR,
                             batch_size=4, seed=0, lead=4)
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while worker.positions < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        assert worker.positions == 4                    # one round: the lead, then it waits
        rep.sample(16)                                  # the trainer asks for 8 refreshed rows
        deadline = time.monotonic() + 10
        while worker.positions < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        assert worker.positions == 12 and worker.errors == 0
    finally:
        worker.stop()
    assert toy_server.leases.num_active == 0


@pytest.mark.parametrize("field, value, message", [
    ("reanalyse_fraction", 1.5, "TargetConfig.reanalyse_fraction=1.5 is invalid: must be in [0.0, 1.0]"),
    ("reanalyse_fraction", -0.1, "TargetConfig.reanalyse_fraction=-0.1 is invalid: must be in [0.0, 1.0]"),
    ("reanalyse_fraction", "half", "TargetConfig.reanalyse_fraction='half' is invalid: must be a number"),
    ("reanalyse_batch_size", 0, "TargetConfig.reanalyse_batch_size=0 is invalid: must be an integer in [1, 1024]"),
    ("reanalyse_batch_size", 2.5, "TargetConfig.reanalyse_batch_size=2.5 is invalid: must be an integer"),
])
def test_bad_settings_are_refused_in_one_line(field, value, message):
    with pytest.raises(ConfigError) as info:
        TargetConfig(**{field: value})
    assert str(info.value) == message and "\n" not in str(info.value)


def test_bad_fraction_from_set_flags_is_a_config_error():
    # --set=targets.reanalyse_fraction=2 goes through replace_sections (muzero.learner).
    from muzero import algorithms
    from muzero.settings import replace_sections
    settings = algorithms.get("muzero").default_settings("cartpole")
    assert settings.config.targets.reanalyse_fraction == 0.0         # off by default
    with pytest.raises(ConfigError, match=r"TargetConfig.reanalyse_fraction=2 is invalid: must be in \[0.0, 1.0\]"):
        replace_sections(settings, {"targets": {"reanalyse_fraction": 2}})


def test_bad_fraction_on_the_command_line_is_one_line():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "muzero.learner", "--env=cartpole",
                          "--set=targets.reanalyse_fraction=2", "--logdir=/nonexistent/never"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert out.stdout.strip() + out.stderr.strip() == \
        "error: TargetConfig.reanalyse_fraction=2 is invalid: must be in [0.0, 1.0]"


def test_the_learner_runs_the_worker_through_its_service():
    # The builder hands the learner its service; the first step starts the worker, whose
    # refreshed rows then make half of a batch; versions stay out of the train step.
    import envs
    from muzero import algorithms, core
    from muzero.settings import replace_sections
    builder = algorithms.get("muzero")
    settings = replace_sections(builder.default_settings("cartpole"), {
        "search": {"num_simulations": 3}, "training": {"batch_size": 8},
        "replay": {"min_steps_to_sample": 1, "capacity_steps": 512},
        "targets": {"reanalyse_fraction": 0.5, "reanalyse_batch_size": 8}})
    descriptor = envs.describe("cartpole")
    learner = builder.make_learner(settings, descriptor, core.RunContext())
    server = BatchingServer(ServerConfig())
    service = builder.make_service(settings, descriptor, learner, core.RunContext(), None)
    service.bind(server)
    server.start()
    try:
        service.set_weights_version(0)
        rng = np.random.default_rng(0)
        obs = rng.normal(size=(30, 4)).astype(np.float32)
        learner.replay.insert(dict(segment(1, 0, 30, rng), observations=obs, actions=np.zeros(30, np.int32),
                                   policies=np.full((30, 2), 0.5, np.float32)))
        assert learner.step() is not None and learner.reanalyse is not None
        deadline = time.monotonic() + 20
        while learner.reanalyse.positions < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        metrics = learner.step()
        assert metrics["reanalyse/batch_fraction"] >= 0.5 and metrics["reanalyse/errors"] == 0
        assert 0.0 < metrics["reanalyse/target_fraction"] <= 1.0
        # The second step trains at step 1 on targets made with the version-0 weights.
        assert metrics["reanalyse/weights_version"] == 0 and metrics["reanalyse/target_age"] == 1
    finally:
        learner.close()
        server.stop(grace=0)
    assert learner.reanalyse._thread is None and service.leases.num_active == 0
