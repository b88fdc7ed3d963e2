"""Binding rules, TLS and the auth token. Certificates are made at test time with openssl."""
import shutil
import subprocess

import grpc
import numpy as np
import pytest

from muzero.config import ConfigError
from muzero.algorithms.muzero.client import InferenceClient
from muzero.rpc.client import ServerError
from muzero.algorithms.muzero.config import CacheServiceConfig
from muzero.rpc.config import ClientConfig, ServerConfig
from muzero.algorithms.muzero.service import serve
from muzero.rpc.server import BatchingServer
from muzero.rpc.testing import ToyModel

TOKEN = "s3cret-token-0123456789abcdef"


def test_non_loopback_bind_is_refused_without_tls_and_token():
    with pytest.raises(ConfigError) as e:
        ServerConfig(host="0.0.0.0")
    assert "tls_cert_file, tls_key_file, auth_token_file" in str(e.value)
    with pytest.raises(ConfigError) as e:
        ServerConfig(host="10.1.2.3", tls_cert_file="c.pem", tls_key_file="k.pem")
    assert "missing: auth_token_file" in str(e.value)
    with pytest.raises(ConfigError, match="missing: tls_cert_file, tls_key_file"):
        ServerConfig(host="::", auth_token_file="t.txt")


def test_unreadable_credentials_stop_the_server_before_binding(tmp_path):
    cfg = ServerConfig(host="0.0.0.0", tls_cert_file=str(tmp_path / "none.pem"),
                       tls_key_file=str(tmp_path / "none.key"),
                       auth_token_file=str(tmp_path / "none.txt"))
    with pytest.raises(ConfigError, match="auth_token_file=.*cannot be read"):
        BatchingServer(cfg)
    (tmp_path / "short.txt").write_text("abc\n")
    with pytest.raises(ConfigError, match=">= 16 characters"):
        BatchingServer(ServerConfig(auth_token_file=str(tmp_path / "short.txt")))


@pytest.fixture(scope="module")
def credentials(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key, token = d / "cert.pem", d / "key.pem", d / "token.txt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    token.write_text(TOKEN + "\n")
    (d / "wrong.txt").write_text("another-token-0123456789\n")
    return d


@pytest.fixture(scope="module")
def secure_server(credentials):
    d = credentials
    server, _ = serve(ToyModel(), CacheServiceConfig(cache_slots=8, max_nodes=4), server_config=ServerConfig(
        tls_cert_file=str(d / "cert.pem"), tls_key_file=str(d / "key.pem"),
        auth_token_file=str(d / "token.txt")))
    yield server
    server.stop()


def _client_config(d, token_file="token.txt", **kw):
    return ClientConfig(tls_ca_file=str(d / "cert.pem"), tls_server_name="localhost",
                        auth_token_file=None if token_file is None else str(d / token_file),
                        connect_timeout_s=5, retry_timeout_s=0.5, **kw)


def test_tls_and_token_round_trip(credentials, secure_server):
    with InferenceClient(f"127.0.0.1:{secure_server.port}", actor_id=1,
                         config=_client_config(credentials)) as c:
        c.register(2, 4)
        assert c.initial_inference(np.array([[1, 5], [0, 1]], np.float32))["value"].tolist() == [6, 1]
        assert c.recurrent_inference([0, 0], [2, 0], [1, 1])[1].tolist() == [16, 2]


def test_credentials_inline_work_without_the_files(credentials, secure_server, tmp_path):
    # What the learner gives actors on other hosts: the CA certificate and token as values.
    d = tmp_path / "copy"
    shutil.copytree(credentials, d)
    config = _client_config(d).with_credentials_inline()
    shutil.rmtree(d)
    assert config.tls_ca_file is None and config.auth_token_file is None
    assert config.auth_token == TOKEN and config.tls_ca_pem.startswith(b"-----BEGIN CERTIFICATE-----")
    assert TOKEN not in repr(config) and "BEGIN" not in repr(config)
    assert "auth_token=<set>" in repr(config) and "tls_ca_pem=<" in repr(config)
    with InferenceClient(f"127.0.0.1:{secure_server.port}", actor_id=3, config=config) as c:
        c.register(2, 4)
        assert c.initial_inference(np.array([[1, 5], [0, 1]], np.float32))["value"].tolist() == [6, 1]


def test_bad_inline_credentials_are_refused_without_echoing_them():
    with pytest.raises(ConfigError) as e:
        ClientConfig(auth_token="short token")
    assert "auth_token must hold one printable token" in str(e.value) and "short token" not in str(e.value)
    with pytest.raises(ConfigError, match="tls_ca_pem"):
        ClientConfig(tls_ca_pem="not bytes")
    with pytest.raises(ConfigError, match="auth_token_file=.*cannot be read"):
        ClientConfig(auth_token_file="/nonexistent/token.txt").with_credentials_inline()


@pytest.mark.parametrize("token_file", ["wrong.txt", None])
def test_wrong_or_missing_token_is_unauthenticated(credentials, secure_server, token_file):
    c = InferenceClient(f"127.0.0.1:{secure_server.port}", actor_id=2, connect=False,
                        config=_client_config(credentials, token_file))
    with pytest.raises(ServerError) as e:
        c.register(2, 4)
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert "authorization" in e.value.details
    c._channel.close()


def test_plaintext_client_cannot_talk_to_the_tls_server(secure_server):
    c = InferenceClient(f"127.0.0.1:{secure_server.port}", connect=False,
                        config=ClientConfig(retry_timeout_s=0.3, call_timeout_s=2))
    with pytest.raises(ServerError) as e:
        c.learner_info()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    c._channel.close()
