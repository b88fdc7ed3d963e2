"""The process entry shared by the MuZero actor and the thin step-streaming actor.

Imports only the standard library.
"""
from __future__ import annotations

import signal
import threading


def run_until_stopped(actor, client) -> None:
    """Runs ``actor.run()`` (an actor with ``stop_event`` and ``batch``) until it returns; in the
    main thread SIGTERM and SIGINT (unless ignored) set its stop event. Closes the client,
    then the envs, whatever happens."""
    def stop(signum, frame):
        actor.stop_event.set()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, stop)
    try:
        actor.run()
    finally:
        try:
            client.close()
        finally:
            actor.batch.close()
