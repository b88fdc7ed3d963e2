"""The generic batching server: deadline flush, full batches, errors, stats, config checks."""
import threading
import time

import grpc
import numpy as np
import pytest

from muzero.config import ConfigError
from muzero.rpc import wire
from muzero.algorithms.muzero.config import CacheServiceConfig
from muzero.rpc.config import ClientConfig, ServerConfig, is_loopback
from muzero.rpc.server import SERVICE, BatchingServer, Prepared, RequestError


def _prepare(t, context):
    x = t["x"]
    if x.dtype != np.int64 or x.ndim != 1:
        raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, "x must be an int64 vector")
    return Prepared(len(x), {"x": x})


def _run_double(batch):
    if (batch.inputs["x"] == 13).any():
        raise RuntimeError("unlucky 13")
    return {"y": batch.inputs["x"] * 2}


def _start(max_batch, max_wait_ms, ready=None):
    server = BatchingServer(ServerConfig())
    server.bind_batched("double", _prepare, _run_double, max_batch, max_wait_ms, ready)
    server.bind_unary("echo", lambda t, c: dict(t))
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}",
                                    [("grpc.max_receive_message_length", 64 * 2**20)])
    return server, channel


def _call(channel, method, tensors, timeout=10):
    stub = channel.unary_unary(f"/{SERVICE}/{method}")
    return wire.decode(stub(wire.encode(tensors), timeout=timeout))


def test_lone_request_is_flushed_at_the_deadline():
    server, channel = _start(max_batch=1000, max_wait_ms=60)
    try:
        t0 = time.monotonic()
        out = _call(channel, "double", {"x": np.array([1, 2, 3], np.int64)})
        elapsed = time.monotonic() - t0
        assert out["y"].tolist() == [2, 4, 6]
        # Waited for company until the 60 ms deadline, then ran alone (no full batch needed).
        assert 0.05 <= elapsed < 3.0
        stats = server.stats()
        assert stats["double/batches"] == 1 and stats["double/rows"] == 3
        assert stats["double/queue_ms_p50"] >= 50
        # 3 rows fall in the "<= 4" bucket: edges are 1, 2, 4, ...
        assert stats["double/batch_rows_hist"].tolist()[:4] == [0, 0, 1, 0]
        assert stats["server/batch_rows_hist_edges"].tolist()[:4] == [1, 2, 4, 8]
    finally:
        channel.close()
        server.stop()


def test_full_batch_closes_without_waiting_for_the_deadline():
    server, channel = _start(max_batch=4, max_wait_ms=20_000)
    try:
        results = {}

        def call(name, x):
            results[name] = _call(channel, "double", {"x": np.array(x, np.int64)})["y"].tolist()

        threads = [threading.Thread(target=call, args=(n, x)) for n, x in (("a", [1, 2]), ("b", [5, 6]))]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        assert time.monotonic() - t0 < 10  # far below the 20 s deadline
        assert results == {"a": [2, 4], "b": [10, 12]}
        stats = server.stats()
        assert stats["double/batches"] == 1 and stats["double/max_batch_requests"] == 2
    finally:
        channel.close()
        server.stop()


def test_ready_callback_closes_early():
    server, channel = _start(max_batch=1000, max_wait_ms=20_000, ready=lambda n: n >= 1)
    try:
        t0 = time.monotonic()
        assert _call(channel, "double", {"x": np.array([4], np.int64)})["y"].tolist() == [8]
        assert time.monotonic() - t0 < 10
    finally:
        channel.close()
        server.stop()


def test_errors_answer_one_call_and_the_server_keeps_serving():
    server, channel = _start(max_batch=8, max_wait_ms=1)
    try:
        with pytest.raises(grpc.RpcError) as e:
            _call(channel, "double", {"x": np.zeros(9, np.int64)})
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "max_batch 8" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            _call(channel, "double", {"x": np.zeros(2, np.float32)})
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "int64" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            _call(channel, "double", {"x": np.array([13], np.int64)})
        assert e.value.code() == grpc.StatusCode.INTERNAL and "unlucky 13" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            channel.unary_unary(f"/{SERVICE}/double")(b"garbage-garbage", timeout=5)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "magic" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            channel.unary_unary(f"/{SERVICE}/no_such_method")(b"", timeout=5)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert _call(channel, "double", {"x": np.array([7], np.int64)})["y"].tolist() == [14]
        stats = server.stats(reset=True)
        assert stats["errors/INVALID_ARGUMENT"] == 3 and stats["errors/INTERNAL"] == 1
        assert "errors/INVALID_ARGUMENT" not in server.stats()
    finally:
        channel.close()
        server.stop()


def test_message_limit_is_raised_above_grpc_default_and_enforced():
    server, channel = _start(max_batch=10, max_wait_ms=1)
    try:
        big = np.zeros(5 * 2**20, np.uint8)  # 5 MiB: over gRPC's 4 MiB default
        assert _call(channel, "echo", {"big": big})["big"].nbytes == big.nbytes
    finally:
        channel.close()
        server.stop()
    small = BatchingServer(ServerConfig(max_message_bytes=2**20))
    small.bind_unary("echo", lambda t, c: dict(t))
    small.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{small.port}")
    try:
        with pytest.raises(grpc.RpcError) as e:
            _call(channel, "echo", {"big": np.zeros(2**20 + 100, np.uint8)})
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _call(channel, "echo", {"ok": np.int8(1)})["ok"] == 1
    finally:
        channel.close()
        small.stop()


@pytest.mark.parametrize("cls, kwargs, field", [
    (ServerConfig, {"port": 70000}, "port"),
    (ServerConfig, {"max_message_bytes": 1000}, "max_message_bytes"),
    (CacheServiceConfig, {"recurrent_max_batch": 0}, "recurrent_max_batch"),
    (CacheServiceConfig, {"initial_max_wait_ms": -1.0}, "initial_max_wait_ms"),
    (CacheServiceConfig, {"cache_slots": 0}, "cache_slots"),
    (CacheServiceConfig, {"max_nodes": 1}, "max_nodes"),
    (CacheServiceConfig, {"lease_timeout_s": 0.0}, "lease_timeout_s"),
    (ServerConfig, {"tls_cert_file": "c.pem"}, "tls_key_file"),
])
def test_server_config_names_the_bad_field(cls, kwargs, field):
    with pytest.raises(ConfigError, match=f"{cls.__name__}.{field}="):
        cls(**kwargs)


def test_client_config_names_the_bad_field():
    with pytest.raises(ConfigError, match="backoff_max_s"):
        ClientConfig(backoff_initial_s=2.0, backoff_max_s=1.0)
    with pytest.raises(ConfigError, match=r"call_timeout_s=0 .*\(0.0, "):
        ClientConfig(call_timeout_s=0)


def test_loopback_detection():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.3.2.1", "localhost", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "10.0.0.1", "example.com", "::", ""))
