"""MuZero methods end to end through InferenceClient, with the hand-checkable ToyModel.

ToyModel (muzero/rpc/testing.py): root h = obs; each action a gives h' = 2h + a and
reward a; value = h0 + h1; logits = [h0, h1, h0 - h1]. Expected numbers below are
worked out by hand from those formulas.
"""
import threading
import time

import grpc
import numpy as np
import pytest

from muzero.rpc import wire
from muzero.algorithms.muzero.client import InferenceClient
from muzero.rpc.client import LeaseLostError, ServerError
from muzero.algorithms.muzero.config import CacheServiceConfig
from muzero.rpc.config import ClientConfig, ServerConfig
from muzero.algorithms.muzero.latent_cache import NumpyLatentCache
from muzero.algorithms.muzero.service import InMemoryLearnerHandlers, serve
from muzero.rpc.server import SERVICE
from muzero.rpc.testing import ToyModel, toy_path

FAST = ClientConfig(connect_timeout_s=5, call_timeout_s=10, retry_timeout_s=10,
                    backoff_initial_s=0.02, backoff_max_s=0.2)
OBS = np.array([[1, 5], [0, 1]], np.float32)


def _server(port=0, **overrides):
    cfg = dict(cache_slots=8, max_nodes=6, initial_max_wait_ms=1, recurrent_max_wait_ms=1,
               recurrent_max_batch=16, initial_max_batch=16)
    cfg.update(overrides)
    handlers = InMemoryLearnerHandlers()
    server, service = serve(ToyModel(), CacheServiceConfig(**cfg), server_config=ServerConfig(port=port),
                            push_segments_handler=handlers.push_segments,
                            learner_info_handler=handlers.learner_info)
    return server, service, handlers


@pytest.fixture
def env():
    server, service, handlers = _server()
    clients = []

    def client(**kw):
        c = InferenceClient(f"127.0.0.1:{server.port}", config=kw.pop("config", FAST), **kw)
        clients.append(c)
        return c

    yield server, service, handlers, client
    for c in clients:
        c.close()
    server.stop()


def test_cache_mode_matches_hand_computed_values(env):
    server, service, _, client = env
    c = client(actor_id=1)
    info = c.register(num_envs=2, num_nodes=4)
    assert info["num_actions"] == 3 and info["hidden_shape"].tolist() == [2]
    root = c.initial_inference(OBS)
    # env 0: obs [1, 5] -> value 6, logits [1, 5, -4]; env 1: obs [0, 1] -> value 1.
    assert root["value"].tolist() == [6, 1]
    assert root["policy_logits"].tolist() == [[1, 5, -4], [0, 1, -1]]
    assert root["weights_version"] == 0
    # node 1 = root + action 2 (env 0) / action 0 (env 1)
    reward, value, logits = c.recurrent_fn(np.array([0, 0], np.int32), np.array([2, 0], np.int32),
                                           np.array([1, 1], np.int32))
    assert reward.tolist() == [2, 0] and value.tolist() == [16, 2]   # [4, 12]; [0, 2]
    assert logits.tolist() == [[4, 12, -8], [0, 2, -2]]
    # node 2 = node 1 + action 1 (env 0); node 2 = root + action 1 (env 1)
    reward, value, logits = c.recurrent_inference([1, 0], [1, 1], [2, 2])
    assert reward.tolist() == [1, 1] and value.tolist() == [34, 4]   # [9, 25]; [1, 3]
    assert logits.tolist() == [[9, 25, -16], [1, 3, -2]]
    assert toy_path([1, 5], [2, 1])[2] == 34
    # Only ids and actions went out, a few floats per leaf came back: 3 int32 in,
    # 5 float32 out per leaf plus framing, far below a shipped hidden state.
    assert isinstance(service.cache, NumpyLatentCache)


def test_slot_subsets_and_async_second_call(env):
    _, _, _, client = env
    c = client(actor_id=2)
    c.register(num_envs=2, num_nodes=4)
    c.initial_inference(OBS[::-1].copy())          # env 0 obs [0, 1]; env 1 obs [1, 5]
    c.initial_inference(OBS[:1], slots=[1])        # env 1 root rewritten with [1, 5]
    first = c.recurrent_inference_async([0], [2], [1], slots=[1])
    second = c.recurrent_inference_async([0], [1], [1], slots=[0])
    assert first.result()[1].tolist() == [16]      # [1,5] -a2-> [4, 12]
    assert second.result()[1].tolist() == [4]      # [0,1] -a1-> [1, 3]


def test_ship_mode_equals_cache_mode(env):
    _, _, _, client = env
    cache, ship = client(actor_id=3), client(actor_id=4, mode="ship")
    for c in (cache, ship):
        c.register(num_envs=2, num_nodes=4)
    outs = []
    for c in (cache, ship):
        c.initial_inference(OBS)
        c.recurrent_inference([0, 0], [2, 0], [1, 1])
        outs.append(c.recurrent_inference([1, 1], [1, 2], [2, 3]))
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
    assert outs[1][1].tolist() == [34, 8]   # env 1: [0,1] -a0-> [0,2] -a2-> [2,6]
    assert ship._hidden.shape == (2, 4, 2)


def test_tensorflow_model_uses_a_variable_cache():
    tf = pytest.importorskip("tensorflow")
    from muzero.rpc.testing import toy_tf_model

    server, service = serve(toy_tf_model(), CacheServiceConfig(cache_slots=4, max_nodes=4))
    try:
        assert isinstance(service.cache.variable, tf.Variable)
        with InferenceClient(f"127.0.0.1:{server.port}", config=FAST) as c:
            c.register(2, 4)
            assert c.initial_inference(OBS)["value"].tolist() == [6, 1]
            c.recurrent_inference([0, 0], [2, 0], [1, 1])
            reward, value, logits = c.recurrent_inference([1, 0], [1, 1], [2, 2])
            assert value.tolist() == [34, 4] and reward.tolist() == [1, 1]
            assert logits.tolist() == [[9, 25, -16], [1, 3, -2]]
    finally:
        server.stop()


def test_cache_isolation_between_two_actors(env):
    _, _, _, client = env
    a, b = client(actor_id=10), client(actor_id=11)
    a.register(2, 4)
    b.register(2, 4)
    a.initial_inference(np.array([[1, 1], [2, 2]], np.float32))
    b.initial_inference(np.array([[100, 0], [0, 100]], np.float32))
    # Same slot indices and node ids for both actors: each sees only its own trees.
    ra = a.recurrent_inference([0, 0], [1, 1], [1, 1])
    rb = b.recurrent_inference([0, 0], [1, 1], [1, 1])
    assert ra[1].tolist() == [6, 10]       # [3, 3], [5, 5]
    assert rb[1].tolist() == [202, 202]    # [201, 1], [1, 201]
    # An actor cannot address slots beyond its lease.
    with pytest.raises(ServerError) as e:
        a.recurrent_inference([0], [0], [1], slots=[2])
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "slots" in e.value.details


def test_new_run_id_frees_the_old_slots():
    # One lease may take the whole cache here; a new run takes the lease over once the old
    # one has idled supersede_idle_s (the client retries the UNAVAILABLE answer until then).
    server, service, _ = _server(cache_slots=4, max_lease_slots_fraction=1.0, supersede_idle_s=0.3)
    try:
        addr = f"127.0.0.1:{server.port}"
        old = InferenceClient(addr, actor_id=7, run_id=1, config=FAST)
        old.register(4, 4)
        assert service.leases.free_slots == 0
        new = InferenceClient(addr, actor_id=7, run_id=2, config=FAST)
        new.register(4, 4)   # fits only because the old run's 4 slots were released
        assert service.leases.num_active == 1
        with pytest.raises(LeaseLostError) as e:
            old.initial_inference(np.zeros((4, 2), np.float32))
        assert e.value.tag == "lease-superseded"
        assert new.initial_inference(np.ones((4, 2), np.float32))["value"].tolist() == [2] * 4
        other = InferenceClient(addr, actor_id=8, config=FAST)
        with pytest.raises(ServerError) as e:
            other.register(1, 4)
        assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        for c in (old, new, other):
            c.close()
    finally:
        server.stop()


def test_silent_leases_are_reclaimed_and_the_client_recovers():
    server, service, _ = _server(cache_slots=2, lease_timeout_s=0.5, max_lease_slots_fraction=1.0)
    try:
        addr = f"127.0.0.1:{server.port}"
        a = InferenceClient(addr, actor_id=1, config=FAST)
        a.register(2, 4)
        a.initial_inference(OBS)
        a.recurrent_inference([0, 0], [2, 0], [1, 1])
        time.sleep(0.7)
        # Expired: the client re-registers, replays its search journal and continues.
        assert a.recurrent_inference([1, 0], [1, 1], [2, 2])[1].tolist() == [34, 4]
        assert a.reregistrations >= 1
        time.sleep(0.7)
        b = InferenceClient(addr, actor_id=2, config=FAST)
        b.register(2, 4)   # a's silent lease is reclaimed to make room
        with pytest.raises(ServerError) as e:
            a.recurrent_inference([0, 0], [0, 0], [3, 3])
        assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        b.close()
        a.close()
    finally:
        server.stop()


def test_client_reconnects_after_server_restart():
    server, _, _ = _server()
    port = server.port
    c = InferenceClient(f"127.0.0.1:{port}", actor_id=5, config=FAST)
    c.register(2, 4)
    c.initial_inference(OBS)
    c.recurrent_inference([0, 0], [2, 0], [1, 1])
    server.stop()
    restarted = {}

    def restart():
        time.sleep(0.4)
        restarted["server"] = _server(port=port)[0]

    thread = threading.Thread(target=restart)
    thread.start()
    try:
        # UNAVAILABLE is retried with back-off; the new server does not know the lease,
        # so the client registers again and replays the search (node 1) first.
        reward, value, _ = c.recurrent_inference([1, 0], [1, 1], [2, 2])
        assert value.tolist() == [34, 4] and reward.tolist() == [1, 1]
        assert c.reregistrations == 1
        c.close()
    finally:
        thread.join()
        restarted["server"].stop()


def test_unavailable_server_fails_after_retry_timeout():
    server, _, _ = _server()
    c = InferenceClient(f"127.0.0.1:{server.port}", actor_id=6,
                        config=ClientConfig(retry_timeout_s=0.3, backoff_initial_s=0.05,
                                            backoff_max_s=0.1))
    c.register(2, 4)
    server.stop()
    t0 = time.monotonic()
    with pytest.raises(ServerError) as e:
        c.initial_inference(OBS)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE and time.monotonic() - t0 < 5
    c._channel.close()


def test_connect_timeout_names_the_address():
    with pytest.raises(ConnectionError, match="127.0.0.1:9"):
        InferenceClient("127.0.0.1:9", config=ClientConfig(connect_timeout_s=0.2))


def test_push_segments_and_learner_info(env):
    _, service, handlers, client = env
    c = client(actor_id=9)
    seg = {"observations": np.arange(3 * 4, dtype=np.uint8).reshape(3, 2, 2),
           "actions": np.array([0, 2, 1], np.int32), "rewards": np.array([0, 1, 0.5], np.float32),
           "root_values": np.zeros(3, np.float32), "policies": np.full((3, 3), 1 / 3, np.float32),
           "to_play": np.array([0, 1, 0], np.int8), "episode_id": np.int64(42),
           "start": np.int64(0), "terminated": np.bool_(True), "truncated": np.bool_(False)}
    assert c.push_segments([seg, dict(seg, episode_id=np.int64(43))]) == {
        "accepted": 2, "segments_received": 2}
    stored = handlers.segments
    for key, value in seg.items():
        assert stored[0][key].dtype == np.asarray(value).dtype
        np.testing.assert_array_equal(stored[0][key], value)
    assert int(stored[1]["episode_id"]) == 43 and stored[0]["terminated"].shape == ()
    handlers.training_step = 17
    service.set_weights_version(3)
    assert c.learner_info() == {"training_step": 17, "segments_received": 2,
                                "steps_received": 6, "weights_version": 3}


def test_weights_hook_runs_between_batches(env):
    _, service, _, client = env
    c = client(actor_id=12)
    c.register(2, 4)
    # While the learner holds model_lock, no batch runs.
    service.model_lock.acquire()
    try:
        pending = c.recurrent_inference_async([0, 0], [0, 0], [1, 1])
        time.sleep(0.2)
        assert not pending._future.done()
    finally:
        service.model_lock.release()
    pending.result()

    def halve_outputs(model):
        original = model.initial_inference
        model.initial_inference = lambda obs: original(np.asarray(obs) / 2)

    assert service.update_model(halve_outputs) == 1
    out = c.initial_inference(OBS)
    assert out["weights_version"] == 1 and out["value"].tolist() == [3, 0.5]
    assert service.update_model(model=ToyModel(), version=10) == 10
    out = c.initial_inference(OBS)
    assert out["weights_version"] == 10 and out["value"].tolist() == [6, 1]


def test_server_stats_report_batches(env):
    _, service, _, client = env
    c = client(actor_id=13)
    c.register(2, 4)
    c.initial_inference(OBS)
    c.recurrent_inference([0, 0], [0, 0], [1, 1])
    stats = c.server_stats()
    assert stats["recurrent_inference/batches"] == 1 and stats["recurrent_inference/rows"] == 2
    assert stats["initial_inference/mean_batch_rows"] == 2.0
    assert stats["cache/live_leases"] == 1 and stats["cache/free_slots"] == 6
    assert service.stats()["model/weights_version"] == 0


def _call(port, method, tensors):
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        return wire.decode(ch.unary_unary(f"/{SERVICE}/{method}")(wire.encode(tensors), timeout=5))


def _bad(port, method, tensors):
    with pytest.raises(grpc.RpcError) as e:
        _call(port, method, tensors)
    return e.value.code(), e.value.details()


I32 = np.int32


@pytest.mark.parametrize("change, code, field", [
    ({"parent_node": np.zeros(2, np.int64)}, "INVALID_ARGUMENT", "parent_node"),
    ({"action": np.zeros(2, np.float32)}, "INVALID_ARGUMENT", "action"),
    ({"new_node": np.ones(3, I32)}, "INVALID_ARGUMENT", "new_node"),
    ({"parent_node": np.zeros((2, 1), I32)}, "INVALID_ARGUMENT", "parent_node"),
    ({"parent_node": np.zeros(3, I32), "action": np.zeros(3, I32), "new_node": np.ones(3, I32)},
     "INVALID_ARGUMENT", "num_envs"),
    ({"parent_node": np.zeros(0, I32)}, "INVALID_ARGUMENT", "batch size"),
    ({"parent_node": np.zeros(17, I32)}, "INVALID_ARGUMENT", "batch size"),
    ({"parent_node": np.array([0, 4], I32)}, "INVALID_ARGUMENT", "parent_node holds 4"),
    ({"parent_node": np.array([-1, 0], I32)}, "INVALID_ARGUMENT", "parent_node holds -1"),
    ({"new_node": np.array([0, 1], I32)}, "INVALID_ARGUMENT", "new_node holds 0"),
    ({"action": np.array([0, 3], I32)}, "INVALID_ARGUMENT", "action holds 3"),
    ({"slots": np.array([0, 2], I32)}, "INVALID_ARGUMENT", "slots holds 2"),
    ({"slots": np.array([1, 1], I32)}, "INVALID_ARGUMENT", "slots must not repeat"),
    ({"slots": np.array([0, 1], np.int64)}, "INVALID_ARGUMENT", "slots"),
    ({"lease": np.int64(12345)}, "FAILED_PRECONDITION", "lease=12345"),
    ({"lease": np.zeros(1, np.int64)}, "INVALID_ARGUMENT", "lease"),
    ({"lease": None}, "INVALID_ARGUMENT", "lease"),
    ({"action": None}, "INVALID_ARGUMENT", "action"),
    ({"extra": np.int8(0)}, "INVALID_ARGUMENT", "extra"),
])
def test_recurrent_validation_names_the_field(env, change, code, field):
    server, _, _, client = env
    c = client(actor_id=20)
    c.register(2, 4)
    request = {"lease": np.int64(c._lease), "parent_node": np.zeros(2, I32),
               "action": np.zeros(2, I32), "new_node": np.ones(2, I32)}
    request.update(change)
    request = {k: v for k, v in request.items() if v is not None}
    got_code, details = _bad(server.port, "recurrent_inference", request)
    assert got_code.name == code and field in details, details
    # Still serving. Roots were never written, so h = [0, 0]: actions 1, 2 give [1, 1], [2, 2].
    assert c.recurrent_inference([0, 0], [1, 2], [1, 1])[1].tolist() == [2, 4]


@pytest.mark.parametrize("method, request_, field", [
    ("initial_inference", {"observation": np.zeros((2, 2), np.float64)}, "observation"),
    ("initial_inference", {"observation": np.zeros((2, 3), np.float32)}, "observation"),
    ("initial_inference", {"observation": np.zeros((), np.float32)}, "observation"),
    ("register", {"actor_id": np.float32(1), "run_id": 1, "num_envs": 1, "num_nodes": 4}, "actor_id"),
    ("register", {"actor_id": 1, "run_id": 1, "num_envs": 0, "num_nodes": 4}, "num_envs"),
    ("register", {"actor_id": 1, "run_id": 1, "num_envs": 9, "num_nodes": 4}, "num_envs"),
    ("register", {"actor_id": 1, "run_id": 1, "num_envs": 1, "num_nodes": 7}, "num_nodes"),
    ("recurrent_inference_ship", {"hidden_state": np.zeros((2, 3), np.float32),
                                  "action": np.zeros(2, I32)}, "hidden_state"),
    ("recurrent_inference_ship", {"hidden_state": np.zeros((2, 2), np.float32),
                                  "action": np.full(2, 5, I32)}, "action"),
    ("push_segments", {"observations": np.zeros(2)}, "'<segment index>/<field>'"),
    ("push_segments", {"1/actions": np.zeros(2)}, "0..n-1"),
    ("learner_info", {"x": np.int8(1)}, "x"),
])
def test_other_methods_validate(env, method, request_, field):
    server, _, _, client = env
    c = client(actor_id=21)
    c.register(2, 4)
    if method == "initial_inference":
        request_ = dict(request_, lease=np.int64(c._lease))
    got_code, details = _bad(server.port, method, request_)
    assert got_code == grpc.StatusCode.INVALID_ARGUMENT and field in details, details


# -- lease rules: who may end a live lease, how many slots one lease may take -------------------

class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _table(**kw):
    from muzero.rpc.leases import LeaseTable
    clock = _Clock()
    kw.setdefault("supersede_idle_s", 3.0)
    return LeaseTable(8, 4, 300.0, clock, **kw), clock


def test_register_of_another_run_is_refused_while_the_lease_is_used():
    from muzero.rpc.server import RequestError
    table, clock = _table()
    lease = table.register(actor_id=0, run_id=1, num_envs=2, num_nodes=4)
    clock.now += 1.0
    with pytest.raises(RequestError) as e:
        table.register(actor_id=0, run_id=666, num_envs=2, num_nodes=4)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert "actor_id=0" in e.value.message and "used 1.0 s ago" in e.value.message
    assert "retry in 2.0 s" in e.value.message
    # Nothing changed: the old lease is live and still the actor's.
    assert table.get(lease.lease_id) is lease and lease.alive
    assert table.num_active == 1 and table.free_slots == 6
    clock.now += 2.9                       # used 2.9 s ago by the get above: still refused
    with pytest.raises(RequestError):
        table.register(0, 666, 2, 4)
    clock.now += 3.0                       # idle 3.0 s: a new run takes over
    new = table.register(0, 666, 2, 4)
    assert not lease.alive and table.ended_reason(lease.lease_id) == "lease-superseded"
    assert table.num_active == 1 and table.get(new.lease_id) is new


def test_same_run_re_registers_at_once():
    table, clock = _table()
    lease = table.register(5, run_id=42, num_envs=3, num_nodes=4)
    clock.now += 0.01
    again = table.register(5, run_id=42, num_envs=3, num_nodes=4)
    assert not lease.alive and again.alive and table.free_slots == 5
    # Other actor ids are independent.
    table.register(6, run_id=7, num_envs=1, num_nodes=4)
    assert table.num_active == 2


def test_refused_registers_change_nothing():
    from muzero.rpc.server import RequestError
    table, clock = _table(max_lease_slots=4)
    a = table.register(1, 1, 4, 4)
    b = table.register(2, 2, 2, 4)
    table.register(3, 3, 1, 4)                     # 1 slot left
    clock.now += 10
    # b's actor re-registers asking for more than the free slots plus its own: refused,
    # and its old lease survives.
    with pytest.raises(RequestError) as e:
        table.register(2, 2, 4, 4)
    assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and b.alive and a.alive
    assert "3 free cache slots" in e.value.message
    assert table.register(2, 2, 3, 4).num_envs == 3 and not b.alive   # 2 own + 1 free
    with pytest.raises(RequestError) as e:
        table.register(4, 4, 5, 4)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "num_envs=5" in e.value.message and "[1, 4]" in e.value.message
    assert table.num_active == 3 and table.free_slots == 0


def test_slots_kept_for_the_learners_own_actors_are_not_free_to_others():
    from muzero.rpc.server import RequestError
    table, clock = _table(full_hint="start the learner with --remote_envs=N")
    table.reserve({0: 3, 1: 2})            # the learner's actors 0 and 1: 5 of the 8 slots
    remote = table.register(100, 1, 3, 4)  # the 3 slots no one keeps
    with pytest.raises(RequestError) as e:
        table.register(101, 2, 1, 4)
    assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert e.value.message == ("register: num_envs=1 exceeds the 0 free cache slots (cache_slots=8, 1 live leases, "
                               "5 kept for the learner's own actors): start the learner with --remote_envs=N")
    own = table.register(0, 7, 3, 4)       # actor 0 gets its 3 although only 5 are free
    assert own.num_envs == 3 and table.free_slots == 2
    with pytest.raises(RequestError, match="2 kept"):   # actor 1's 2 are still kept
        table.register(101, 2, 1, 4)
    assert table.register(1, 8, 2, 4).num_envs == 2 and table.free_slots == 0
    table.release(remote.lease_id)         # freed slots are anyone's again
    assert table.register(101, 2, 3, 4).num_envs == 3
    with pytest.raises(ValueError, match="reserving 9 of 8"):
        table.reserve({0: 9})


def test_one_lease_takes_at_most_half_the_cache(env):
    server, service, _, client = env               # cache_slots=8
    port = server.port
    info = _call(port, "model_info", {})
    assert int(info["max_envs"]) == 4
    code, details = _bad(port, "register", {"actor_id": np.int64(30), "run_id": np.int64(1),
                                            "num_envs": np.int64(5), "num_nodes": np.int64(4)})
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "num_envs=5" in details and "max_envs=4" in details and "cache_slots=8" in details
    c = client(actor_id=30)
    assert c.register(4, 4)["max_envs"] == 4
    assert service.leases.free_slots == 4
    with pytest.raises(config_error()):
        CacheServiceConfig(max_lease_slots_fraction=0.0)
    with pytest.raises(config_error()):
        CacheServiceConfig(max_lease_slots_fraction=1.5)
    with pytest.raises(config_error()):
        CacheServiceConfig(supersede_idle_s=-1.0)
    assert CacheServiceConfig().supersede_idle_s == 3.0
    assert CacheServiceConfig().max_lease_slots_fraction == 0.5


def config_error():
    from muzero.config import ConfigError
    return ConfigError


def test_hostile_register_leaves_the_lease_working_and_a_restart_still_works():
    server, service, _ = _server(supersede_idle_s=0.4)
    try:
        addr = f"127.0.0.1:{server.port}"
        actor = InferenceClient(addr, actor_id=0, config=FAST)
        actor.register(2, 4)
        actor.initial_inference(OBS)
        # Another local process names the same actor id with any run id while the lease
        # is in use: refused, nothing changes.
        code, details = _bad(server.port, "register", {
            "actor_id": np.int64(0), "run_id": np.int64(12345), "num_envs": np.int64(2),
            "num_nodes": np.int64(4)})
        assert code == grpc.StatusCode.UNAVAILABLE
        assert "actor_id=0 holds a lease" in details and "retry in" in details
        assert actor.recurrent_inference([0, 0], [2, 0], [1, 1])[1].tolist() == [16, 2]
        assert service.leases.num_active == 1 and actor.reregistrations == 0
        # The actor "restarts": a new process, same actor id, new run id. Its register is
        # retried (UNAVAILABLE) until the dead predecessor's lease has idled 0.4 s.
        t0 = time.monotonic()
        restarted = InferenceClient(addr, actor_id=0, config=FAST)
        restarted.register(2, 4)
        assert 0.2 < time.monotonic() - t0 < 5
        assert restarted.initial_inference(OBS)["value"].tolist() == [6, 1]
        with pytest.raises(LeaseLostError) as e:
            actor.recurrent_inference([1, 0], [1, 1], [2, 2])
        assert e.value.tag == "lease-superseded"
        assert service.leases.num_active == 1
        restarted.close()
        actor._channel.close()
    finally:
        server.stop()


def test_non_finite_observations_are_refused_naming_the_field():
    server, service, _ = _server()
    try:
        client = InferenceClient(f"127.0.0.1:{server.port}", actor_id=3, config=FAST)
        client.register(2, 4)
        bad = np.array([[0.0, np.nan], [1.0, 1.0]], np.float32)
        with pytest.raises(ServerError) as e:
            client.initial_inference(bad)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "observation holds a non-finite value" in e.value.details
        assert client.initial_inference(np.ones((2, 2), np.float32))["value"].tolist() == [2, 2]  # still serving
        client.close()
    finally:
        server.stop()
