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
    # The same credentials as values rather than paths (``with_credentials_inline``): the
    # CA's PEM bytes and the token. They travel inside the config to actors on other hosts,
    # which then need no files; a value wins over its file. Left out of repr.
    tls_ca_pem: Optional[bytes] = dataclasses.field(default=None, repr=False)
    auth_token: Optional[str] = dataclasses.field(default=None, repr=False)
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
        if self.tls_ca_pem is not None and (not isinstance(self.tls_ca_pem, bytes) or not self.tls_ca_pem):
            _fail(self, "tls_ca_pem", "must be None or non-empty PEM bytes")
        if self.auth_token is not None:
            check_token(self.auth_token, "ClientConfig.auth_token", "the value given")

    def __repr__(self) -> str:
        """The fields, with the inline credentials shown only as present (never their values)."""
        fields = [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr]
        if self.tls_ca_pem is not None:
            fields.append(f"tls_ca_pem=<{len(self.tls_ca_pem)} bytes>")
        if self.auth_token is not None:
            fields.append("auth_token=<set>")
        return f"ClientConfig({', '.join(fields)})"

    @property
    def uses_tls(self) -> bool:
        return self.tls_ca_pem is not None or self.tls_ca_file is not None

    def ca_pem(self) -> Optional[bytes]:
        """The CA's PEM bytes (the value, else the file read now), or None without TLS."""
        if self.tls_ca_pem is not None:
            return self.tls_ca_pem
        return None if self.tls_ca_file is None else read_bytes(self.tls_ca_file, "ClientConfig", "tls_ca_file")

    def token(self) -> Optional[str]:
        """The auth token (the value, else the file read now), or None."""
        if self.auth_token is not None:
            return self.auth_token
        return None if self.auth_token_file is None else read_token(self.auth_token_file, "ClientConfig")

    def with_credentials_inline(self) -> "ClientConfig":
        """A copy holding the CA certificate and token as values, read from their files now
        (ConfigError if unreadable), so that the config works on a host without the files."""
        return dataclasses.replace(self, tls_ca_pem=self.ca_pem(), auth_token=self.token(),
                                   tls_ca_file=None, auth_token_file=None)


def read_token(path: str, owner: str) -> str:
    """The token in ``path`` (surrounding whitespace removed); ConfigError if unusable."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        raise ConfigError(f"{owner}.auth_token_file={path!r} cannot be read: {e}") from None
    return check_token(token, f"{owner}.auth_token_file={path!r}", "it")


def check_token(token, where: str, source: str) -> str:
    """``token`` if it is one printable string of >= 16 characters without spaces, else a
    ConfigError naming ``where`` (never the token itself)."""
    if (not isinstance(token, str) or len(token) < 16 or any(c.isspace() for c in token)
            or not token.isprintable()):
        found = f"{len(token)} characters" if isinstance(token, str) else type(token).__name__
        raise ConfigError(f"{where} must hold one printable token of >= 16 characters without spaces "
                          f"({source} has {found})")
    return token


def read_bytes(path: str, owner: str, field: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"{owner}.{field}={path!r} cannot be read: {e}") from None
