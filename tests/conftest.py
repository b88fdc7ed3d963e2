"""Shared test setup: writable Numba cache, quiet TensorFlow, repo root on sys.path."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(ROOT, ".numba_cache"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
