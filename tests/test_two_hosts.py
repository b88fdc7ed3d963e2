"""A learner on one host and actors on another, as docs/SCALING.md tells a user to run them.

The two hosts are network namespaces joined by a veth pair (``tests/two_hosts.py``): the
learner serves on host A's address with TLS and a token, and every actor runs on host B,
so the training the learner reports comes from B's actors alone. Where namespaces cannot
be made, the tests skip and say why.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.e2e_helpers import subprocess_env
from tests.two_hosts import A_ADDRESS, TwoHosts, netns_problem

_PROBLEM = netns_problem()
pytestmark = pytest.mark.skipif(_PROBLEM is not None, reason=f"two-host tests: {_PROBLEM}")

PORT = 8686          # the namespaces are private: no other process can hold it
SERVER = f"{A_ADDRESS}:{PORT}"
TOKEN = "two-hosts-token-0123456789abcdef"


@pytest.fixture(scope="module")
def credentials(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=learner", "-addext", f"subjectAltName=IP:{A_ADDRESS}",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")], check=True, capture_output=True)
    (d / "token.txt").write_text(TOKEN + "\n")
    (d / "wrong.txt").write_text("not-the-token-0123456789abcdef\n")
    return d


@pytest.fixture
def hosts(tmp_path):
    h = TwoHosts(str(tmp_path), env=subprocess_env())
    yield h
    h.close()


def _learner(d, logdir: str, *extra: str) -> list:
    return [sys.executable, "-m", "muzero.learner", f"--logdir={logdir}", f"--host={A_ADDRESS}", f"--port={PORT}",
            f"--tls_cert_file={d / 'cert.pem'}", f"--tls_key_file={d / 'key.pem'}",
            f"--auth_token_file={d / 'token.txt'}", "--num_actors=0", "--num_eval_actors=0", "--export=false",
            *extra]


def _actor(d, config: str, *extra: str, token: str = "token.txt", tls: bool = True) -> list:
    return [sys.executable, "-m", "muzero.actor", f"--server={SERVER}", f"--config={config}",
            *([f"--tls_ca_file={d / 'cert.pem'}"] if tls else []), f"--auth_token_file={d / token}", *extra]


def _read(path) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _progress(log) -> tuple:
    """(training step, env steps) of the learner's newest progress line; (0, 0) before the first."""
    found = re.findall(r"\] step (\d+) .*?\| env steps (\d+)", _read(log))
    return tuple(int(x) for x in found[-1]) if found else (0, 0)


def _wait(hosts, what: str, check, timeout: float, logs: tuple, alive: tuple = ()):
    """``check()``'s first true value within ``timeout`` s; fails at once if a process of
    ``alive`` (pids of ``hosts``) ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        ended = [pid for pid in alive if hosts.poll(pid) is not None]
        if ended:
            timeout = f"{timeout:g} s: process {ended[0]} ended first"
            break
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {timeout}; logs:\n" + "\n".join(
        f"--- {p}\n{_read(p)[-3000:]}" for p in logs))


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else ""


def test_muzero_trains_from_actors_on_another_host(hosts, credentials, tmp_path):
    d = credentials
    run, learner_log = str(tmp_path / "run"), str(tmp_path / "learner.log")
    learner = hosts.spawn("A", _learner(d, run, "--env=cartpole", "--max_seconds=240",
                                        "--set=replay.min_steps_to_sample=200"), learner_log)
    config = os.path.join(run, "config.json")
    _wait(hosts, "config from the learner", lambda: os.path.exists(config) and "serving" in _read(learner_log),
          120, (learner_log,), (learner,))
    # Refusals, each one line, with the running learner unaffected: a second learner on the
    # same port (host A), a wrong token and a plaintext client (host B).
    second_log = str(tmp_path / "second.log")
    second = hosts.spawn("A", _learner(d, str(tmp_path / "other"), "--env=cartpole"), second_log)
    assert hosts.wait(second, 120) == 2, _read(second_log)[-2000:]
    assert f"{A_ADDRESS}:{PORT}" in _last_line(_read(second_log)), _read(second_log)[-2000:]
    wrong_log, plain_log = str(tmp_path / "wrong.log"), str(tmp_path / "plain.log")
    wrong = hosts.spawn("B", _actor(d, config, "--actor_id=7", "--max_env_steps=80", token="wrong.txt"), wrong_log)
    plain = hosts.spawn("B", _actor(d, config, "--actor_id=8", "--max_env_steps=80", tls=False), plain_log)
    assert hosts.wait(wrong, 120) not in (0, None), _read(wrong_log)[-2000:]
    assert "UNAUTHENTICATED" in _last_line(_read(wrong_log)) or "token" in _last_line(_read(wrong_log)), \
        _read(wrong_log)[-2000:]
    assert hosts.wait(plain, 120) not in (0, None), _read(plain_log)[-2000:]
    assert _last_line(_read(plain_log)).startswith("error:"), _read(plain_log)[-2000:]
    assert hosts.poll(learner) is None, _read(learner_log)[-3000:]

    # Training from host B's actor alone.
    actor_log = str(tmp_path / "actor.log")
    actor = hosts.spawn("B", _actor(d, config, "--actor_id=100", "--envs_per_actor=8"), actor_log)
    steps, env_steps = _wait(hosts, "training steps from host B's actor", lambda: _progress(learner_log)[0] > 0
                             and _progress(learner_log), 180, (learner_log, actor_log), (learner, actor))
    # Host B's actor dies (kill -9) and a new one takes its place; training goes on.
    hosts.signal(actor, signal.SIGKILL)
    actor2 = hosts.spawn("B", _actor(d, config, "--actor_id=100", "--envs_per_actor=8", "--seed=1"), actor_log)
    _wait(hosts, "env steps from the new actor", lambda: _progress(learner_log)[1] > env_steps + 200, 120,
          (learner_log, actor_log), (learner, actor2))
    hosts.signal(actor2, signal.SIGTERM)
    assert hosts.wait(actor2, 60) == 0, _read(actor_log)[-3000:]
    hosts.signal(learner, signal.SIGINT)
    assert hosts.wait(learner, 120) == 0, _read(learner_log)[-3000:]
    assert "Traceback" not in _read(learner_log), _read(learner_log)[-3000:]


def test_streaming_learner_hands_env_ids_to_a_remote_actor_and_survives_a_cut_link(hosts, credentials, tmp_path):
    d = credentials
    run, learner_log = str(tmp_path / "run"), str(tmp_path / "learner.log")
    learner = hosts.spawn("A", _learner(d, run, "--algo=vtrace", "--env=cartpole", "--remote_envs=16",
                                        "--max_seconds=240"), learner_log)
    config = os.path.join(run, "config.json")
    _wait(hosts, "config from the learner", lambda: os.path.exists(config) and "serving" in _read(learner_log),
          120, (learner_log,), (learner,))
    actor_log = str(tmp_path / "actor.log")
    actor = hosts.spawn("B", _actor(d, config, "--actor_id=5", "--envs_per_actor=8"), actor_log)
    _wait(hosts, "training steps from the leased actor", lambda: _progress(learner_log)[0] > 2, 180,
          (learner_log, actor_log), (learner, actor))
    assert "leased env ids 0..7" in _read(actor_log), _read(actor_log)[-2000:]
    # The cable is cut for 13 s: no env step reaches the learner meanwhile (progress lines
    # come every 5 s, so the first one 6 s in counts everything that arrived before the cut);
    # once the link is back the actor's call in flight completes (or times out and the actor
    # reconnects under a new run id) and training goes on.
    hosts.link(False)
    time.sleep(6.5)
    cut = _progress(learner_log)
    time.sleep(6.5)
    assert _progress(learner_log)[1] == cut[1], _read(learner_log)[-2000:]
    hosts.link(True)
    _wait(hosts, "training after the link came back", lambda: _progress(learner_log)[1] > cut[1] + 500, 180,
          (learner_log, actor_log), (learner, actor))
    hosts.signal(actor, signal.SIGTERM)
    assert hosts.wait(actor, 60) == 0, _read(actor_log)[-3000:]
    hosts.signal(learner, signal.SIGINT)
    assert hosts.wait(learner, 120) == 0, _read(learner_log)[-3000:]
    assert "Traceback" not in _read(learner_log), _read(learner_log)[-3000:]
