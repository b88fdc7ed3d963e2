"""Client side of the transport: a gRPC channel set up from ``ClientConfig`` (message limits,
reconnect back-off, TLS, bearer token) and the errors every client raises.

``open_channel`` is shared by every client (MuZero's ``InferenceClient``, the streaming
actors' ``StreamingClient``); ``ServerError`` carries a failed call's gRPC code, details and
``mz-error`` tag; ``LeaseLostError`` means a newer run of the same actor took its lease over.

This module imports grpc, never TensorFlow.
"""
from __future__ import annotations

from typing import Optional

import grpc

from muzero.rpc.config import ClientConfig, is_loopback
from muzero.rpc.server import ERROR_TAG_KEY


def unreachable(kind: str, address: str, config: ClientConfig, timeout: float) -> ConnectionError:
    """The error for a server that did not answer in time. A failed TLS handshake looks the same
    as an absent server, so it adds the likely cause: with TLS, a certificate the CA file does
    not vouch for; without, towards an address off loopback, that such a learner serves TLS only."""
    host = address.rsplit(":", 1)[0]
    if config.uses_tls:
        hint = ("; over TLS, a server whose certificate --tls_ca_file does not vouch for (or that does not "
                "name this address: --tls_server_name) fails the same way")
    elif not is_loopback(host):
        hint = "; a learner off loopback serves with TLS only: pass --tls_ca_file (and --auth_token_file)"
    else:
        hint = ""
    return ConnectionError(f"no {kind} server reachable at {address} within {timeout:g} s{hint}")


def open_channel(address: str, config: ClientConfig) -> tuple:
    """A gRPC channel to ``address`` ("host:port") set up from ``config``, and the call
    metadata to send with every call: ``(channel, metadata)``.

    The channel has the message size limits, no gRPC-level retries and reconnect back-off
    from ``config``; TLS when ``tls_ca_file`` or ``tls_ca_pem`` is set (``tls_server_name`` overrides the
    name checked on the certificate). ``metadata`` is ``(("authorization", "Bearer
    <token>"),)`` when ``auth_token_file`` or ``auth_token`` is set, else None. Shared by every client
    (``InferenceClient``, ``muzero.algorithms.streaming_actor.StreamingClient``).
    """
    options = [("grpc.max_receive_message_length", config.max_message_bytes),
               ("grpc.max_send_message_length", config.max_message_bytes),
               ("grpc.enable_retries", 0),
               ("grpc.initial_reconnect_backoff_ms", int(config.backoff_initial_s * 1e3)),
               ("grpc.min_reconnect_backoff_ms", int(config.backoff_initial_s * 1e3)),
               ("grpc.max_reconnect_backoff_ms", int(config.backoff_max_s * 1e3))]
    if config.uses_tls:
        ca = config.ca_pem()
        if config.tls_server_name:
            options.append(("grpc.ssl_target_name_override", config.tls_server_name))
        channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(ca), options)
    else:
        channel = grpc.insecure_channel(address, options)
    metadata = None
    token = config.token()
    if token is not None:
        metadata = (("authorization", f"Bearer {token}"),)
    return channel, metadata


class ServerError(RuntimeError):
    """A call failed: ``code`` (grpc.StatusCode), ``details`` and the ``mz-error`` ``tag``."""

    def __init__(self, method: str, code, details: str, tag: Optional[str] = None):
        super().__init__(f"{method}: {code.name if code else 'UNKNOWN'}: {details}")
        self.method, self.code, self.details, self.tag = method, code, details, tag

    @classmethod
    def from_rpc(cls, method: str, e: grpc.RpcError) -> "ServerError":
        tag = None
        for key, value in (e.trailing_metadata() or ()):
            if key == ERROR_TAG_KEY:
                tag = value
        return cls(method, e.code(), e.details() or "", tag)


class LeaseLostError(ServerError):
    """The lease is gone and cannot be recovered transparently."""


