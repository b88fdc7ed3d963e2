"""A learner on one host and actors on another, as docs/SCALING.md tells a user to run them.

The two hosts are network namespaces joined by a veth pair (``tests/two_hosts.py``). The
commands are read from docs/SCALING.md's two-host recipe and run as written there, with the
test's address of host A in place of 10.0.0.1 and a time limit added to the learner; the
README's two commands must be the recipe's. The learner serves on host A's address with
TLS and a token, and every training actor runs on host B, so the training the learner
reports comes from B alone. Where namespaces cannot be made, the tests skip and say why.
"""
import importlib.util
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from tests.e2e_helpers import ROOT, subprocess_env
from tests.two_hosts import A_ADDRESS, B_ADDRESS, TwoHosts, netns_problem

_PROBLEM = netns_problem()
needs_netns = pytest.mark.skipif(_PROBLEM is not None, reason=f"two-host tests: {_PROBLEM}")
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="the ray extra is not installed (pip install -e '.[ray]')")

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


DOC_ADDRESS, DOC_B_ADDRESS = "10.0.0.1", "10.0.0.2"


def _recipe(marker: str) -> list:
    """The commands of docs/SCALING.md's bash block after ``<!-- two-hosts: marker -->``
    (continuations joined, comments cut), with host A's test address for 10.0.0.1."""
    text = open(os.path.join(ROOT, "docs", "SCALING.md")).read()
    block = re.search(rf"<!-- two-hosts: {marker} -->\n```bash\n(.*?)```", text, re.S)
    assert block, f"docs/SCALING.md has no two-host block {marker!r}"
    lines = [re.sub(r"(^|\s+)#.*$", "", line).strip() for line in block.group(1).replace("\\\n", " ").splitlines()]
    return [" ".join(line.split()) for line in lines if line]


def _shell(command: str, *extra: str) -> list:
    """``command`` (a recipe line) for sh, with this Python for ``python`` (and its ``ray``)
    and flags appended; leading ``VAR=value`` words are given through ``env``."""
    command = command.replace(DOC_ADDRESS, A_ADDRESS).replace(DOC_B_ADDRESS, B_ADDRESS)
    assignments = re.match(r"((?:\w+=\S+ )*)(.*)", command)
    prefix, command = assignments.group(1), assignments.group(2)
    if command.startswith("python "):
        command = shlex.quote(sys.executable) + command[len("python"):]
    elif command.startswith("ray "):
        command = shlex.quote(os.path.join(os.path.dirname(sys.executable), "ray")) + command[len("ray"):]
    if prefix:
        command = "env " + prefix + command
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
    # same port (host A), a wrong token, a plaintext client and a client trusting another
    # certificate (host B).
    (host_b / "wrong.txt").write_text("not-the-token-0123456789abcdef\n")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "1", "-subj", "/CN=other", "-addext", f"subjectAltName=IP:{A_ADDRESS}", "-keyout",
                    str(host_b / "other-key.pem"), "-out", str(host_b / "other.pem")], check=True, capture_output=True)
    (actor_command,) = _recipe("B")
    wrong_log, plain_log = str(tmp_path / "wrong.log"), str(tmp_path / "plain.log")
    wrong = hosts.spawn("B", _shell(actor_command.replace("token.txt", "wrong.txt").replace("=100", "=7"),
                                    "--max_env_steps=80"), wrong_log, cwd=str(host_b))
    plain = hosts.spawn("B", _shell(actor_command.replace(" --tls_ca_file=cert.pem", "").replace("=100", "=8"),
                                    "--max_env_steps=80", "--connect_timeout_s=8"), plain_log, cwd=str(host_b))
    other_log = str(tmp_path / "other.log")
    other = hosts.spawn("B", _shell(actor_command.replace("cert.pem", "other.pem").replace("=100", "=9"),
                                    "--max_env_steps=80", "--connect_timeout_s=8"), other_log, cwd=str(host_b))
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
    # gives up after its connect timeout (8 s here), saying what a learner off loopback needs.
    assert hosts.wait(plain, 120) == 2, _read(plain_log)[-2000:]
    assert _last_line(_read(plain_log)) == (
        f"error: no inference server reachable at {A_ADDRESS}:{PORT} within 8 s; a learner off loopback serves "
        "with TLS only: pass --tls_ca_file (and --auth_token_file)")
    assert hosts.wait(other, 120) == 2, _read(other_log)[-2000:]
    assert _last_line(_read(other_log)) == (
        f"error: no inference server reachable at {A_ADDRESS}:{PORT} within 8 s; over TLS, a server whose "
        "certificate --tls_ca_file does not vouch for (or that does not name this address: --tls_server_name) "
        "fails the same way")
    assert hosts.poll(learner) is None, _read(learner_log)[-3000:]

    # Training from host B's actor alone (the learner's own actor only evaluates).
    steps, env_steps = _wait(hosts, "training steps from host B's actor", lambda: _progress(learner_log)[0] > 0
                             and _progress(learner_log), 180, (learner_log, actor_log), (learner, actor))
    # Host B's actor dies (kill -9) and a new one takes its place; training goes on, and the
    # learner's evaluation actor on host A, dialling A's address, reports greedy returns.
    hosts.signal(actor, signal.SIGKILL)
    lines = _read(learner_log).count("| env steps ")
    actor2 = hosts.spawn("B", _shell(actor_command, "--seed=1"), actor_log, cwd=str(host_b))
    # The second progress line after the kill counts every step the killed actor delivered;
    # steps beyond it come from the new actor.
    _wait(hosts, "two progress lines after the kill", lambda: _read(learner_log).count("| env steps ") >= lines + 2,
          60, (learner_log,), (learner,))
    env_steps = _progress(learner_log)[1]
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
    learner = hosts.spawn("A", _shell(learner_command, "--max_seconds=240", "--remote_lease_s=8"), learner_log,
                          cwd=str(tmp_path))
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
    # The cable is cut for 20 s, longer than the 8 s lease: no env step reaches the learner
    # meanwhile (progress lines come every 5 s, so the first one 6 s in counts everything that
    # arrived before the cut), and the lease ends. Once the link is back the actor registers
    # again under a new run id (told that its lease ended, or its call having failed as
    # UNAVAILABLE), and training goes on.
    hosts.link(False)
    time.sleep(6.5)
    cut = _progress(learner_log)
    time.sleep(13.5)
    assert _progress(learner_log)[1] == cut[1], _read(learner_log)[-2000:]
    hosts.link(True)
    _wait(hosts, "training after the link came back", lambda: _progress(learner_log)[1] > cut[1] + 500, 180,
          (learner_log, actor_log), (learner, actor))
    assert _read(actor_log).count("reconnecting with a new run id") == 1, _read(actor_log)[-2000:]
    assert _read(actor_log).count("leased env ids") == 2, _read(actor_log)[-2000:]
    hosts.signal(actor, signal.SIGTERM)
    assert hosts.wait(actor, 60) == 0, _read(actor_log)[-3000:]
    hosts.signal(learner, signal.SIGINT)
    assert hosts.wait(learner, 120) == 0, _read(learner_log)[-3000:]
    assert "Traceback" not in _read(learner_log), _read(learner_log)[-3000:]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _ray_started(log: str) -> bool:
    return "Ray runtime started" in _read(log)


@needs_netns
@needs_ray
def test_ray_places_actors_on_another_host_which_can_stop_and_come_back(credentials, tmp_path):
    # HOME is the test's own: Ray keeps its cluster token in ~/.ray, which both hosts share
    # here (as the recipe's copy would make them).
    home = tmp_path / "home"
    home.mkdir()
    env = dict(subprocess_env(), HOME=str(home))
    hosts = TwoHosts(str(tmp_path), env=env)
    # Ray's socket paths must stay under 108 bytes: its directories go under a short path.
    ray_dir = tempfile.mkdtemp(prefix="mzray")
    try:
        _ray_on_two_hosts(hosts, credentials, tmp_path, ray_dir)
    finally:
        hosts.close()
        shutil.rmtree(ray_dir, ignore_errors=True)


def _ray_on_two_hosts(hosts, credentials, tmp_path, ray_dir):
    host_a = tmp_path / "A"
    host_a.mkdir()
    for name in ("cert.pem", "key.pem", "token.txt"):
        shutil.copy(credentials / name, host_a / name)
    *setup, head_command, learner_command = _recipe("ray-A")
    (node_command,) = _recipe("ray-B")
    head_log, node_log, learner_log = (str(tmp_path / f"{n}.log") for n in ("head", "node", "learner"))
    for i, command in enumerate(setup):             # Ray's token
        log = str(tmp_path / f"setup{i}.log")
        assert hosts.wait(hosts.spawn("A", _shell(command), log, cwd=str(host_a)), 60) == 0, _read(log)
    head = hosts.spawn("A", _shell(head_command, "--block", f"--temp-dir={ray_dir}/a"), head_log)
    _wait(hosts, "Ray's head", lambda: _ray_started(head_log), 90, (head_log,), (head,))
    node = hosts.spawn("B", _shell(node_command, "--block", f"--temp-dir={ray_dir}/b"), node_log)
    _wait(hosts, "host B's Ray node", lambda: _ray_started(node_log), 90, (node_log,), (node,))
    learner = hosts.spawn("A", _shell(learner_command, "--max_seconds=400"), learner_log, cwd=str(host_a))
    _wait(hosts, "the learner serving", lambda: "Ray actor(s) on" in _read(learner_log), 120,
          (learner_log,), (learner,))
    # The actors' arguments hold the credentials: the files can go (host B never had them).
    for name in ("cert.pem", "key.pem", "token.txt"):
        os.remove(host_a / name)
    joined = _wait(hosts, "the three actors on host B", lambda: len(re.findall(
        rf"ray actor \d joined: pid \d+ on .* \({re.escape(B_ADDRESS)}\), seed \d+", _read(learner_log))) == 3
        and re.findall(r"ray actor (\d) joined: pid (\d+) .*seed (\d+)", _read(learner_log)), 120,
        (learner_log, node_log), (learner, node))
    steps, env_steps = _wait(hosts, "training from host B's actors", lambda: _progress(learner_log)[0] > 0
                             and _progress(learner_log), 180, (learner_log,), (learner,))

    # One actor killed (kill -9 of its process on B): Ray restarts it with a fresh seed.
    # (Three actors: the run's two training actors and its evaluation actor.)
    index, pid, seed = next(j for j in joined if j[0] == "1")
    os.kill(int(pid), signal.SIGKILL)
    killed_at = time.monotonic()
    _wait(hosts, f"the end of pid {pid}", lambda: not _alive(int(pid)), 10, (learner_log,))
    back = _wait(hosts, "actor 1 back", lambda: re.search(r"ray actor 1 is back after .*? as pid (\d+) on .*"
                                                          r"\(([\d.]+)\), seed (\d+)", _read(learner_log)),
                 60, (learner_log,), (learner,))
    assert time.monotonic() - killed_at < 10.0, back.group(0)
    assert back.group(1) != pid and back.group(2) == B_ADDRESS and back.group(3) != seed, back.group(0)

    # Host B's Ray node stops: its actors are lost and the learner goes on serving; the node
    # starts again and Ray places both actors there, which train again.
    hosts.signal(node, signal.SIGTERM)
    assert hosts.wait(node, 60) is not None, _read(node_log)[-2000:]
    _wait(hosts, "actor 0 reported lost", lambda: re.search(r"ray actor 0 \(pid \d+\) was lost", _read(learner_log)),
          60, (learner_log,), (learner,))
    assert hosts.poll(learner) is None, _read(learner_log)[-3000:]
    node = hosts.spawn("B", _shell(node_command, "--block", f"--temp-dir={ray_dir}/b2"), node_log)
    _wait(hosts, "both actors back on the new node", lambda: all(
        re.search(rf"ray actor {i} is back after .*\({re.escape(B_ADDRESS)}\)", _read(learner_log).split(
            "was lost")[-1]) for i in (0, 1)), 120, (learner_log, node_log), (learner, node))
    # The old actors died with their node, over 4 s before their successors were back: the
    # next progress line counts all they delivered, and steps beyond it are the new actors'.
    lines = _read(learner_log).count("| env steps ")
    _wait(hosts, "a progress line", lambda: _read(learner_log).count("| env steps ") >= lines + 1, 60,
          (learner_log,), (learner,))
    env_steps = _progress(learner_log)[1]
    _wait(hosts, "env steps from the actors on the new node", lambda: _progress(learner_log)[1] > env_steps + 200,
          120, (learner_log,), (learner, node))
    hosts.signal(learner, signal.SIGINT)
    assert hosts.wait(learner, 120) == 0, _read(learner_log)[-3000:]
    assert "Traceback" not in _read(learner_log), _read(learner_log)[-3000:]
    pids = [int(p) for p in re.findall(r"ray actor \d (?:joined|is back).*? pid (\d+)", _read(learner_log))]
    assert not any(_alive(p) for p in pids), pids          # the learner stopped every actor it had
