"""A learner on one host and actors on another, as docs/SCALING.md tells a user to run them.

The two hosts are network namespaces joined by a veth pair (``tests/two_hosts.py``). The
commands are read from docs/SCALING.md's two-host recipe and run as written there, with the
test's address of host A in place of 10.0.0.1 and a time limit added to the learner; the
README's two commands must be the recipe's. The learner serves on host A's address with
TLS and a token, and every training actor runs on host B, so the training the learner
reports comes from B alone. Where namespaces cannot be made, the tests skip and say why.
"""
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.e2e_helpers import ROOT, subprocess_env
from tests.two_hosts import A_ADDRESS, TwoHosts, netns_problem

_PROBLEM = netns_problem()
needs_netns = pytest.mark.skipif(_PROBLEM is not None, reason=f"two-host tests: {_PROBLEM}")

PORT = 8686          # the namespaces are private: no other process can hold it
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
    return d


@pytest.fixture
def hosts(tmp_path):
    h = TwoHosts(str(tmp_path), env=subprocess_env())
    yield h
    h.close()


DOC_ADDRESS = "10.0.0.1"


def _recipe(marker: str) -> list:
    """The commands of docs/SCALING.md's bash block after ``<!-- two-hosts: marker -->``
    (continuations joined, comments cut), with host A's test address for 10.0.0.1."""
    text = open(os.path.join(ROOT, "docs", "SCALING.md")).read()
    block = re.search(rf"<!-- two-hosts: {marker} -->\n```bash\n(.*?)```", text, re.S)
    assert block, f"docs/SCALING.md has no two-host block {marker!r}"
    lines = [re.sub(r"(^|\s+)#.*$", "", line).strip() for line in block.group(1).replace("\\\n", " ").splitlines()]
    return [" ".join(line.split()) for line in lines if line]


def _shell(command: str, *extra: str) -> list:
    """``command`` (a recipe line) for sh, with this Python for ``python`` and flags appended."""
    command = command.replace(DOC_ADDRESS, A_ADDRESS)
    if command.startswith("python "):
        command = shlex.quote(sys.executable) + command[len("python"):]
    return ["sh", "-c", " ".join(["exec", command, *map(shlex.quote, extra)])]   # signals reach the program


def test_the_readme_shows_the_recipe():
    readme = open(os.path.join(ROOT, "README.md")).read().replace("\\\n", " ")
    recipe = _recipe("A") + _recipe("B")
    shown = [" ".join(line.split()) for line in readme.splitlines() if "--host=" + DOC_ADDRESS in line
             or "--server=" + DOC_ADDRESS in line]
    assert len(shown) == 2 and all(line in recipe for line in shown), shown


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


@needs_netns
def test_muzero_trains_from_actors_on_another_host(hosts, tmp_path):
    host_a, host_b = tmp_path / "A", tmp_path / "B"
    host_a.mkdir()
    host_b.mkdir()
    setup, learner_command = _recipe("A")[:-1], _recipe("A")[-1]
    for i, command in enumerate(setup):         # the certificate and the token, on host A
        log = str(tmp_path / f"setup{i}.log")
        assert hosts.wait(hosts.spawn("A", _shell(command), log, cwd=str(host_a)), 60) == 0, _read(log)
    learner_log = str(tmp_path / "learner.log")
    learner = hosts.spawn("A", _shell(learner_command, "--max_seconds=300"), learner_log, cwd=str(host_a))
    config = host_a / "runs" / "remote" / "config.json"
    _wait(hosts, "config from the learner", lambda: config.exists() and "serving" in _read(learner_log), 120,
          (learner_log,), (learner,))
    for name in ("cert.pem", "token.txt"):       # what the recipe copies to host B
        shutil.copy(host_a / name, host_b / name)
    shutil.copy(config, host_b / "config.json")

    # Refusals, each one line, with the running learner unaffected: a second learner on the
    # same port (host A), a wrong token and a plaintext client (host B).
    (host_b / "wrong.txt").write_text("not-the-token-0123456789abcdef\n")
    (actor_command,) = _recipe("B")
    wrong_log, plain_log = str(tmp_path / "wrong.log"), str(tmp_path / "plain.log")
    wrong = hosts.spawn("B", _shell(actor_command.replace("token.txt", "wrong.txt").replace("=100", "=7"),
                                    "--max_env_steps=80"), wrong_log, cwd=str(host_b))
    plain = hosts.spawn("B", _shell(actor_command.replace(" --tls_ca_file=cert.pem", "").replace("=100", "=8"),
                                    "--max_env_steps=80"), plain_log, cwd=str(host_b))
    actor_log = str(tmp_path / "actor.log")          # the actor that trains, meanwhile
    actor = hosts.spawn("B", _shell(actor_command), actor_log, cwd=str(host_b))
    second_log = str(tmp_path / "second.log")
    second = hosts.spawn("A", _shell(learner_command.replace("runs/remote", "runs/second")), second_log,
                         cwd=str(host_a))
    assert hosts.wait(second, 120) == 2, _read(second_log)[-2000:]
    assert _last_line(_read(second_log)).startswith(
        f"error: cannot bind {A_ADDRESS}:{PORT}: the port is in use (another learner?) or the address is not "
        "one of this machine's: choose another --port or --host"), _read(second_log)[-2000:]
    assert hosts.wait(wrong, 120) == 2, _read(wrong_log)[-2000:]
    assert _last_line(_read(wrong_log)) == \
        "error: model_info: UNAUTHENTICATED: missing or wrong 'authorization: Bearer <token>' metadata"
    # A plaintext client's handshake with a TLS server fails like an absent server's, so it
    # gives up after its connect timeout, saying what a learner off loopback needs.
    assert hosts.wait(plain, 120) == 2, _read(plain_log)[-2000:]
    assert _last_line(_read(plain_log)) == (
        f"error: no inference server reachable at {A_ADDRESS}:{PORT} within 30 s; a learner off loopback serves "
        "with TLS only: pass --tls_ca_file (and --auth_token_file)")
    assert hosts.poll(learner) is None, _read(learner_log)[-3000:]

    # Training from host B's actor alone (the learner's own actor only evaluates).
    steps, env_steps = _wait(hosts, "training steps from host B's actor", lambda: _progress(learner_log)[0] > 0
                             and _progress(learner_log), 180, (learner_log, actor_log), (learner, actor))
    # Host B's actor dies (kill -9) and a new one takes its place; training goes on, and the
    # learner's evaluation actor on host A, dialling A's address, reports greedy returns.
    hosts.signal(actor, signal.SIGKILL)
    actor2 = hosts.spawn("B", _shell(actor_command, "--seed=1"), actor_log, cwd=str(host_b))
    _wait(hosts, "env steps from the new actor", lambda: _progress(learner_log)[1] > env_steps + 200, 120,
          (learner_log, actor_log), (learner, actor2))
    _wait(hosts, "an evaluation return", lambda: re.search(r"eval -?\d", _read(learner_log)), 120,
          (learner_log,), (learner,))
    hosts.signal(actor2, signal.SIGTERM)
    assert hosts.wait(actor2, 60) == 0, _read(actor_log)[-3000:]
    hosts.signal(learner, signal.SIGINT)
    assert hosts.wait(learner, 120) == 0, _read(learner_log)[-3000:]
    assert "Traceback" not in _read(learner_log), _read(learner_log)[-3000:]


@needs_netns
def test_streaming_learner_hands_env_ids_to_a_remote_actor_and_survives_a_cut_link(hosts, credentials, tmp_path):
    d = credentials
    for name in ("cert.pem", "key.pem", "token.txt"):
        shutil.copy(d / name, tmp_path / name)
    learner_command, actor_command = _recipe("streaming")
    learner_log = str(tmp_path / "learner.log")
    learner = hosts.spawn("A", _shell(learner_command, "--max_seconds=240"), learner_log, cwd=str(tmp_path))
    config = tmp_path / "runs" / "remote_vtrace" / "config.json"
    _wait(hosts, "config from the learner", lambda: config.exists() and "serving" in _read(learner_log), 120,
          (learner_log,), (learner,))
    shutil.copy(config, tmp_path / "config.json")
    actor_log = str(tmp_path / "actor.log")
    actor = hosts.spawn("B", _shell(actor_command), actor_log, cwd=str(tmp_path))
    _wait(hosts, "training steps from the leased actor", lambda: _progress(learner_log)[0] > 2, 180,
          (learner_log, actor_log), (learner, actor))
    leased = re.search(r"leased env ids (\d+)\.\.(\d+)", _read(actor_log))
    assert leased and int(leased.group(2)) - int(leased.group(1)) == 7, _read(actor_log)[-2000:]
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
