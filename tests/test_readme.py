"""Every command the README and docs/ show runs as written: each flag it passes exists in the
command it is passed to, every ``--set`` names a real config field, every preset and env
exists, and the README's short commands (``python -c``, ``--help``) run."""
import functools
import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest

from e2e_helpers import ROOT
from e2e_helpers import subprocess_env as _env

README = os.path.join(ROOT, "README.md")


def _commands(path: str = README) -> list:
    """Shell commands of a Markdown page: lines of its ```bash blocks (continuations joined,
    comments cut) and the commands in backticks of its tables."""
    text = open(path).read()
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s+)#.*$", "", line).strip()
            if line:
                found.append(line)
    for line in text.splitlines():
        if line.startswith("|"):
            found += [c for c in re.findall(r"`([^`]+)`", line) if c.startswith(("python ", "NUMBA_NUM_THREADS"))]
    return found


COMMANDS = _commands()
DOCS = os.path.join(ROOT, "docs")
DOC_COMMANDS = sorted({c for name in sorted(os.listdir(DOCS)) if name.endswith(".md")
                       for c in _commands(os.path.join(DOCS, name))} - set(COMMANDS))


def test_the_readme_has_commands_to_check():
    assert COMMANDS[:2] == ["make train", "make test"]
    assert sum(c.startswith("python -m muzero.learner") for c in COMMANDS) >= 10
    assert any(c.startswith("python bench/learn.py") for c in COMMANDS)


@functools.lru_cache(maxsize=None)
def _flags_of(program: str) -> frozenset:
    """Flag names a program accepts, read from its own help (absl's --helpfull, argparse's --help)."""
    run = [sys.executable, program] if program.endswith(".py") else [sys.executable, "-m", program]
    proc = subprocess.run([*run, "--helpfull"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    if proc.returncode == 0:       # absl: one "  --name: help" line per flag
        return frozenset(re.findall(r"^\s+--(?:\[no\])?([a-z_]+)", proc.stdout, re.M))
    proc = subprocess.run([*run, "--help"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return frozenset(re.findall(r"--([a-z][a-z_-]*)", proc.stdout))     # argparse (--no-x included)


def _split(command: str) -> tuple:
    """(program, [arguments]) of a README command; program is a module, a script or a make target."""
    words = shlex.split(re.sub(r"^(\w+=\S+\s+)+", "", command))
    if words[0] == "make":
        return "make", words[1:]
    if words[:2] == ["python", "-m"]:
        return words[2], words[3:]
    if words[0] == "python":
        return words[1], words[2:]
    return words[0], words[1:]


def _check_learner_arguments(args: list) -> None:
    from muzero import algorithms
    from muzero.config import parse_override
    from muzero.settings import sections
    flags = _flags_of("muzero.learner")
    algo = next((a.split("=", 1)[1] for a in args if a.startswith("--algo=")), algorithms.DEFAULT)
    builder = algorithms.get(algo)
    env = next((a.split("=", 1)[1] for a in args if a.startswith("--env=")), "cartpole")
    config = builder.default_settings(env if not env.startswith("gym:") else "cartpole").config
    for arg in args:
        assert arg.startswith("--"), f"{arg!r}: not a flag"
        name = arg[2:].split("=", 1)[0]
        if name == "help":
            continue
        assert name in flags, f"muzero.learner has no flag --{name}"
        if name == "set":
            parse_override(arg.split("=", 1)[1], sections(config))     # raises for an unknown field
        if name == "preset":
            assert arg.split("=", 1)[1] in builder.presets
        if name == "env":
            import envs
            value = arg.split("=", 1)[1]
            assert value in envs.known_names() or value.startswith(("gym:", "minatar:")), value


@pytest.mark.parametrize("command", COMMANDS + DOC_COMMANDS)
def test_every_flag_of_every_command_exists(command):
    program, args = _split(command)
    if program == "make":
        targets = re.findall(r"^([\w-]+):", open(os.path.join(ROOT, "Makefile")).read(), re.M)
        assert args[0] in targets, f"Makefile has no target {args[0]!r}"
        return
    if program == "-c":
        return      # run by test_the_short_commands_run
    if program == "pytest":
        options_with_values = {"-m", "-k"}
        paths = [a for i, a in enumerate(args) if not a.startswith("-") and args[i - 1] not in options_with_values]
        assert all(os.path.exists(os.path.join(ROOT, a)) for a in paths), paths
        return
    if program == "muzero.learner":
        _check_learner_arguments(args)
        return
    if program.startswith("muzero.") or program.endswith(".py"):
        if program.endswith(".py"):
            assert os.path.isfile(os.path.join(ROOT, program)), program
        own, learner = (args[:args.index("--")], args[args.index("--") + 1:]) if "--" in args else (args, [])
        flags = _flags_of(program)
        for arg in own:
            if arg.startswith("--"):
                assert arg[2:].split("=", 1)[0] in flags, f"{program} has no flag {arg.split('=')[0]}"
        if learner:
            _check_learner_arguments(learner)
        return
    if program == "ray":     # docs/SCALING.md's Ray cluster recipe (run by tests/test_two_hosts.py)
        if importlib.util.find_spec("ray") is None:
            pytest.skip("the ray extra is not installed")
        flags = _ray_flags(args[0])
        for arg in args[1:]:
            if arg.startswith("--"):
                assert arg[2:].split("=", 1)[0] in flags, f"ray {args[0]} has no flag {arg.split('=')[0]}"
        return
    # openssl: docs/SCALING.md's two-host recipe, which tests/test_two_hosts.py runs.
    assert os.path.basename(program) in ("pip", "tensorboard", "openssl"), \
        f"a command this test does not know: {command}"


@functools.lru_cache(maxsize=None)
def _ray_flags(subcommand: str) -> frozenset:
    ray = os.path.join(os.path.dirname(sys.executable), "ray")
    proc = subprocess.run([ray, subcommand, "--help"], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"ray has no command {subcommand!r}: {proc.stderr[-500:]}"
    return frozenset(re.findall(r"--([a-z][a-z-]*)", proc.stdout))


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.startswith("python -c ")
                                     or c == "python -m muzero.learner --help"])
def test_the_short_commands_run(command):
    words = shlex.split(command)
    proc = subprocess.run([sys.executable, *words[1:]], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip()
