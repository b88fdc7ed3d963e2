"""The process entry shared by the MuZero actor and the thin step-streaming actor.

Imports only the standard library.
"""
from __future__ import annotations

import signal
import threading

# Set by request_stop(): every actor of this process that runs (or starts) afterwards stops.
# Launchers that run an actor in a thread (the Ray launcher) cannot use signals for that.
_STOP_REQUESTED = threading.Event()


def request_stop() -> None:
    """Asks every actor of this process to stop, as SIGTERM does for a process actor."""
    _STOP_REQUESTED.set()


def run_until_stopped(actor, client) -> None:
    """Runs ``actor.run()`` (an actor with ``stop_event`` and ``batch``) until it returns; in the
    main thread SIGTERM and SIGINT (unless ignored) set its stop event, and so does
    :func:`request_stop` from any thread. Closes the client, then the envs, whatever happens."""
    def stop(signum, frame):
        actor.stop_event.set()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, stop)

    done = threading.Event()

    def forward_stop_request():
        while not done.is_set():
            if _STOP_REQUESTED.wait(0.25):
                actor.stop_event.set()
                return
    threading.Thread(target=forward_stop_request, name="stop-request", daemon=True).start()
    try:
        actor.run()
    finally:
        done.set()
        try:
            client.close()
        finally:
            actor.batch.close()
