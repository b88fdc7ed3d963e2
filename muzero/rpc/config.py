"""Typed settings of the inference server and its client.

``ServerConfig`` covers the transport (binding and security, message limits, worker
threads); ``CacheServiceConfig`` covers the latent-cache service (maximum batch size in
rows and maximum wait in milliseconds per method, cache slots and nodes, leases);
``ClientConfig`` covers timeouts, retry back-off and credentials. Both are
frozen dataclasses validated in ``__post_init__``; a bad value raises
``muzero.config.ConfigError`` naming the field, the value and the accepted range.

Security rule: the server binds 127.0.0.1 by default. Any other address needs
TLS (certificate and key files) and an auth token file, or the config is refused.

This module imports only the standard library and ``muzero.config``.
"""
from __future__ import annotations

import dataclasses
import ipaddress
from typing import Optional

from muzero.config import ConfigError
from muzero.config import check_float as _num
from muzero.config import check_int as _int

_LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """True for 'localhost', 127.0.0.0/8 and ::1 (brackets allowed)."""
    host = host.strip()
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _fail(obj, field: str, allowed: str):
    raise ConfigError(f"{type(obj).__name__}.{field}={getattr(obj, field)!r} is invalid: {allowed}")


def _opt_str(obj, field: str) -> None:
    v = getattr(obj, field)
    if v is not None and (not isinstance(v, str) or not v):
        _fail(obj, field, "must be None or a non-empty path string")


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """Transport settings of ``muzero.rpc.server.BatchingServer``: where it binds, TLS and
    token, message limits, worker threads. What a service batches and caches is that
    service's own config (``CacheServiceConfig`` for MuZero's latent-cache service)."""

    # Interface to bind. Anything but loopback requires TLS and a token file.
    host: str = "127.0.0.1"
    # 0 lets the operating system pick a free port (read it from server.port).
    port: int = 0
    tls_cert_file: Optional[str] = None
    tls_key_file: Optional[str] = None
    # A file holding one line, the shared secret clients send as
    # "authorization: Bearer <token>" metadata. Optional on loopback.
    auth_token_file: Optional[str] = None
    # gRPC send/receive limit per message (gRPC's own default is 4 MiB).
    max_message_bytes: int = 256 * 2**20
    # Most named tensors one message may carry (push_segments uses many).
    max_tensors: int = 4096
    # gRPC worker threads; every call waiting for its batch holds one, so this must
    # exceed the number of calls in flight across all actors.
    max_workers: int = 64

    def __post_init__(self):
        if not isinstance(self.host, str) or not self.host.strip():
            _fail(self, "host", "must be a non-empty host name or IP address")
        _int(self, "port", 0, 65535)
        for name in ("tls_cert_file", "tls_key_file", "auth_token_file"):
            _opt_str(self, name)
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            missing = "tls_key_file" if self.tls_key_file is None else "tls_cert_file"
            _fail(self, missing, "tls_cert_file and tls_key_file must be given together")
        if not is_loopback(self.host):
            missing = [n for n in ("tls_cert_file", "tls_key_file", "auth_token_file")
                       if getattr(self, n) is None]
            if missing:
                raise ConfigError(
                    f"ServerConfig.host={self.host!r} is not a loopback address; binding it "
                    f"requires TLS and an auth token, missing: {', '.join(missing)}")
        _int(self, "max_message_bytes", 2**20, 2**31 - 1)
        _int(self, "max_tensors", 8, 1_000_000)
        _int(self, "max_workers", 2, 4096)

    @property
    def secure(self) -> bool:
        return self.tls_cert_file is not None

    @property
    def bind_address(self) -> str:
        host = self.host.strip()
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{host}:{self.port}"


@dataclasses.dataclass(frozen=True)
class CacheServiceConfig:
    """Settings of the latent-cache inference service (MuZero's ``MuZeroService``): how its
    two inference methods batch and how large its cache of hidden states is."""

    # Batching: a batch closes when it holds max_batch rows (leaves / envs) or when
    # max_wait_ms has passed since its first request arrived, whichever is first.
    initial_max_batch: int = 1024
    initial_max_wait_ms: float = 2.0
    recurrent_max_batch: int = 4096
    recurrent_max_wait_ms: float = 2.0
    # Also close a cache-mode batch as soon as it holds one request per live lease
    # (no further actor can be waiting to join it).
    close_when_all_leases_waiting: bool = True
    # Latent cache: slots (one per actor env) x nodes per slot (num_simulations + 1).
    cache_slots: int = 1024
    max_nodes: int = 51
    # Leases of actors silent this long are reclaimed.
    lease_timeout_s: float = 300.0
    # A register naming an actor_id that holds a live lease ends that lease only when it
    # comes from the same run_id (the same run re-registering, e.g. after a server
    # restart) or when the old lease has been unused this long (a restarted actor's
    # predecessor is dead, so its lease is idle); otherwise it is answered UNAVAILABLE
    # (clients retry with back-off) and the live lease keeps working. Without this, any
    # process that can reach the server could end an active actor's lease.
    supersede_idle_s: float = 3.0
    # Most cache slots one lease may take, as a fraction of cache_slots (at least one
    # slot); register asks with a larger num_envs are refused (INVALID_ARGUMENT).
    # model_info and register report the resulting max_envs.
    max_lease_slots_fraction: float = 0.5
    # TensorFlow device of the latent cache (None: TensorFlow's default placement).
    device: Optional[str] = None

    def __post_init__(self):
        _int(self, "initial_max_batch", 1, 2**20)
        _num(self, "initial_max_wait_ms", 0.0, 60_000.0)
        _int(self, "recurrent_max_batch", 1, 2**20)
        _num(self, "recurrent_max_wait_ms", 0.0, 60_000.0)
        if not isinstance(self.close_when_all_leases_waiting, bool):
            _fail(self, "close_when_all_leases_waiting", "must be True or False")
        _int(self, "cache_slots", 1, 2**24)
        _int(self, "max_nodes", 2, 1_000_001)
        _num(self, "lease_timeout_s", 0.0, 1e9, lo_open=True)
        _num(self, "supersede_idle_s", 0.0, 1e9)
        _num(self, "max_lease_slots_fraction", 0.0, 1.0, lo_open=True)
        _opt_str(self, "device")


@dataclasses.dataclass(frozen=True)
class ClientConfig:
    """Settings of ``muzero.rpc.client.InferenceClient``."""

    # Waiting for the first connection.
    connect_timeout_s: float = 30.0
    # Deadline of one attempt of one call.
    call_timeout_s: float = 60.0
    # Total time a call keeps retrying while the server is UNAVAILABLE.
    retry_timeout_s: float = 300.0
    # Exponential back-off between retries: initial, doubling, capped (plus jitter).
    backoff_initial_s: float = 0.05
    backoff_max_s: float = 2.0
    max_message_bytes: int = 256 * 2**20
    # PEM file of the CA (or self-signed certificate) to trust; enables TLS.
    tls_ca_file: Optional[str] = None
    # Host name the server certificate must carry, when it differs from the address.
    tls_server_name: Optional[str] = None
    auth_token_file: Optional[str] = None
    # After a server restart the client re-registers and replays the calls of the
    # current search (kept as the already-encoded request bytes, no copies) so the
    # search continues; beyond this many journalled calls it raises LeaseLostError.
    journal_max_calls: int = 100_000

    def __post_init__(self):
        _num(self, "connect_timeout_s", 0.0, 1e6, lo_open=True)
        _num(self, "call_timeout_s", 0.0, 1e6, lo_open=True)
        _num(self, "retry_timeout_s", 0.0, 1e7)
        _num(self, "backoff_initial_s", 0.0, 600.0, lo_open=True)
        _num(self, "backoff_max_s", 0.0, 3600.0, lo_open=True)
        if self.backoff_max_s < self.backoff_initial_s:
            _fail(self, "backoff_max_s", f"must be >= backoff_initial_s ({self.backoff_initial_s})")
        _int(self, "max_message_bytes", 2**20, 2**31 - 1)
        for name in ("tls_ca_file", "tls_server_name", "auth_token_file"):
            _opt_str(self, name)
        _int(self, "journal_max_calls", 0, 10**9)


def read_token(path: str, owner: str) -> str:
    """The token in ``path`` (surrounding whitespace removed); ConfigError if unusable."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        raise ConfigError(f"{owner}.auth_token_file={path!r} cannot be read: {e}") from None
    if len(token) < 16 or any(c.isspace() for c in token) or not token.isprintable():
        raise ConfigError(f"{owner}.auth_token_file={path!r} must hold one printable token of "
                          f">= 16 characters without spaces (found {len(token)} characters)")
    return token


def read_bytes(path: str, owner: str, field: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"{owner}.{field}={path!r} cannot be read: {e}") from None
