"""Shared entry-point wrapper for the ``python -m muzero.*`` commands.

Flags are parsed by absl in each ``__main__``; this turns the errors a user can cause
(a bad flag value, a missing file) into one ``error: ...`` line on stderr and exit
status 2, instead of a traceback.
"""
from __future__ import annotations

import sys
from typing import Callable

from absl import app


def run_main(main: Callable, errors: tuple = (ValueError, OSError)) -> None:
    try:
        app.run(main)
    except errors as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
