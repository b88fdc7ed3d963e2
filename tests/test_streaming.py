"""Step streaming: per-env state, unroll assembly, validation, back-pressure, the thin actor.

A numpy policy whose outputs are simple functions of the observation, a real
BatchingServer on 127.0.0.1 and a real StreamingClient; expected unrolls are written
out by hand.
"""
import threading
import time

import grpc
import numpy as np
import pytest

from muzero import core
from muzero.algorithms.streaming_actor import (BadActionError, StreamingActor, StreamingActorSettings,
                                    StreamingClient, run_streaming_actor, streaming_actor_args)
from muzero.algorithms.streaming import StepStreamingService, StreamingPolicy
from muzero.algorithms.streaming_actor import STREAMING_SERVICE
from muzero.algorithms.unroll_queue import UnrollQueue
from muzero.rpc import wire
from muzero.rpc.client import ServerError
from muzero.rpc.config import ClientConfig, ServerConfig
from muzero.rpc.server import BatchingServer


class FakePolicy:
    """action = int(obs[0]) % A (evaluation rows: A - 1); outputs baseline = 2 * obs[0] and
    policy_logits = [obs[0], obs[0] + 1, ...]; recurrent state h counts the steps since the
    episode started (h + 1 per act); value = 100 * obs[0] + obs[1]."""

    observation_dtype = np.dtype(np.float32)
    action_shape = ()
    action_dtype = np.dtype(np.int32)

    def __init__(self, obs_size=2, num_actions=3, recurrent=True):
        self.observation_shape = (obs_size,)
        self.num_actions = num_actions
        self.recurrent = recurrent
        self.acts = []       # (observation, prev_action, prev_reward, state, evaluation) per call
        self.env_ids = []    # env_ids per call
        self.values = []

    def initial_state(self, num_envs):
        return {"h": np.zeros((num_envs, 1), np.float32)} if self.recurrent else {}

    def act(self, observation, prev_action, prev_reward, state, evaluation, env_ids):
        self.acts.append((observation.copy(), prev_action.copy(), prev_reward.copy(),
                          {k: v.copy() for k, v in state.items()}, evaluation.copy()))
        self.env_ids.append(np.array(env_ids).copy())
        o = observation[:, 0]
        action = np.where(evaluation, self.num_actions - 1,
                          np.abs(o).astype(np.int64) % self.num_actions).astype(np.int32)
        outputs = {"baseline": 2 * o, "policy_logits": o[:, None] + np.arange(self.num_actions, dtype=np.float32)}
        new_state = {k: v + 1 for k, v in state.items()}
        return action, outputs, new_state

    def value(self, observation):
        self.values.append(observation.copy())
        return (100 * observation[:, 0] + observation[:, 1]).astype(np.float32)


class Harness:
    def __init__(self, num_train=2, num_eval=0, unroll_length=3, overlap=1, max_batch=16,
                 max_wait_ms=1.0, sink=None, policy=None, obs_size=2, num_actions=3,
                 store_final_observations=False, num_remote=0, lease_timeout_s=60.0):
        self.policy = policy or FakePolicy(obs_size, num_actions)
        self.context = core.RunContext()
        self.unrolls = []
        self.service = StepStreamingService(
            self.policy, num_train_envs=num_train, num_eval_envs=num_eval, unroll_length=unroll_length,
            overlap=overlap, sink=sink or self._collect, context=self.context, max_batch=max_batch,
            max_wait_ms=max_wait_ms, store_final_observations=store_final_observations,
            num_remote_envs=num_remote, lease_timeout_s=lease_timeout_s)
        self.server = BatchingServer(ServerConfig())
        self.service.bind(self.server)
        self.server.start()
        self.address = f"127.0.0.1:{self.server.port}"
        self.client = StreamingClient(self.address, config=ClientConfig(connect_timeout_s=5, call_timeout_s=10))
        self.channel = grpc.insecure_channel(self.address)

    def _collect(self, unroll):
        self.unrolls.append(unroll)
        return True

    def step(self, env_ids, run_id, obs, rewards=None, terminated=None, truncated=None, final=None):
        b = len(env_ids)
        rewards = np.zeros(b) if rewards is None else rewards
        terminated = np.zeros(b, bool) if terminated is None else terminated
        truncated = np.zeros(b, bool) if truncated is None else truncated
        actions, _ = self.client.inference(env_ids, run_id, rewards, terminated, truncated,
                                           np.asarray(obs, np.float32), final)
        return actions

    def raw(self, method, tensors, timeout=10):
        stub = self.channel.unary_unary(f"/{STREAMING_SERVICE}/{method}")
        return wire.decode(stub(wire.encode(tensors), timeout=timeout))

    def close(self):
        self.service.close()
        self.client.close()
        self.channel.close()
        self.server.stop()


@pytest.fixture
def harness_factory():
    made = []

    def make(**kwargs):
        h = Harness(**kwargs)
        made.append(h)
        return h
    yield make
    for h in made:
        h.close()


def test_policy_protocol_and_stream_info(harness_factory):
    h = harness_factory(num_train=4, num_eval=2, unroll_length=3, overlap=1)
    assert isinstance(h.policy, StreamingPolicy)
    info = h.client.info()
    assert info["num_train_envs"] == 4 and info["num_eval_envs"] == 2
    assert info["observation_shape"] == (2,) and info["observation_dtype"] == np.float32
    assert info["action_shape"] == () and info["action_dtype"] == np.int32
    assert (info["num_actions"], info["unroll_length"], info["overlap"], info["max_batch"]) == (3, 3, 1, 16)
    assert info["weights_version"] == 0
    h.service.update_weights(lambda: setattr(h.policy, "touched", True), version=7)
    assert h.policy.touched and h.client.info()["weights_version"] == 7
    _, version = h.client.inference([0], 5, [0.0], [False], [False], np.zeros((1, 2), np.float32))
    assert version == 7


def test_unroll_assembly_with_overlap(harness_factory):
    """unroll_length 3, overlap 1: unrolls of 5 steps, consecutive ones share 2 steps."""
    h = harness_factory(num_train=2, unroll_length=3, overlap=1)
    run = 77
    # Call t shows observation [10 + t, 0.5]; it carries reward 0.5 t for the transition into
    # it, except call 0 (a new run: its reward 99 and terminated flag are ignored). Call 2
    # ends the first episode by termination.
    rewards = [99.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]
    terms = [True, False, True, False, False, False, False, False]
    actions = []
    for t in range(8):
        a = h.step([0], run, [[10 + t, 0.5]], rewards=[rewards[t]], terminated=[terms[t]])
        actions.append(int(a[0]))
        assert len(h.unrolls) == (0 if t < 4 else 1 if t < 7 else 2)
    assert actions == [(10 + t) % 3 for t in range(8)]
    u1, u2 = h.unrolls
    np.testing.assert_array_equal(u1["observation"], [[10, .5], [11, .5], [12, .5], [13, .5], [14, .5]])
    np.testing.assert_array_equal(u1["reward"], [0.0, 0.5, 1.0, 1.5, 2.0])
    np.testing.assert_array_equal(u1["terminated"], [False, False, True, False, False])
    np.testing.assert_array_equal(u1["truncated"], [False] * 5)
    np.testing.assert_array_equal(u1["bootstrap_value"], [0.0] * 5)
    np.testing.assert_array_equal(u1["action"], [1, 2, 0, 1, 2])
    np.testing.assert_array_equal(u1["baseline"], [20, 22, 24, 26, 28])
    np.testing.assert_array_equal(u1["policy_logits"][:, 0], [10, 11, 12, 13, 14])
    np.testing.assert_array_equal(u1["state/h"], [0.0])          # before step 0: the initial state
    assert u1["env_id"] == 0 and u1["action"].dtype == np.int32 and u1["reward"].dtype == np.float32
    # The second unroll starts at step 3 (= step T of the first, plus one overlap step before it).
    np.testing.assert_array_equal(u2["observation"][:, 0], [13, 14, 15, 16, 17])
    np.testing.assert_array_equal(u2["reward"], [1.5, 2.0, 2.5, 3.0, 3.5])
    np.testing.assert_array_equal(u2["terminated"], [False] * 5)
    np.testing.assert_array_equal(u2["action"], [1, 2, 0, 1, 2])
    # State before step 3: the episode restarted at step 2 (h = 0 there), so h = 1.
    np.testing.assert_array_equal(u2["state/h"], [1.0])
    assert set(u1) == {"observation", "reward", "terminated", "truncated", "bootstrap_value", "action",
                       "baseline", "policy_logits", "state/h", "env_id", "run_id"}
    assert u1["run_id"] == run and u2["run_id"] == run
    # What the policy saw: prev action 0 and prev reward 0 at each episode start (steps 0, 2).
    prev_action = [int(c[1][0]) for c in h.policy.acts[1:]]          # acts[0] is the probe
    prev_reward = [float(c[2][0]) for c in h.policy.acts[1:]]
    h_in = [float(c[3]["h"][0, 0]) for c in h.policy.acts[1:]]
    assert prev_action == [0, 1, 0, 0, 1, 2, 0, 1]
    assert prev_reward == [0.0, 0.5, 0.0, 1.5, 2.0, 2.5, 3.0, 3.5]
    assert h_in == [0, 1, 0, 1, 2, 3, 4, 5]
    # Episode 1: transitions at calls 1 and 2 -> return 0.5 + 1.0, length 2.
    assert list(h.context.episodes.recent[False]) == [(1.5, 2)]
    assert h.context.env_steps == 7
    # The sink got arrays that do not alias the service's buffers.
    u1["observation"][:] = -1
    h.step([0], run, [[18, 0.5]], rewards=[4.0])
    h.step([0], run, [[19, 0.5]], rewards=[4.5])
    h.step([0], run, [[20, 0.5]], rewards=[5.0])
    np.testing.assert_array_equal(h.unrolls[2]["observation"][:, 0], [16, 17, 18, 19, 20])


def test_unroll_state_with_overlap_not_below_unroll_length(harness_factory):
    """overlap 2 >= unroll_length 2: unrolls of 5 steps sharing 3; state/h is the state
    before each unroll's first step (no episode ends here, so h = step index)."""
    h = harness_factory(num_train=1, unroll_length=2, overlap=2)
    for t in range(11):
        h.step([0], 5, [[t, 0.0]], rewards=[1.0])
    starts = [int(u["observation"][0, 0]) for u in h.unrolls]
    assert starts == [0, 2, 4, 6]
    assert [float(u["state/h"][0]) for u in h.unrolls] == [0, 2, 4, 6]
    for u in h.unrolls:
        np.testing.assert_array_equal(u["observation"][:, 0], u["observation"][0, 0] + np.arange(5))


def test_new_run_id_drops_the_partial_unroll(harness_factory):
    h = harness_factory(num_train=1, unroll_length=3, overlap=0)
    h.step([0], 1, [[1, 0]])
    h.step([0], 1, [[2, 0]], rewards=[1.0])
    h.step([0], 1, [[3, 0]], rewards=[1.0])       # 3 of 4 steps of an unroll, mid-episode
    assert h.unrolls == []
    for t in range(4):                            # the actor restarted: a new run id
        h.step([0], 2, [[100 + t, 0]], rewards=[7.0], terminated=[t == 0])
    (u,) = h.unrolls
    np.testing.assert_array_equal(u["observation"][:, 0], [100, 101, 102, 103])
    np.testing.assert_array_equal(u["reward"], [0.0, 7.0, 7.0, 7.0])    # the first call's reward ignored
    np.testing.assert_array_equal(u["terminated"], [False] * 4)
    np.testing.assert_array_equal(u["state/h"], [0.0])
    stats = h.service.stats()
    assert stats["streaming/abandoned_episodes"] == 1 and stats["streaming/run_starts"] == 2
    assert h.context.episodes.count[False] == 0
    assert h.context.env_steps == 2 + 3


def test_episode_returns_reach_the_context(harness_factory):
    h = harness_factory(num_train=2, unroll_length=5, overlap=0)
    # env 0: rewards 1, 2, then termination with reward 3 -> return 6, length 3;
    # env 1: rewards -1, then truncation with reward 0.5 -> return -0.5, length 2.
    h.step([0, 1], 9, [[0, 0], [0, 0]])
    h.step([0, 1], 9, [[1, 0], [1, 0]], rewards=[1.0, -1.0])
    h.step([0, 1], 9, [[2, 0], [2, 0]], rewards=[2.0, 0.5], truncated=[False, True],
           final=np.array([[0, 0], [5, 0.25]], np.float32))
    h.step([0, 1], 9, [[3, 0], [3, 0]], rewards=[3.0, 4.0], terminated=[True, False])
    assert sorted(h.context.episodes.recent[False]) == [(-0.5, 2), (6.0, 3)]
    assert h.context.episodes.count == {False: 2, True: 0}
    assert h.context.env_steps == 6
    assert h.service.stats()["streaming/episodes_train"] == 2


def test_truncation_bootstraps_from_the_final_observation(harness_factory):
    h = harness_factory(num_train=2, unroll_length=1, overlap=0)
    h.step([0, 1], 3, [[1, 0], [1, 0]])
    n_values = len(h.policy.values)
    final = np.array([[3, 0.25], [9, 9]], np.float32)      # row 1 is not truncated: ignored
    h.step([0, 1], 3, [[2, 0], [2, 0]], rewards=[1.0, 1.0], truncated=[True, False],
           terminated=[False, True], final=final)
    by_env = {int(u["env_id"]): u for u in h.unrolls}
    np.testing.assert_array_equal(by_env[0]["truncated"], [False, True])
    np.testing.assert_array_equal(by_env[0]["bootstrap_value"], [0.0, 300.25])   # 100 * 3 + 0.25
    np.testing.assert_array_equal(by_env[1]["terminated"], [False, True])
    np.testing.assert_array_equal(by_env[1]["bootstrap_value"], [0.0, 0.0])
    # policy.value ran once, on the truncated row's final observation only.
    assert len(h.policy.values) == n_values + 1
    np.testing.assert_array_equal(h.policy.values[-1], [[3, 0.25]])
    # The unroll keeps the observation shown (the next episode's first), not the final one.
    np.testing.assert_array_equal(by_env[0]["observation"][1], [2, 0])


def test_evaluation_envs_build_no_unrolls(harness_factory):
    h = harness_factory(num_train=1, num_eval=2, unroll_length=1, overlap=0)
    acts = h.step([1, 2, 0], 4, [[0, 0], [0, 0], [4, 0]])
    assert acts.tolist() == [2, 2, 1]                          # evaluation rows act "greedily" (A - 1)
    assert h.policy.acts[-1][4].tolist() == [True, True, False]
    h.step([1, 2, 0], 4, [[1, 0]] * 3, rewards=[2.0, 3.0, 1.0], terminated=[True, False, False])
    h.step([1, 2, 0], 4, [[2, 0]] * 3, rewards=[0.0, 1.0, 1.0], terminated=[False, True, False])
    assert {int(u["env_id"]) for u in h.unrolls} == {0}
    assert len(h.unrolls) == 2
    assert sorted(h.context.episodes.recent[True]) == [(2.0, 1), (4.0, 2)]
    assert h.context.episodes.count[False] == 0
    assert h.context.env_steps == 2                            # training rows only
    stats = h.service.stats()
    assert stats["streaming/steps_eval"] == 4 and stats["streaming/episodes_eval"] == 2


def _good(b=2, start=0):
    return {"env_ids": np.arange(start, start + b, dtype=np.int32), "run_ids": np.full(b, 11, np.int64),
            "rewards": np.zeros(b, np.float32), "terminated": np.zeros(b, bool),
            "truncated": np.zeros(b, bool), "observations": np.zeros((b, 2), np.float32)}


def _with(**changes):
    t = _good()
    for k, v in changes.items():
        if v is None:
            t.pop(k)
        else:
            t[k] = v
    return t


_BAD = {
    "missing field": (_with(rewards=None), "rewards"),
    "unknown field": (_with(bogus=np.zeros(2, np.float32)), "bogus"),
    "env_ids dtype": (_with(env_ids=np.arange(2, dtype=np.int64)), "env_ids must have dtype int32"),
    "rewards dtype": (_with(rewards=np.zeros(2, np.float64)), "rewards must have dtype float32"),
    "terminated shape": (_with(terminated=np.zeros(3, bool)), "terminated must have shape [2]"),
    "observations shape": (_with(observations=np.zeros((2, 3), np.float32)), "observations must have shape"),
    "observations dtype": (_with(observations=np.zeros((2, 2), np.uint8)), "observations must have dtype"),
    "empty batch": ({**{k: v[:0] for k, v in _good().items()}}, "batch size 0"),
    "batch above max": (_good(b=17), "batch size 17"),
    "env id negative": (_with(env_ids=np.array([0, -1], np.int32)), "env_ids holds -1"),
    "env id too large": (_with(env_ids=np.array([0, 6], np.int32)), "env_ids holds 6"),
    "duplicate env id": (_with(env_ids=np.array([3, 3], np.int32)), "env_ids repeats env id 3"),
    "run id 0": (_with(run_ids=np.array([11, 0], np.int64)), "run_ids"),
    "nan reward": (_with(rewards=np.array([0, np.nan], np.float32)), "rewards holds a non-finite value nan"),
    "inf reward": (_with(rewards=np.array([np.inf, 0], np.float32)), "rewards holds a non-finite value inf"),
    "nan observation": (_with(observations=np.array([[0, 0], [0, np.nan]], np.float32)),
                        "observations holds a non-finite value"),
    "terminated and truncated": (_with(terminated=np.array([False, True]), truncated=np.array([False, True]),
                                       final_observations=np.zeros((2, 2), np.float32)),
                                 "terminated and truncated are both true at row 1"),
    "truncated without final": (_with(truncated=np.array([True, False])), "final_observations is required"),
    "non-finite final": (_with(truncated=np.array([False, True]),
                               final_observations=np.array([[0, 0], [np.inf, 0]], np.float32)),
                         "final_observations holds a non-finite value inf at row 1"),
    "final shape": (_with(final_observations=np.zeros((2, 5), np.float32)), "final_observations must have shape"),
}


@pytest.mark.parametrize("case", sorted(_BAD))
def test_invalid_requests_name_the_field_and_the_server_keeps_serving(harness_factory, case):
    h = harness_factory(num_train=4, num_eval=2, max_batch=16)
    tensors, message = _BAD[case]
    with pytest.raises(grpc.RpcError) as info:
        h.raw("inference", tensors)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in info.value.details(), info.value.details()
    out = h.raw("inference", _good())
    assert out["actions"].shape == (2,) and out["actions"].dtype == np.int32
    assert h.context.env_steps == 0 and h.service.stats()["streaming/run_starts"] == 2


def test_stream_info_takes_no_fields(harness_factory):
    h = harness_factory()
    with pytest.raises(grpc.RpcError) as info:
        h.raw("stream_info", {"x": np.int64(1)})
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "unknown field(s) ['x']" in info.value.details()


def test_client_reports_invalid_argument_as_server_error(harness_factory):
    h = harness_factory()
    with pytest.raises(ServerError) as info:
        h.client.inference([0, 9], 1, [0, 0], [False, False], [False, False], np.zeros((2, 2), np.float32))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT and "env_ids" in info.value.details


def test_two_requests_naming_one_env_in_a_batch(harness_factory):
    """Both requests wait in one batch (long deadline); the later one fails, its rows are
    not applied (env 2 or env 1 stays unseen)."""
    h = harness_factory(num_train=4, max_batch=16, max_wait_ms=400)
    results = {}

    def call(name, ids, run):
        try:
            results[name] = h.raw("inference", {**_good(2), "env_ids": np.array(ids, np.int32),
                                                "run_ids": np.full(2, run, np.int64)})
        except grpc.RpcError as e:
            results[name] = e
    threads = [threading.Thread(target=call, args=("a", [0, 1], 5)),
               threading.Thread(target=call, args=("b", [2, 0], 6))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    errors = [r for r in results.values() if isinstance(r, grpc.RpcError)]
    assert len(errors) == 1 and len(results) == 2
    assert errors[0].code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "env_id 0 is also named by another request" in errors[0].details()
    assert dict(errors[0].trailing_metadata()).get("mz-error") == "env-id-clash"
    stats = h.service.stats()
    assert stats["muzero.Streaming/inference/batches"] == 1
    assert stats["streaming/run_starts"] == 2 and stats["streaming/rejected_requests"] == 1
    # The server keeps serving both envs afterwards.
    assert h.raw("inference", _good(4))["actions"].shape == (4,)


def test_blocked_sink_returns_after_close(harness_factory):
    queue = UnrollQueue(capacity=1)
    h = harness_factory(num_train=1, unroll_length=1, overlap=0, sink=queue.put)
    h.step([0], 1, [[0, 0]])
    h.step([0], 1, [[1, 0]])                     # first unroll (steps 0, 1): the queue is full now
    assert len(queue) == 1
    done = threading.Event()
    out = {}

    def blocked():
        out["actions"] = h.step([0], 1, [[2, 0]])      # completes unroll (1, 2): blocks in put
        done.set()
    thread = threading.Thread(target=blocked)
    thread.start()
    assert not done.wait(0.5)                    # back-pressure: the call waits for the learner
    h.service.close()
    queue.close()                                # the sink's owner closes its queue
    assert done.wait(5)
    assert out["actions"].tolist() == [2]
    # After close the sink is not called: further full unrolls do not block.
    t0 = time.monotonic()
    h.step([0], 1, [[3, 0]])
    h.step([0], 1, [[4, 0]])
    assert time.monotonic() - t0 < 2
    stats = h.service.stats()
    assert stats["streaming/unrolls_emitted"] == 4
    assert stats["streaming/unrolls_delivered"] == 1 and stats["streaming/unrolls_dropped"] == 3
    thread.join()


def test_stop_event_stops_calling_the_sink(harness_factory):
    calls = []
    h = harness_factory(num_train=1, unroll_length=1, overlap=0, sink=lambda u: calls.append(u) or True)
    h.context.stop_event.set()
    for t in range(3):
        h.step([0], 1, [[t, 0]])
    assert calls == [] and h.service.stats()["streaming/unrolls_dropped"] == 2


def test_a_failing_sink_does_not_fail_the_actors(harness_factory):
    def sink(unroll):
        raise RuntimeError("learner bug")
    h = harness_factory(num_train=1, unroll_length=1, overlap=0, sink=sink)
    for t in range(3):
        assert h.step([0], 1, [[t, 0]]).shape == (1,)
    assert h.service.stats()["streaming/sink_errors"] == 2


def test_service_checks_the_policy():
    class Wrong(FakePolicy):
        def act(self, *args):
            action, outputs, state = super().act(*args)
            return action[:1], outputs, state
    with pytest.raises(ValueError, match="actions of shape"):
        StepStreamingService(Wrong(), num_train_envs=1, num_eval_envs=0, unroll_length=1, overlap=0,
                             sink=lambda u: True, context=core.RunContext())
    with pytest.raises(ValueError, match="unroll_length"):
        StepStreamingService(FakePolicy(), num_train_envs=1, num_eval_envs=0, unroll_length=0, overlap=0,
                             sink=lambda u: True, context=core.RunContext())


# ----------------------------------------------------------------------------- thin actor

def test_streaming_actor_args_partition_env_ids():
    import dataclasses

    from muzero import algorithms
    settings = dataclasses.replace(algorithms.get("vtrace").default_settings("cartpole"), num_actors=2,
                                   envs_per_actor=8, num_eval_actors=2, eval_envs_per_actor=3, seed=5,
                                   eval_env_options={"max_episode_steps": 100})
    got = [streaming_actor_args(settings, i, "127.0.0.1:1", None)[0] for i in range(4)]
    assert [(a.env_id_base, a.num_envs, a.evaluation) for a in got] == [
        (0, 8, False), (8, 8, False), (16, 3, True), (19, 3, True)]
    assert all(a.server == "127.0.0.1:1" and a.env == "cartpole" and a.seed == 5 for a in got)
    # Evaluation actors' envs take eval_env_options; training actors' do not.
    assert [a.env_options for a in got] == [{}, {}, {"max_episode_steps": 100}, {"max_episode_steps": 100}]
    with pytest.raises(ValueError, match="out of range"):
        streaming_actor_args(settings, 4, "127.0.0.1:1", None)
    import pickle
    assert pickle.loads(pickle.dumps(got[0])) == got[0]


def test_run_streaming_actor_against_the_server(harness_factory):
    h = harness_factory(num_train=16, num_eval=4, unroll_length=8, overlap=0, max_batch=64,
                        obs_size=4, num_actions=2)
    stop = threading.Event()
    cfg = ClientConfig(connect_timeout_s=5)
    actors = [StreamingActorSettings(server=h.address, env="cartpole", num_envs=16, env_id_base=0,
                                     client_config=cfg),
              StreamingActorSettings(server=h.address, env="cartpole", num_envs=4, env_id_base=16,
                                     evaluation=True, client_config=cfg)]
    errors = []

    def run(s):
        try:
            run_streaming_actor(s, stop_event=stop)
        except Exception as e:  # surfaced below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(s,)) for s in actors]
    for t in threads:
        t.start()
    time.sleep(2.0)
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors, errors
    assert len(h.unrolls) > 0 and h.context.env_steps >= 16 * 8
    u = h.unrolls[0]
    assert u["observation"].shape == (9, 4) and u["action"].shape == (9,) and 0 <= u["env_id"] < 16
    # CartPole facts: every arriving reward is 1 (0 at a run's first step); finished episodes
    # have return == length; the pole/cart limits were crossed where episodes terminated.
    for u in h.unrolls:
        assert set(np.unique(u["reward"][1:]).tolist()) <= {1.0}
    returns_lengths = list(h.context.episodes.recent[False])
    assert returns_lengths and all(r == n for r, n in returns_lengths)
    assert h.context.episodes.count[True] > 0                  # the evaluation actor's episodes
    assert {int(u["env_id"]) for u in h.unrolls} <= set(range(16))


def test_actor_refuses_bad_actions_and_foreign_env_ids(harness_factory):
    h = harness_factory(num_train=4, num_eval=0, obs_size=4, num_actions=2)
    client = StreamingClient(h.address, config=ClientConfig(connect_timeout_s=5))
    try:
        actor = StreamingActor(StreamingActorSettings(server=h.address, env="cartpole", num_envs=2), client)
        with pytest.raises(BadActionError, match=r"values \[2\] outside \[0, 1\]"):
            actor.check_actions(np.array([0, 2], np.int32))
        with pytest.raises(BadActionError, match="non-finite"):
            actor.check_actions(np.array([0, np.nan]))
        with pytest.raises(BadActionError, match="shape"):
            actor.check_actions(np.array([0], np.int32))
        assert actor.bad_actions == 3
        actor.batch.close()
        evaluating = StreamingActor(StreamingActorSettings(server=h.address, env="cartpole", num_envs=2,
                                                           evaluation=True), client)
        with pytest.raises(ValueError, match="not all evaluation env ids"):
            evaluating.connect()
        wrong_env = StreamingActor(StreamingActorSettings(server=h.address, env="tictactoe", num_envs=2), client)
        with pytest.raises(ValueError, match="server observations"):
            wrong_env.connect()
    finally:
        client.close()


def test_actor_reconnects_with_a_new_run_id_after_a_server_restart():
    """The learner restarts on the same port: the actor waits, then continues with a new run id."""
    policy = FakePolicy(4, 2)
    context = core.RunContext()
    got = []

    def serve(port):
        service = StepStreamingService(policy, num_train_envs=2, num_eval_envs=0, unroll_length=4, overlap=0,
                                       sink=lambda u: got.append(u) or True, context=context)
        server = BatchingServer(ServerConfig(port=port))
        service.bind(server)
        server.start()
        return service, server
    service, server = serve(0)
    port = server.port
    stop = threading.Event()
    settings = StreamingActorSettings(server=f"127.0.0.1:{port}", env="cartpole", num_envs=2,
                                      client_config=ClientConfig(connect_timeout_s=2, call_timeout_s=2,
                                                                 retry_timeout_s=20, backoff_max_s=0.2))
    client = StreamingClient(settings.server, config=settings.client_config)
    actor = StreamingActor(settings, client, stop, log=lambda m: None)
    thread = threading.Thread(target=actor.run)
    thread.start()
    try:
        time.sleep(0.5)
        first_run = actor.run_id
        server.stop(grace=None)
        time.sleep(0.5)
        service, server = serve(port)
        deadline = time.monotonic() + 15
        while service.stats()["streaming/steps_train"] < 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert service.stats()["streaming/steps_train"] >= 20
        assert actor.reconnects >= 1 and actor.run_id != first_run
    finally:
        stop.set()
        thread.join(10)
        client.close()
        actor.batch.close()
        server.stop()


def test_command_line_thin_actor(harness_factory, tmp_path):
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    bad = subprocess.run([sys.executable, "-m", "muzero.actor", "--algo=vtrace", "--server=127.0.0.1:1"],
                         capture_output=True, text=True, cwd=root, env=env, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == \
        "error: --envs_per_actor is required without --config"
    h = harness_factory(num_train=8, num_eval=0, unroll_length=4, overlap=0, obs_size=4, num_actions=2)
    ok = subprocess.run([sys.executable, "-m", "muzero.actor", "--algo=vtrace", f"--server={h.address}",
                         "--env=cartpole", "--envs_per_actor=4", "--env_id_base=4", "--max_env_steps=40"],
                        capture_output=True, text=True, cwd=root, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "env ids 4..7" in ok.stdout
    assert h.context.env_steps == 40 - 4          # 10 calls of 4 envs; the first carries no transition
    assert {int(u["env_id"]) for u in h.unrolls} == {4, 5, 6, 7}


class ContinuousPolicy:
    """Box actions in [-1, 1]^2: action = the observation's two values, +inf where obs[0] == 1000."""

    observation_shape = (2,)
    observation_dtype = np.dtype(np.float32)
    action_shape = (2,)
    action_dtype = np.dtype(np.float32)
    num_actions = 0
    action_low = np.array([-1.0, -1.0], np.float32)
    action_high = np.array([1.0, 1.0], np.float32)

    def initial_state(self, num_envs):
        return {}

    def act(self, observation, prev_action, prev_reward, state, evaluation, env_ids):
        action = observation.astype(np.float32).copy()
        action[observation[:, 0] == 1000] = np.inf
        return action, {}, {}

    def value(self, observation):
        return np.zeros(len(observation), np.float32)


def test_continuous_actions_are_clipped_and_non_finite_ones_refused(harness_factory):
    h = harness_factory(num_train=2, policy=ContinuousPolicy(), unroll_length=2, overlap=0)
    info = h.client.info()
    assert info["action_shape"] == (2,) and info["action_dtype"] == np.float32
    np.testing.assert_array_equal(info["action_low"], [-1, -1])
    actions = h.step([0, 1], 5, [[0.5, -0.25], [3.0, -3.0]])
    np.testing.assert_array_equal(actions, [[0.5, -0.25], [1.0, -1.0]])   # row 1 clipped into the box
    assert h.service.stats()["streaming/clipped_actions"] == 1
    with pytest.raises(ServerError) as info:
        h.step([0, 1], 5, [[1000.0, 0.0], [0.1, 0.1]])
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION and info.value.tag == "nonfinite-action"
    assert "non-finite actions for env ids [0]" in info.value.details
    assert h.service.stats()["streaming/nonfinite_batches"] == 1
    actions = h.step([0, 1], 6, [[0.1, 0.2], [0.3, 0.4]])                  # still serving
    np.testing.assert_allclose(actions, [[0.1, 0.2], [0.3, 0.4]])


def test_unrolls_keep_the_observation_an_episode_ended_on(harness_factory):
    """store_final_observations: final_observation[t] is the pre-reset observation where the
    transition into step t ended an episode, the step's observation elsewhere."""
    h = harness_factory(num_train=1, unroll_length=2, overlap=0, store_final_observations=True)
    h.step([0], 9, [[1.0, 0.0]])
    h.step([0], 9, [[2.0, 0.0]], rewards=[1.0], truncated=[True], final=np.array([[7.0, 7.0]], np.float32))
    h.step([0], 9, [[3.0, 0.0]], rewards=[1.0], terminated=[True], final=np.array([[8.0, 8.0]], np.float32))
    assert len(h.unrolls) == 1
    u = h.unrolls[0]
    np.testing.assert_array_equal(u["observation"][:, 0], [1, 2, 3])
    np.testing.assert_array_equal(u["final_observation"], [[1, 0], [7, 7], [8, 8]])


# -- env ids leased to remote actors ---------------------------------------------------------------

def _register(h, num_envs, actor_id, evaluation=False, run_id=11):
    ids, lease, _ = h.client.register_envs(num_envs, actor_id, run_id, evaluation)
    return ids.tolist(), lease


def _actor_thread(settings, stop):
    """``run_streaming_actor(settings)`` started in a thread; returns (thread, errors it raised)."""
    errors = []

    def run():
        try:
            run_streaming_actor(settings, stop_event=stop)
        except Exception as e:  # surfaced by the test
            errors.append(e)
    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def _leased_step(h, env_ids, lease, run_id, obs, rewards=None):
    b = len(env_ids)
    return h.client.inference(env_ids, run_id, np.zeros(b) if rewards is None else rewards, np.zeros(b, bool),
                              np.zeros(b, bool), np.asarray(obs, np.float32), lease=lease)[0]


def test_remote_env_ids_are_leased_checked_and_given_back(harness_factory):
    # Local ids: training 0, 1 and evaluation 2; the remote range is 3..6.
    h = harness_factory(num_train=2, num_eval=1, num_remote=4, unroll_length=2, overlap=0)
    info = h.client.info()
    assert info["num_remote_envs"] == 4
    ids, lease = _register(h, 3, actor_id=7)
    assert ids == [3, 4, 5]
    with pytest.raises(ServerError) as e:                      # one id is left
        _register(h, 2, actor_id=8)
    assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "num_envs=2 exceeds the 1 free remote env ids (num_remote_envs=4, 1 live leases)" in str(e.value)
    with pytest.raises(ServerError, match="env id 3 is a remote env id"):
        h.step([3], 5, [[1, 0]])                               # no lease
    with pytest.raises(ServerError, match="env id 6 is not held by lease"):
        _leased_step(h, [5, 6], lease, 5, [[1, 0], [1, 0]])
    with pytest.raises(ServerError, match="env id 0 is not a remote env id"):
        _leased_step(h, [0, 3], lease, 5, [[1, 0], [1, 0]])
    # Three calls of the leased training envs: one unroll of 3 steps each (unroll_length 2),
    # observation [10 + t, env id]; call 0 starts the run (its reward is ignored).
    for t in range(3):
        _leased_step(h, ids, lease, 5, [[10 + t, e] for e in ids], rewards=[1.0] * 3)
    assert sorted(int(u["env_id"]) for u in h.unrolls) == [3, 4, 5]
    u = next(u for u in h.unrolls if int(u["env_id"]) == 4)
    np.testing.assert_array_equal(u["observation"], [[10, 4], [11, 4], [12, 4]])
    np.testing.assert_array_equal(u["reward"], [0.0, 1.0, 1.0])
    assert h.context.env_steps == 6
    # Released: the lease's calls are refused with its tag, and its ids serve the next actor,
    # here as evaluation envs (no unrolls; the policy is told evaluation=True).
    assert h.client.release_envs(lease) and not h.client.release_envs(lease)
    with pytest.raises(ServerError) as e:
        _leased_step(h, ids, lease, 5, [[1, 0]] * 3)
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION and e.value.tag == "lease-released"
    ids2, lease2 = _register(h, 2, actor_id=8, evaluation=True)
    assert ids2 == [3, 4]
    before = len(h.unrolls)
    for t in range(4):
        _leased_step(h, ids2, lease2, 9, [[0, 0]] * 2)
    assert len(h.unrolls) == before and h.policy.acts[-1][4].tolist() == [True, True]
    stats = h.service.stats()
    assert stats["streaming/live_leases"] == 1 and stats["streaming/free_remote_envs"] == 2
    assert stats["streaming/remote_registrations"] == 2


def test_an_unused_lease_expires_and_frees_its_env_ids(harness_factory):
    h = harness_factory(num_train=0, num_eval=0, num_remote=2, lease_timeout_s=0.3)
    ids, lease = _register(h, 2, actor_id=1)
    _leased_step(h, ids, lease, 3, [[0, 0]] * 2)
    time.sleep(0.5)
    with pytest.raises(ServerError) as e:
        _leased_step(h, ids, lease, 3, [[0, 0]] * 2)
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION and e.value.tag == "lease-expired"
    assert _register(h, 2, actor_id=2)[0] == [0, 1]


def test_a_lease_superseded_while_its_call_is_checked_fails_with_that_reason(harness_factory):
    # The interleaving that reaches the ownership check with a lease that was live a moment
    # before: another registration under the actor id ends it and takes its env ids.
    h = harness_factory(num_train=0, num_eval=0, num_remote=2)
    ids, lease = _register(h, 2, actor_id=4)
    _leased_step(h, ids, lease, 3, [[0, 0]] * 2)
    table, get = h.service.leases, h.service.leases.get

    def get_then_supersede(lease_id):
        live = get(lease_id)
        table.get = get
        table.register(4, live.run_id, 2, 1)
        return live

    table.get = get_then_supersede
    with pytest.raises(ServerError) as e:
        _leased_step(h, ids, lease, 3, [[0, 0]] * 2)
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION and e.value.tag == "lease-superseded"


def test_register_envs_without_remote_ids_names_the_flag(harness_factory):
    h = harness_factory(num_train=2)
    with pytest.raises(ServerError, match="num_remote_envs=0.*--remote_envs=N"):
        _register(h, 1, actor_id=1)


def test_leased_thin_actor_registers_again_when_its_lease_ends(harness_factory):
    h = harness_factory(num_train=2, num_eval=0, num_remote=4, unroll_length=4, overlap=0, obs_size=4,
                        num_actions=2)
    stop = threading.Event()
    settings = StreamingActorSettings(server=h.address, env="cartpole", num_envs=4, env_id_base=None, actor_id=3,
                                      client_config=ClientConfig(connect_timeout_s=5, backoff_initial_s=0.05))
    thread, errors = _actor_thread(settings, stop)
    deadline = time.monotonic() + 10
    while h.service.stats()["streaming/remote_registrations"] < 1 or len(h.unrolls) < 4:
        assert time.monotonic() < deadline, "the leased actor made no unrolls"
        time.sleep(0.05)
    # The learner ends the lease (as a timeout would): the actor registers again and goes on.
    (lease,) = list(h.service.leases._leases)
    h.service.leases.release(lease)
    while h.service.stats()["streaming/remote_registrations"] < 2:
        assert time.monotonic() < deadline, "the actor did not register again"
        time.sleep(0.05)
    steps = h.context.env_steps
    while h.context.env_steps < steps + 40:
        assert time.monotonic() < deadline, "the actor stopped acting after registering again"
        time.sleep(0.05)
    stop.set()
    thread.join(10)
    assert not errors, errors
    assert {int(u["env_id"]) for u in h.unrolls} <= {2, 3, 4, 5}     # only the remote range
    assert h.service.stats()["streaming/live_leases"] == 0           # released when it stopped


def test_command_line_thin_actor_asks_for_env_ids(harness_factory):
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    h = harness_factory(num_train=2, num_eval=0, num_remote=4, unroll_length=4, overlap=0, obs_size=4,
                        num_actions=2)
    ok = subprocess.run([sys.executable, "-m", "muzero.actor", "--algo=vtrace", f"--server={h.address}",
                         "--env=cartpole", "--envs_per_actor=4", "--max_env_steps=40"],
                        capture_output=True, text=True, cwd=root, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "leased from the learner" in ok.stdout and "leased env ids 2..5" in ok.stdout
    assert {int(u["env_id"]) for u in h.unrolls} == {2, 3, 4, 5}
    too_many = subprocess.run([sys.executable, "-m", "muzero.actor", "--algo=vtrace", f"--server={h.address}",
                               "--env=cartpole", "--envs_per_actor=8", "--max_env_steps=40"],
                              capture_output=True, text=True, cwd=root, env=env, timeout=120)
    assert too_many.returncode == 2
    assert too_many.stderr.strip().splitlines()[-1] == (
        "error: num_envs=8 exceeds the learner's 4 remote env ids: start the learner with --remote_envs=8 or "
        "more, or give this actor --env_id_base for ids of the learner's own actors")


def test_remote_envs_checks():
    import dataclasses
    from muzero import algorithms
    from muzero.config import ConfigError
    vtrace, mz = algorithms.get("vtrace"), algorithms.get("muzero")
    base = vtrace.default_settings("cartpole")
    none = dataclasses.replace(base, num_actors=0, num_eval_actors=0)
    with pytest.raises(ConfigError, match=r"needs at least one training env .*or --remote_envs"):
        vtrace.check_settings(none)
    vtrace.check_settings(dataclasses.replace(none, remote_envs=64))
    algorithms.check_remote_envs(vtrace, dataclasses.replace(none, remote_envs=64))
    algorithms.check_remote_envs(mz, dataclasses.replace(mz.default_settings("cartpole"), remote_envs=8))
    with pytest.raises(ConfigError, match="remote_envs=-1"):
        dataclasses.replace(base, remote_envs=-1)
    with pytest.raises(ConfigError, match=r"remote_lease_s=4.9 is invalid: must be a number in \[5, 1e6\]"):
        dataclasses.replace(base, remote_lease_s=4.9)
    algorithms.check_remote_envs(vtrace, dataclasses.replace(base, remote_lease_s=5.0))
    with pytest.raises(ConfigError, match=r"--remote_lease_s=5: .*keeps for 300 s; --remote_lease_s is for the "
                                          r"step-streaming"):
        algorithms.check_remote_envs(mz, dataclasses.replace(mz.default_settings("cartpole"), remote_lease_s=5.0))


def test_a_training_lease_handed_on_drops_the_previous_holders_steps(harness_factory):
    # unroll_length 2, no overlap: unrolls of 3 steps. The first holder of remote ids 1, 2
    # (local training id 0 before them) sends 2 steps, releases, and a new holder gets the
    # same ids for training: its first unroll holds its own 3 observations only.
    h = harness_factory(num_train=1, num_remote=2, unroll_length=2, overlap=0)
    ids, lease = _register(h, 2, actor_id=1, run_id=5)
    for t in range(2):
        _leased_step(h, ids, lease, 5, [[100 + t, e] for e in ids])
    assert h.client.release_envs(lease)
    ids2, lease2 = _register(h, 2, actor_id=2, run_id=6)
    assert ids2 == ids == [1, 2]
    for t in range(3):
        _leased_step(h, ids2, lease2, 6, [[200 + t, e] for e in ids2])
    assert len(h.unrolls) == 2
    for u in h.unrolls:
        np.testing.assert_array_equal(u["observation"][:, 0], [200, 201, 202])
    assert h.service.stats()["streaming/abandoned_episodes"] == 2       # the first holder's episodes


def test_a_request_queued_behind_a_blocked_sink_fails_once_its_lease_has_ended(harness_factory):
    queue = UnrollQueue(capacity=1)
    h = harness_factory(num_train=0, num_remote=1, unroll_length=1, overlap=0, sink=queue.put)
    ids, lease = _register(h, 1, actor_id=1, run_id=5)
    _leased_step(h, ids, lease, 5, [[0, 0]])
    _leased_step(h, ids, lease, 5, [[1, 0]])                  # the first unroll: the queue is full
    results = {}

    def call(name, obs):
        try:
            results[name] = _leased_step(h, ids, lease, 5, [obs])
        except ServerError as e:
            results[name] = e
    blocked = threading.Thread(target=call, args=("blocked", [2, 0]))   # completes an unroll: waits in put
    blocked.start()
    time.sleep(0.5)
    queued = threading.Thread(target=call, args=("queued", [3, 0]))     # waits for the batch thread
    queued.start()
    time.sleep(0.5)
    assert not results
    assert h.client.release_envs(lease)                       # the lease ends meanwhile
    queue.get_batch(1, timeout=1)                             # the learner takes an unroll: put returns
    blocked.join(10)
    queued.join(10)
    assert results["blocked"].tolist() == [2 % 3]             # it ran before the lease ended
    error = results["queued"]
    assert isinstance(error, ServerError) and error.code == grpc.StatusCode.FAILED_PRECONDITION
    assert error.tag == "lease-released" and "ended while the request was queued" in str(error)


def test_a_leased_actor_stops_when_another_takes_its_actor_id(harness_factory):
    h = harness_factory(num_train=0, num_remote=4, unroll_length=4, overlap=0, obs_size=4, num_actions=2)
    stop = threading.Event()
    settings = StreamingActorSettings(server=h.address, env="cartpole", num_envs=2, env_id_base=None, actor_id=9,
                                      client_config=ClientConfig(connect_timeout_s=5))
    thread, errors = _actor_thread(settings, stop)
    deadline = time.monotonic() + 10
    while h.context.env_steps < 20:
        assert time.monotonic() < deadline and thread.is_alive(), errors
        time.sleep(0.05)
    (lease,) = list(h.service.leases._leases.values())
    h.service.leases.register(9, lease.run_id, 2, 1)          # the same actor id and run: supersedes at once
    thread.join(10)
    stop.set()
    assert len(errors) == 1 and isinstance(errors[0], ValueError)
    assert str(errors[0]) == ("another actor registered with --actor_id=9 and took this actor's env ids: give "
                              "each actor a distinct --actor_id")
