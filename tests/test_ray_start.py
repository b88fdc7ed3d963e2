"""Starting the run's own Ray instance: a failed start is tried once more, then reported in one line.

Uses a stand-in for the ``ray`` module (no Ray needed): its ``init`` fails a given number of
times the way Ray's does when its GCS server publishes no port in time.
"""
import pytest

from muzero import core
from muzero.launch import ray_actors


class FakeRay:
    def __init__(self, failures: int):
        self.failures = failures
        self.calls: list = []

    def init(self, **kwargs):
        self.calls.append("init")
        if self.failures:
            self.failures -= 1
            raise RuntimeError("Timed out waiting for file /tmp/ray/session_x/gcs_server_port_y\nmore detail")

    def shutdown(self):
        self.calls.append("shutdown")


def test_a_failed_start_is_cleaned_up_and_tried_again():
    ray, logged = FakeRay(failures=1), []
    ray_actors._start_local_ray(ray, cpus=2, log=logged.append)
    assert ray.calls == ["init", "shutdown", "init"]
    assert logged == ["warning: starting the local Ray instance failed (RuntimeError: Timed out waiting for file "
                      "/tmp/ray/session_x/gcs_server_port_y); trying again"]


def test_a_start_that_keeps_failing_is_one_launch_error_naming_the_logs():
    ray, logged = FakeRay(failures=5), []
    with pytest.raises(core.LaunchError) as info:
        ray_actors._start_local_ray(ray, cpus=2, log=logged.append)
    assert ray.calls == ["init", "shutdown"] * 2
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("could not start a local Ray instance after 2 tries (RuntimeError: Timed out")
    assert "/tmp/ray/session_latest/logs" in message and "--ray_address" in message


def test_a_first_start_that_works_is_not_repeated():
    ray = FakeRay(failures=0)
    ray_actors._start_local_ray(ray, cpus=2, log=lambda m: None)
    assert ray.calls == ["init"]
