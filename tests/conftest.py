"""Shared test setup: writable Numba cache, quiet TensorFlow, repo root on sys.path, and the
one two-device child process (``two_device_child``)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(ROOT, ".numba_cache"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(scope="session")
def two_device_child():
    """Findings of the one child process that trains on two logical CPU devices (which must
    be configured before TensorFlow starts, so not in this process): tests/test_distribute.py
    run as a script, GPUs hidden; its checks and test_consistency's two-device steps share
    the child's TensorFlow start-up. Its last stdout line is a JSON object."""
    from e2e_helpers import subprocess_env
    env = dict(subprocess_env(), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "test_distribute.py")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])



def pytest_configure(config):
    config.addinivalue_line("markers", "gpu(count=1): needs that many visible GPUs; skipped (with the reason) "
                            "on machines with fewer")


def pytest_collection_modifyitems(config, items):
    wanted = [item for item in items if item.get_closest_marker("gpu")]
    if not wanted:
        return
    import tensorflow as tf
    available = len(tf.config.list_physical_devices("GPU"))
    for item in wanted:
        marker = item.get_closest_marker("gpu")
        count = marker.kwargs.get("count", marker.args[0] if marker.args else 1)
        if available < count:
            item.add_marker(pytest.mark.skip(reason=f"needs {count} GPU(s); this machine shows {available}"))
