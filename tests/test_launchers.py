"""The launchers' restart rules, without processes or Ray: fresh seeds for restarted actors,
and what the Ray launcher's monitor reports (unplaced actors, lost actors that come back)."""
import dataclasses
import threading

from muzero import core
from muzero.launch import local, ray_actors


@dataclasses.dataclass(frozen=True)
class _Settings:
    env: str
    seed: int


@dataclasses.dataclass(frozen=True)
class _NoSeed:
    env: str


def test_reseeded_moves_the_seed_of_each_dataclass_that_has_one():
    args = (_Settings("cartpole", 5), 7, _NoSeed("x"), _Settings("atari", 2**31 - 1))
    assert core.reseeded(args, 10) == (_Settings("cartpole", 15), 7, _NoSeed("x"), _Settings("atari", 9))
    assert core.reseeded(args, 0) == args


class _FakeProcess:
    started: list = []

    def __init__(self, target, name, args, daemon):
        self.args, self.pid, self.exitcode, self._alive = args, len(_FakeProcess.started) + 100, None, True

    def start(self):
        _FakeProcess.started.append(self)

    def is_alive(self):
        return self._alive


class _FakeContext:
    Process = _FakeProcess


def test_a_locally_restarted_actor_gets_fresh_arguments_with_its_seed_moved_per_restart():
    _FakeProcess.started = []
    calls = []

    def args_fn(i):
        calls.append(i)
        return (_Settings("cartpole", 40 + i),)

    actors = local.LocalActors(2, target=print, args_fn=args_fn, min_restart_interval=0.0)
    actors._ctx = _FakeContext()
    actors.start()
    for _ in range(2):                    # actor 1 dies twice
        _FakeProcess.started[-1 if len(_FakeProcess.started) > 2 else 1]._alive = False
        actors.poll()
    seeds = [p.args[1][0].seed for p in _FakeProcess.started]
    assert seeds == [40, 41, 41 + 104_729, 41 + 2 * 104_729]
    assert calls == [0, 1, 1, 1] and actors.restarts == 2


def test_a_ray_host_restarted_by_ray_draws_a_fresh_seed(monkeypatch):
    seen = []
    release = threading.Event()

    def target(settings):
        seen.append(settings.seed)
        release.wait(10)

    monkeypatch.setattr(ray_actors, "_node_address", lambda: "10.0.0.2")
    for restarted in (False, True):
        release.clear()
        monkeypatch.setattr(ray_actors, "_reconstructed", lambda: restarted)
        made = []                         # made off the main thread: no SIGINT handler is changed here
        maker = threading.Thread(target=lambda: made.append(
            ray_actors._ActorHost(target, (_Settings("cartpole", 7),), 0)))
        maker.start()
        maker.join(10)
        host = made[0]
        host._stop_requested.set()        # asked to stop: the loop's end is no crash (no os._exit)
        release.set()
        host._thread.join(10)
        assert host.info()["restarted"] is restarted and host.info()["seeds"] == [seen[-1]]
    assert seen[0] == 7 and seen[1] != 7


class _Ref:
    def __init__(self, value=None, error=None, ready=True):
        self.value, self.error, self.ready = value, error, ready


class _FakeHandle:
    """An actor whose info() answers with ``self.reply`` (an info dict or an exception)."""

    def __init__(self):
        self.reply = None
        self.info = self

    def remote(self):
        if self.reply is None:            # not placed: the call waits
            return _Ref(ready=False)
        return _Ref(error=self.reply) if isinstance(self.reply, Exception) else _Ref(value=self.reply)


class _FakeRay:
    def wait(self, refs, num_returns, timeout):
        return [r for r in refs if r.ready], [r for r in refs if not r.ready]

    def get(self, ref):
        if ref.error is not None:
            raise ref.error
        return ref.value


def test_the_monitor_reports_unplaced_actors_and_lost_ones_that_come_back(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(ray_actors.time, "monotonic", lambda: clock[0])
    lines = []
    launcher = ray_actors.RayActors(3, target=print, args_fn=lambda i: (), log=lines.append)
    launcher._ray = _FakeRay()
    handles = [_FakeHandle(), _FakeHandle(), _FakeHandle()]
    launcher._slots = [ray_actors._Slot(h) for h in handles]
    launcher._started_at = clock[0]
    handles[0].reply = {"pid": 11, "host": "b", "running": True, "error": None, "node": "10.0.0.2", "seeds": [5]}
    handles[1].reply = None                                   # never placed: its info() waits
    handles[2].reply = ModuleNotFoundError("no muzero here")  # placed, but its start fails

    def rounds(seconds):
        for _ in range(int(seconds / ray_actors.MONITOR_INTERVAL_S)):
            clock[0] += ray_actors.MONITOR_INTERVAL_S
            launcher.check()

    rounds(31)
    assert "ray actor 0 joined: pid 11 on b (10.0.0.2), seed 5" in lines
    unplaced = sorted(line for line in lines if "has not started 30 s after" in line)
    assert unplaced[0].startswith("ray actor 1 has not started 30 s after it was asked for: Ray has no node "
                                  "with 1 free CPU")
    assert unplaced[1].startswith("ray actor 2 has not started 30 s after it was asked for: its start fails "
                                  "(ModuleNotFoundError;")
    assert launcher.alive() == 1

    handles[0].reply = RuntimeError("node gone")
    rounds(31)
    assert any(line.startswith("ray actor 0 (pid 11) was lost (RuntimeError)") for line in lines)
    assert any(line.startswith("ray actor 0 has not come back for 30 s") for line in lines)
    assert launcher.alive() == 0
    sent = []
    handles[0].remote = lambda: sent.append(clock[0]) or _Ref(error=RuntimeError("node gone"))
    rounds(10)
    assert len(sent) == 2                 # a lost actor is asked every LOST_POLL_S (5 s), no more
    handles[0].remote = _FakeHandle.remote.__get__(handles[0])
    handles[0].reply = {"pid": 12, "host": "b", "running": True, "error": None, "node": "10.0.0.2", "seeds": [99]}
    rounds(6)
    # First failed answer at 1032.0 (the call sent at 1031.5); asked again at 1066.5, 1071.5 and
    # 1076.5, whose answer, collected at 1077.0, is the return: away 45 s.
    assert [line for line in lines if "is back" in line] == [
        "ray actor 0 is back after 45.0 s: restarted by Ray as pid 12 on b (10.0.0.2), seed 99"]
    assert launcher.alive() == 1 and launcher.restarts == 1
