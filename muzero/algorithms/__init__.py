"""Algorithms by name: each is one folder whose ``builder.py`` makes its parts (``muzero.core``).

    algorithms.get("vtrace") -> Builder      (imports that algorithm's modules on first use)
    algorithms.names()       -> ["muzero", "ppo", "r2d2", "sac", "vtrace"]

Adding an algorithm: write ``muzero/algorithms/<name>/{config,networks,learning,builder}.py``
(see docs/ARCHITECTURE.md, "Adding an algorithm") and list its builder here.
Importing this package imports no TensorFlow.
"""
from __future__ import annotations

import importlib
import json
import os

# name -> "module:attribute" of the Builder instance
_BUILDERS = {
    "muzero": "muzero.algorithms.muzero.builder:BUILDER",
    "ppo": "muzero.algorithms.ppo.builder:BUILDER",
    "r2d2": "muzero.algorithms.r2d2.builder:BUILDER",
    "sac": "muzero.algorithms.sac.builder:BUILDER",
    "vtrace": "muzero.algorithms.vtrace.builder:BUILDER",
}


# The algorithm of --algo's default, of config.json files without "algo" and of exports
# whose muzero_export.json names none.
DEFAULT = "muzero"


class UnknownAlgorithmError(ValueError):
    """No algorithm of that name."""


def names() -> list:
    return sorted(_BUILDERS)


def accepting(descriptor) -> list:
    """Names of the algorithms whose builder accepts an env with this descriptor."""
    return [n for n in names() if get(n).refusal(descriptor) is None]


def check_env(builder, descriptor) -> None:
    """Raises ``ConfigError`` (one line: the algorithm, the env's action space and the
    algorithms that accept the env) when the env does not fit ``builder``'s algorithm."""
    reason = builder.refusal(descriptor)
    if reason is None:
        return
    from muzero.config import ConfigError
    raise ConfigError(f"--algo={builder.name} cannot train on env {descriptor.name!r}: {reason}; "
                      f"algorithms accepting it: {', '.join(accepting(descriptor)) or 'none'}")


def check_remote_envs(builder, settings) -> None:
    """ConfigError for --remote_lease_s on an algorithm whose remote actors lease no env ids
    (MuZero's lease slots of its latent cache, sized by --remote_envs, and keep them 300 s
    unused; each step-streaming builder's own check refuses a run with no training env)."""
    from muzero.config import ConfigError
    default = type(settings).__dataclass_fields__["remote_lease_s"].default
    if settings.remote_lease_s != default and not builder.leases_env_ids:
        raise ConfigError(f"--remote_lease_s={settings.remote_lease_s:g}: --algo={settings.algo}'s remote actors "
                          "lease slots of its latent cache, which a silent actor keeps for 300 s; --remote_lease_s "
                          "is for the step-streaming algorithms' env ids")


def check_trainable_parts(builder, parts) -> None:
    """Raises ``ConfigError`` (one line) unless ``parts`` is a non-empty subset of the parts
    ``builder``'s algorithm lets a run train alone (``Builder.trainable_parts``)."""
    allowed = builder.trainable_parts
    bad = [p for p in parts if p not in allowed]
    if allowed and parts and not bad:
        return
    from muzero.config import ConfigError
    which = (f"a comma-separated subset of {', '.join(allowed)}" if allowed else
             f"--algo={builder.name} trains its whole model and has no trainable parts to pick; algorithms "
             f"that take it: {', '.join(n for n in names() if get(n).trainable_parts)}")
    raise ConfigError(f"--trainable_parts={','.join(parts)} is invalid: {which}")


def settings_from_dict(data: dict):
    """``RunSettings`` from a run's config.json (parsed), with the config class of the
    algorithm it names (``algo``, default muzero); ``ConfigError`` names what is wrong."""
    from muzero.config import ConfigError
    from muzero.settings import RunSettings
    if not isinstance(data, dict):
        raise ConfigError(f"RunSettings: expected a JSON object, got {type(data).__name__}")
    data = dict(data, algo=data.get("algo", DEFAULT))   # config.json files of runs before --algo existed
    try:
        builder = get(data["algo"])
    except UnknownAlgorithmError as e:
        raise ConfigError(str(e)) from None
    return RunSettings.from_dict(data, builder.config_class)


def for_export(export_dir: str):
    """The Builder of the algorithm that wrote ``export_dir``: the ``algo`` its
    ``muzero_export.json`` names (MuZero's exports name none)."""
    if not os.path.isdir(export_dir):
        raise ValueError(f"--export_dir={export_dir!r} is not a directory")
    try:
        with open(os.path.join(export_dir, "muzero_export.json")) as f:
            algo = json.load(f).get("algo", DEFAULT)
    except (OSError, ValueError, AttributeError):
        algo = DEFAULT       # its player names what is missing or damaged
    return get(algo)


def define_shortcut_flags() -> None:
    """Defines in absl's ``FLAGS`` every algorithm's shortcut flags (``Builder.shortcuts``),
    each once, its help naming the algorithms that take it and the field it sets."""
    from absl import flags
    uses: dict = {}
    for name in names():
        for shortcut in get(name).shortcuts:
            uses.setdefault(shortcut.flag, []).append((name, shortcut))
    define = {"integer": flags.DEFINE_integer, "float": flags.DEFINE_float,
              "boolean": flags.DEFINE_boolean, "string": flags.DEFINE_string}
    for flag, found in uses.items():
        s = found[0][1]
        who = ", ".join(name for name, _ in found)
        define[s.kind](flag, None, f"{who}: {s.help} ({s.section}.{s.field})")


def shortcut_overrides(builder) -> list:
    """``section.field=value`` items of the shortcut flags given on the command line, for
    ``builder``'s algorithm; ``ConfigError`` for one it does not take."""
    from absl import flags

    from muzero.config import ConfigError
    values = flags.FLAGS
    mine = {s.flag: s for s in builder.shortcuts}
    items = []
    for name in names():
        for s in get(name).shortcuts:
            if s.flag in values and values[s.flag].value is not None and s.flag not in mine:
                raise ConfigError(f"--{s.flag} does not apply to --algo={builder.name} (it sets "
                                  f"{s.section}.{s.field} of {name})")
    for flag, s in mine.items():
        if flag in values and values[flag].value is not None:
            items.append(f"{s.section}.{s.field}={json.dumps(values[flag].value)}")
    return items


def get(name: str):
    """The Builder of algorithm ``name``; UnknownAlgorithmError lists the known ones."""
    if name not in _BUILDERS:
        raise UnknownAlgorithmError(f"--algo={name!r} is not a known algorithm; known: {', '.join(names())}")
    module, attribute = _BUILDERS[name].split(":")
    return getattr(importlib.import_module(module), attribute)
