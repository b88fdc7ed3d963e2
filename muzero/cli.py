"""Shared entry-point wrapper for the ``python -m muzero.*`` commands.

Flags are parsed by absl in each ``__main__``; this turns the errors a user can cause
(a bad flag value, a missing file) into one ``error: ...`` line on stderr and exit
status 2, instead of a traceback.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Callable

from absl import app

# gRPC's core logs only errors unless GRPC_VERBOSITY says otherwise (read when grpc is first
# imported, which the commands do after this module): its INFO lines, such as a failed TLS
# handshake for every retry of a plaintext client, read like the learner's own failures,
# and the client that failed already says why in one line.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def json_object_flag(name: str, text: str) -> dict:
    """The JSON object ``--<name>`` holds; ValueError in one line when it is not one."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--{name} is not valid JSON ({e}): {text!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"--{name} must be a JSON object, got {text!r}")
    return value


HELP_FLAGS = ("--help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml")


def run_main(main: Callable, errors: tuple = (ValueError, OSError)) -> None:
    """Runs ``main`` under absl; a help flag prints the help and exits 0 (absl's own exit
    status for it is 1)."""
    try:
        app.run(main)
    except errors as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except SystemExit as e:
        if e.code == 1 and any(arg in HELP_FLAGS for arg in sys.argv[1:]):
            sys.exit(0)
        raise
