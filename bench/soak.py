"""One long MuZero run with a fault every few minutes, resumed by a supervisor, beside an undisturbed run.

    python bench/soak.py --minutes=60                       # the disturbed run, then the undisturbed one
    python bench/soak.py --minutes=8 --fault_every=60 --no-baseline     # a smoke run of the machinery
    python bench/soak.py --minutes=60 --actor_host          # training actors on a second host

The disturbed run is ``python -m muzero.learner --env=cartpole`` with its defaults (plus
``--max_seconds``, which bounds the training time across restarts, so both runs train for
the same time). Every ``--fault_every`` seconds one fault, in turn:

- ``kill_learner``: SIGKILL to the learner; its actors must exit by themselves;
- ``kill_actor``: SIGKILL to one of its actor processes; the learner must restart it;
- ``full_disk``: right after a checkpoint, the logdir's file system (a tmpfs of
  ``--tmpfs_mb``) filled to the last byte for ``--full_disk_s`` seconds and at least until
  the next checkpoint has failed with a logged line; training must go on meanwhile;
- ``corrupt``: SIGKILL to the learner, then bytes of the newest checkpoint damaged (the
  four kinds of ``bench/faults.py`` in turn); the restart must fall back to the one before.

No fault starts in the last ``--full_disk_s`` + 150 s of training time, so that the run ends
with a final checkpoint and export to evaluate.

With ``--actor_host`` the run spans two hosts made of network namespaces joined by a veth
pair (``tests/two_hosts.py``): the learner serves on host A's address with TLS and a token
(``--num_actors=0``; its evaluation actor stays on A), and ``--remote_actors`` actors run on
host B (``python -m muzero.actor --config=...``, sharing out CartPole's 128 acting envs; the
learner has ``--remote_envs=128``), each started again a second after it ends,
as a service manager would. ``kill_actor`` then kills one of B's actors, and one more fault
joins the turn:

- ``kill_actor_host``: host B goes down: every actor on it SIGKILLed and the link cut for
  ``--host_down_s`` (20 s), then B comes back; the learner must keep serving and env steps
  must grow again within 180 s.

After each learner kill the supervisor starts the same command again at once, as a user's
scheduler would, and checks the restart as ``bench/faults.py`` does: it resumed from the
newest intact checkpoint, whose replay verifies and holds no duplicate or partial segment.
``lost_env_steps`` adds up, per kill, the env steps of the last progress line before it
less those of the checkpoint resumed from: the steps since the last checkpoint, which is
what a kill may cost. Every 10 s the learner's and its actors' resident memory and open
file descriptors are summed; ``rss_growth_pct`` / ``fd_growth`` compare the end of each
run with the sample ``--settle_minutes`` (10) into it (for the disturbed run, per learner
lifetime that lasted that long; none does when faults come every few minutes, so the
undisturbed run's figures are the ones to read). ``orphan_processes`` counts actors alive 5 s after their learner was
killed, plus any process of the workdir left at the end. The final evaluation plays each
run's last export greedily (``python -m muzero.eval``, 50 episodes, the same seed).

The whole soak runs in a user and mount namespace (``unshare -rm``) so that it can mount
its own tmpfs; where that is not permitted, ``full_disk`` is skipped and said so. Last lines:

    faults=N resumed=N lost_env_steps=... duplicate_segments=0 partial_segments=0 rss_growth_pct=...
    fd_growth=... orphan_processes=0
    eval_disturbed=... eval_undisturbed=...

Exit status 0 when every check held. Run it alone on the machine.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faults import (CORRUPTIONS, ROOT, Bench, Learner, _alive, _children, candidates, check_checkpoint,  # noqa: E402
                    fill_disk, still_damaged)
sys.path.insert(0, ROOT)
from tests.two_hosts import A_ADDRESS, set_link, setup_hosts  # noqa: E402

FAULTS = ("kill_learner", "kill_actor", "full_disk", "corrupt")
# With --actor_host the training actors run on host B, and B as a whole goes down too.
HOST_FAULTS = ("kill_learner", "kill_actor", "kill_actor_host", "full_disk", "corrupt")
PROGRESS = re.compile(r"^\[(?:\d+h)?\d+m\d+s\] step (\d+) .*?\| env steps (\d+)")
ELAPSED = re.compile(r"^\[(?:(\d+)h)?(\d+)m(\d+)s\] step ")
# Faults stop this long (plus --full_disk_s) before the run's training time is up.
FAULT_MARGIN_S = 150.0


PORT = 8686


# CartPole's default acting envs (one actor of 128), which host B's actors share out.
REMOTE_ENVS = 128


def soak_command(minutes: float, credentials=None):
    """The learner's command; with ``credentials`` (a directory holding cert.pem, key.pem and
    token.txt) it serves on host A's address with TLS and a token and leaves the training
    actors to host B (``--num_actors=0``, room for REMOTE_ENVS remote envs; its evaluation
    actor stays with it)."""
    def command(logdir: str, seed: int) -> list:
        cmd = [sys.executable, "-m", "muzero.learner", "--env=cartpole", f"--logdir={logdir}", f"--seed={seed}",
               f"--max_seconds={minutes * 60:g}"]
        if credentials:
            cmd += ["--num_actors=0", f"--remote_envs={REMOTE_ENVS}", f"--host={A_ADDRESS}", f"--port={PORT}",
                    f"--tls_cert_file={credentials}/cert.pem", f"--tls_key_file={credentials}/key.pem",
                    f"--auth_token_file={credentials}/token.txt"]
        return cmd
    return command


def make_credentials(directory: str) -> str:
    """A self-signed certificate for host A's address and a token, in ``directory``."""
    os.makedirs(directory, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "2", "-subj", "/CN=learner", "-addext", f"subjectAltName=IP:{A_ADDRESS}",
                    "-keyout", os.path.join(directory, "key.pem"), "-out", os.path.join(directory, "cert.pem")],
                   check=True, capture_output=True)
    with open(os.path.join(directory, "token.txt"), "w") as f:
        f.write(f"soak-{random.getrandbits(96):024x}\n")
    return directory


class ActorHost:
    """Host B's training actors: ``count`` ``python -m muzero.actor`` processes against the
    learner on host A (TLS and token), each started again 1 s after it ends, with a fresh
    seed, as a service manager would. ``down()`` kills them all and holds them down (a host
    that died); ``up()`` lets them start again."""

    def __init__(self, enter_b: list, logdir: str, credentials: str, count: int, log_path: str, rng):
        self.enter_b, self.logdir, self.credentials, self.count = enter_b, logdir, credentials, count
        self.rng = rng
        self.log = open(log_path, "ab")
        self.procs: list = [None] * count
        self.starts = 0
        self.held = False
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def start(self, timeout: float = 300.0) -> bool:
        """Starts the actors once the learner has written its config.json; False if it did not."""
        config = os.path.join(self.logdir, "config.json")
        deadline = time.monotonic() + timeout
        while not os.path.isfile(config):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        threading.Thread(target=self._supervise, daemon=True).start()
        return True

    def _spawn(self, i: int) -> None:
        c = self.credentials
        cmd = [*self.enter_b, sys.executable, "-m", "muzero.actor", f"--server={A_ADDRESS}:{PORT}",
               f"--config={self.logdir}/config.json", f"--tls_ca_file={c}/cert.pem",
               f"--auth_token_file={c}/token.txt", f"--actor_id={100 + i}", f"--seed={self.rng.randrange(2**31)}",
               f"--envs_per_actor={max(1, REMOTE_ENVS // self.count)}"]
        self.procs[i] = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.starts += 1

    def _supervise(self) -> None:
        ended_at: dict = {}
        while not self._stop.wait(0.25):
            with self._lock:
                if self.held:
                    continue
                for i, proc in enumerate(self.procs):
                    if proc is None or proc.poll() is not None:
                        since = ended_at.setdefault(i, time.monotonic())
                        if proc is None or time.monotonic() - since >= 1.0:
                            ended_at.pop(i, None)
                            self._spawn(i)

    def alive(self) -> list:
        return [p.pid for p in self.procs if p is not None and p.poll() is None]

    def kill_one(self):
        """SIGKILLs one running actor; its pid, or None if none runs."""
        with self._lock:
            running = self.alive()
            if not running:
                return None
            victim = self.rng.choice(running)
            os.kill(victim, signal.SIGKILL)
            return victim

    def down(self) -> int:
        """Every actor SIGKILLed and held down; how many were running."""
        with self._lock:
            self.held = True
            running = self.alive()
            for pid in running:
                os.kill(pid, signal.SIGKILL)
            for p in self.procs:
                if p is not None:
                    p.wait()
            return len(running)

    def up(self) -> None:
        with self._lock:
            self.held = False

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            for p in self.procs:
                if p is not None and p.poll() is None:
                    p.terminate()
            for p in self.procs:
                if p is not None:
                    try:
                        p.wait(15)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
        self.log.close()


def _tree(pid: int) -> list:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def _usage(pid: int) -> tuple:
    """(resident kB, open file descriptors) of ``pid`` and its descendants."""
    rss = fds = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                rss += next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
            fds += len(os.listdir(f"/proc/{p}/fd"))
        except (OSError, ValueError):
            pass
    return rss, fds


class Sampler:
    """Samples a learner's (rss, fds) every 10 s in a thread: [(seconds since start, rss, fds)]."""

    def __init__(self, learner: Learner):
        self.learner, self.samples, self._stop = learner, [], threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self._stop.wait(10.0) and self.learner.proc.poll() is None:
            rss, fds = _usage(self.learner.pid)
            if rss:
                self.samples.append((time.monotonic() - self.learner.started, rss, fds))

    def stop(self) -> list:
        self._stop.set()
        return self.samples

    @staticmethod
    def growth(samples: list, after_s: float = 600.0):
        """(rss growth %, fd growth) from the first sample at or after ``after_s`` to the last; None if too short."""
        later = [s for s in samples if s[0] >= after_s]
        if len(later) < 2:
            return None
        (_, rss0, fd0), (_, rss1, fd1) = later[0], later[-1]
        return 100.0 * (rss1 - rss0) / rss0, fd1 - fd0


def last_env_steps(learner: Learner) -> int:
    for line in reversed(learner.lines):
        m = PROGRESS.match(line)
        if m:
            return int(m.group(2))
    return 0


def resumed_env_steps(learner: Learner):
    line = learner.wait_for(r"^resumed from .*env steps (\d+)", 0)
    m = re.search(r"env steps (\d+)", line or "")
    return int(m.group(1)) if m else None


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.bench = Bench(argparse.Namespace(seed=args.seed, workdir=args.workdir, tmpfs_mb=args.tmpfs_mb))
        self.workdir = self.bench.workdir
        self.enter_b = None
        self.credentials = None
        if args.actor_host:
            self.holder, self.enter_b = setup_hosts()
            self.credentials = make_credentials(os.path.join(self.workdir, "credentials"))
        self.bench.command = soak_command(args.minutes, self.credentials)
        self.host_downs = self.host_starts = 0
        self.faults = self.resumed = self.lost = 0
        self.lifetimes: list = []     # samples per learner lifetime
        self.disk = "on"

    # -- the disturbed run --------------------------------------------------------------------
    def start(self, logdir: str, corrupted: dict) -> Learner:
        learner = self.bench.start(logdir, corrupted)
        self.sampler = Sampler(learner)
        return learner

    def end_lifetime(self) -> None:
        self.lifetimes.append(self.sampler.stop())

    def kill_and_restart(self, learner: Learner, logdir: str, corrupted: dict, corrupt_mode=None) -> Learner:
        before = last_env_steps(learner)
        self.bench.note_orphans(learner.kill9())
        self.bench.learner_kills += 1
        self.end_lifetime()
        self.bench.finish(learner, "kill -9")
        if corrupt_mode is not None and not self.bench.corrupt_newest(corrupted, corrupt_mode):
            print("  fewer than two checkpoints: not corrupted this time", flush=True)
        restarts = self.bench.restarts
        learner = self.start(logdir, corrupted)
        self.resumed += 1
        after = resumed_env_steps(learner)
        if after is None and self.bench.restarts == restarts:     # no checkpoint yet: from scratch
            after = 0
            print("  no checkpoint yet: the run starts again from scratch", flush=True)
        if after is not None:
            self.lost += max(0, before - after)
            print(f"  resumed at {after} env steps ({max(0, before - after)} since the checkpoint)", flush=True)
        return learner

    def full_disk(self, learner: Learner, mount: str) -> None:
        """Fills the disk right after a checkpoint was written, and keeps it full for
        ``--full_disk_s`` and at least until the next checkpoint has failed (at most 300 s)."""
        filler = os.path.join(mount, "filler")
        since = len(learner.lines)
        if not learner.wait_for(r"^checkpoint written", 300, since):
            if learner.proc.poll() is None:
                self.bench.fail("no checkpoint written within 300 s before the disk was to be filled")
            return
        since = len(learner.lines)
        fill_disk(filler)
        held = time.monotonic()
        failed = learner.wait_for(r"checkpoint failed \(.*No space left", 300, since)
        time.sleep(max(0.0, self.args.full_disk_s - (time.monotonic() - held)))
        trained = [m for m in (PROGRESS.match(x) for x in learner.lines[since:]) if m]
        os.remove(filler)
        print(f"  disk full for {time.monotonic() - held:.0f} s: "
              f"{'the checkpoint due failed with a logged line' if failed else 'no checkpoint failure logged'}; "
              f"{len(trained)} progress lines meanwhile", flush=True)
        if not failed and learner.proc.poll() is None:
            self.bench.fail("no 'checkpoint failed ... No space left' line while the disk was full")
        if learner.proc.poll() not in (None, 0):
            self.bench.fail(f"the learner exited with code {learner.proc.returncode} on the full disk")
        elif learner.proc.poll() is None and len(trained) < 2:
            self.bench.fail("training stopped while the disk was full")

    def actor_host(self, logdir: str, name: str):
        """Host B's actors for the run in ``logdir`` (None without --actor_host)."""
        if self.enter_b is None:
            return None
        host = ActorHost(self.enter_b, logdir, self.credentials, self.args.remote_actors,
                         os.path.join(self.workdir, f"{name}-actors.log"), self.rng)
        if not host.start():
            self.bench.fail(f"{name}: no config.json from the learner within 300 s; host B's actors not started")
        return host

    def training_left(self, learner: Learner) -> float:
        """Seconds of training time left: --minutes less the time of the newest progress line
        (its clock counts across resumes, as --max_seconds does)."""
        for line in reversed(learner.lines):
            m = ELAPSED.match(line)
            if m:
                return self.args.minutes * 60 - (int(m.group(1) or 0) * 3600 + int(m.group(2)) * 60 + int(m.group(3)))
        return self.args.minutes * 60

    def kill_remote_actor(self, host: "ActorHost", learner: Learner) -> None:
        victim = host.kill_one()
        if victim is None:
            self.bench.fail("no actor running on host B to kill")
            return
        self.bench.actor_kills += 1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(host.alive()) < host.count:
            time.sleep(0.25)
        if len(host.alive()) < host.count:
            self.bench.fail(f"host B's actor pid {victim} was killed and not running again within 30 s")
        else:
            self.bench.actor_restarts += 1
            print(f"  killed host B's actor pid {victim}; running again", flush=True)

    def kill_actor_host(self, host: "ActorHost", learner: Learner) -> None:
        """Host B dies: every actor killed and the link cut for --host_down_s, then B comes back
        (link up, actors started again). The learner must keep serving throughout, and env
        steps must grow again within 180 s of B's return."""
        since = len(learner.lines)
        killed = host.down()
        set_link(False)
        time.sleep(self.args.host_down_s)
        set_link(True)
        before = last_env_steps(learner)
        host.up()
        self.host_downs += 1
        alive = learner.proc.poll() is None
        lines = [m for m in (PROGRESS.match(x) for x in learner.lines[since:]) if m]
        deadline = time.monotonic() + 180
        while alive and time.monotonic() < deadline and last_env_steps(learner) <= before + 500:
            time.sleep(1.0)
            alive = learner.proc.poll() is None
        grew = last_env_steps(learner) - before
        print(f"  host B down for {self.args.host_down_s:g} s ({killed} actors killed, link cut): "
              f"{len(lines)} progress lines meanwhile; {grew} env steps since it came back", flush=True)
        if learner.proc.poll() is not None and learner.proc.returncode != 0:
            self.bench.fail(f"the learner exited with code {learner.proc.returncode} while host B was down")
        elif learner.proc.poll() is None and grew <= 500:
            self.bench.fail("no env steps from host B's actors within 180 s of its return")

    def disturbed(self, logdir: str, mount) -> None:
        corrupted: dict = {}
        self.bench.logdir = logdir
        learner = self.start(logdir, corrupted)
        host = self.actor_host(logdir, "disturbed")
        try:
            self._disturb(learner, host, logdir, mount, corrupted)
        finally:
            if host is not None:
                host.stop()
                self.host_starts += host.starts

    def _disturb(self, learner: Learner, host, logdir: str, mount, corrupted: dict) -> None:
        a = self.args
        faults = HOST_FAULTS if host is not None else FAULTS
        if not learner.wait_for(r"^\[\d+m\d+s\] step [1-9]", 300):
            self.bench.fail("training did not start within 300 s")
        next_fault, index, mode = time.monotonic() + a.fault_every, 0, 0
        while True:
            code = learner.proc.poll()
            if code is not None:
                self.end_lifetime()
                learner.close()
                self.bench.finish(learner, "end")
                if code != 0 or not learner.wait_for(r"^done: max_seconds", 0):
                    self.bench.fail(f"the learner ended with code {code} before its time was up")
                break
            if time.monotonic() < next_fault or self.training_left(learner) < a.full_disk_s + FAULT_MARGIN_S:
                # No fault in the run's last minutes: one there (a disk still full at the
                # stop) would cost the final checkpoint and export the evaluation plays.
                time.sleep(0.5)
                continue
            kind = faults[index % len(faults)]
            index += 1
            if kind == "full_disk" and mount is None:
                kind = "kill_actor"
            self.faults += 1
            elapsed = time.monotonic() - self.t0
            print(f"[{elapsed / 60:.1f} min] fault {self.faults}: {kind}", flush=True)
            if kind == "kill_learner":
                learner = self.kill_and_restart(learner, logdir, corrupted)
            elif kind == "corrupt":
                learner = self.kill_and_restart(learner, logdir, corrupted, CORRUPTIONS[mode % len(CORRUPTIONS)])
                mode += 1
            elif kind == "kill_actor" and host is not None:
                self.kill_remote_actor(host, learner)
            elif kind == "kill_actor":
                if not self.bench.kill_an_actor(learner, timeout=60) and learner.proc.poll() is None:
                    self.bench.fail("no actor to kill within 60 s")
            elif kind == "kill_actor_host":
                self.kill_actor_host(host, learner)
            else:
                self.full_disk(learner, mount)
            next_fault = time.monotonic() + a.fault_every
        final = [c for c in candidates(logdir) if not still_damaged(c, corrupted)]
        if final:
            result = check_checkpoint(final[0])
            self.bench.duplicates += len(result["duplicate"])
            self.bench.partials += len(result["partial"])
            print(f"final checkpoint {os.path.basename(final[0])}: replay {result['steps']} steps in "
                  f"{result['segments']} segments; duplicate {len(result['duplicate'])}, "
                  f"partial {len(result['partial'])}", flush=True)

    # -- the undisturbed run ------------------------------------------------------------------
    def undisturbed(self, logdir: str) -> list:
        learner = self.bench.start(logdir, {})
        sampler = Sampler(learner)
        host = self.actor_host(logdir, "undisturbed")
        learner.proc.wait()
        if host is not None:
            host.stop()
            self.host_starts += host.starts
        learner.close()
        self.bench.finish(learner, "undisturbed")
        if learner.proc.returncode != 0:
            self.bench.fail(f"the undisturbed run ended with code {learner.proc.returncode}")
        return sampler.stop()

    def evaluate(self, logdir: str):
        proc = subprocess.run([sys.executable, "-m", "muzero.eval", f"--export_dir={logdir}", "--episodes=50",
                               "--seed=7"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
        m = re.search(r"mean_return=(-?[\d.]+)", proc.stdout)
        if not m:
            self.bench.fail(f"evaluating {logdir} failed: {proc.stderr.strip()[-300:]}")
            return None
        return float(m.group(1))

    def orphans(self) -> int:
        found = 0
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid():
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        cmd = f.read()
                except OSError:
                    continue
                if self.workdir.encode() in cmd and _alive(int(entry)):
                    found += 1
        return found

    def run(self) -> int:
        a = self.args
        self.t0 = time.monotonic()
        mount = os.path.join(self.workdir, "disk")
        os.makedirs(mount, exist_ok=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={a.tmpfs_mb}m", "tmpfs", mount],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"full_disk: skipped: cannot mount a tmpfs here ({proc.stderr.strip()[:200]})", flush=True)
            mount, self.disk = None, "skipped"
        logdir = os.path.join(mount or self.workdir, "disturbed")
        print(f"workdir {self.workdir}; disturbed run in {logdir}; {a.minutes:g} min of training, a fault every "
              f"{a.fault_every:g} s", flush=True)
        try:
            self.disturbed(logdir, mount)
            baseline = None
            if a.baseline:
                print(f"[{(time.monotonic() - self.t0) / 60:.1f} min] the undisturbed run", flush=True)
                baseline = self.undisturbed(os.path.join(self.workdir, "undisturbed"))
            eval_disturbed = self.evaluate(logdir)
            eval_undisturbed = self.evaluate(os.path.join(self.workdir, "undisturbed")) if a.baseline else None
        finally:
            self.bench.close_all()
            if self.enter_b is not None:
                self.holder.kill()
                self.holder.wait()
            if mount is not None:       # the tmpfs ends with this namespace: keep the run's files
                shutil.copytree(logdir, os.path.join(self.workdir, "disturbed"), dirs_exist_ok=True)
        orphans = self.bench.orphan_actors + self.orphans()
        settle = a.settle_minutes * 60.0
        grown = [g for g in (Sampler.growth(s, settle) for s in self.lifetimes) if g is not None]
        base = Sampler.growth(baseline, settle) if baseline else None
        rss = base[0] if base else (max(g[0] for g in grown) if grown else float("nan"))
        fds = base[1] if base else (max(g[1] for g in grown) if grown else float("nan"))
        if base and (base[0] > 5.0):
            self.bench.fail(f"the undisturbed run's memory grew {base[0]:.1f} % after its first "
                            f"{a.settle_minutes:g} minutes")
        if orphans:
            self.bench.fail(f"{orphans} orphan process(es)")
        for message in self.bench.failures:
            print(f"failure: {message.splitlines()[0]}")
        print(f"disk_full={self.disk} restarts={self.bench.restarts} resumed_from_intact="
              f"{self.bench.resumed_intact}/{self.bench.resume_checks} actor_kills={self.bench.actor_kills} "
              f"actor_restarts={self.bench.actor_restarts} corruptions={self.bench.corruptions} "
              f"fallbacks={self.bench.fallbacks} tracebacks={self.bench.tracebacks} "
              f"minutes={(time.monotonic() - self.t0) / 60:.1f}")
        if self.enter_b is not None:
            print(f"actor_host_downs={self.host_downs} remote_actor_starts={self.host_starts}")
        print(f"faults={self.faults} resumed={self.resumed} lost_env_steps={self.lost} "
              f"duplicate_segments={self.bench.duplicates} partial_segments={self.bench.partials} "
              f"rss_growth_pct={rss:.1f} fd_growth={fds} orphan_processes={orphans}")
        print(f"eval_disturbed={eval_disturbed} eval_undisturbed={eval_undisturbed}", flush=True)
        return 0 if not self.bench.failures else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="training minutes of each run")
    parser.add_argument("--fault_every", type=float, default=240.0, help="seconds between faults")
    parser.add_argument("--full_disk_s", type=float, default=60.0, help="how long the disk stays full")
    parser.add_argument("--tmpfs_mb", type=int, default=1024, help="size of the disturbed run's file system")
    parser.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the undisturbed run (as long again)")
    parser.add_argument("--settle_minutes", type=float, default=10.0,
                        help="memory and descriptor growth are measured from this far into a run to its end")
    parser.add_argument("--actor_host", action="store_true",
                        help="train from actors on a second host (network namespaces joined by a veth pair): the "
                             "learner serves on host A with TLS and a token, host B runs --remote_actors actors, "
                             "and host B going down (its actors killed, the link cut) joins the faults")
    parser.add_argument("--remote_actors", type=int, default=2, help="--actor_host: actors on host B")
    parser.add_argument("--host_down_s", type=float, default=20.0, help="--actor_host: how long host B stays down")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None, help="default: a new temporary directory (kept)")
    args = parser.parse_args()
    if args.minutes <= 0 or args.fault_every <= 0 or args.full_disk_s <= 0:
        parser.error("--minutes, --fault_every and --full_disk_s must be > 0")
    if os.environ.get("MUZERO_SOAK_NS") != "1" and shutil.which("unshare"):
        # Again inside a user and mount namespace, where mounting a tmpfs is permitted.
        # With --actor_host, in a network namespace of its own too (host A).
        flags = "-rmn" if args.actor_host else "-rm"
        probe = subprocess.run(["unshare", flags, "true"], capture_output=True)
        if probe.returncode == 0:
            os.environ["MUZERO_SOAK_NS"] = "1"
            if args.workdir is None:
                sys.argv += [f"--workdir={tempfile.mkdtemp(prefix='muzero-soak-')}"]
            os.execvp("unshare", ["unshare", flags, sys.executable, os.path.abspath(__file__), *sys.argv[1:]])
        if args.actor_host:
            parser.error(f"--actor_host needs user and network namespaces (unshare {flags}), which are not "
                         "permitted here")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    return Soak(args).run()


if __name__ == "__main__":
    sys.exit(main())
