"""What every algorithm's typed settings are built from: the validation helpers, the
sectioned config base class and the JSON round trip.

Every setting lives in a frozen dataclass with a documented default (an algorithm's own
sections live in its folder: ``muzero.algorithms.<name>.config``; the search's in
``muzero.mcts.config``). Validation happens in ``__post_init__``; a bad value raises :class:`ConfigError` whose
message names the field, the value and the accepted range. ``to_dict`` / ``from_dict``
round-trip through plain JSON types so a run can save ``config.json`` in its log
directory and a later run (resume, fine-tune, evaluation) can read it back.

This module imports only the standard library.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from typing import Any, Optional


class ConfigError(ValueError):
    """A setting is out of range or of the wrong type."""


def _fail(cls_name: str, field: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{cls_name}.{field}={value!r} is invalid: {allowed}")


def check_int(obj, field: str, lo: int, hi: Optional[int] = None) -> None:
    value = getattr(obj, field)
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(type(obj).__name__, field, value, "must be an integer")
    if value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        _fail(type(obj).__name__, field, value, f"must be an integer {rng}")


def check_float(obj, field: str, lo: float, hi: float = math.inf,
                 lo_open: bool = False, hi_open: bool = False) -> None:
    value = getattr(obj, field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        _fail(type(obj).__name__, field, value, "must be a number")
    bad_lo = value <= lo if lo_open else value < lo
    bad_hi = value >= hi if hi_open else value > hi
    if bad_lo or bad_hi:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        _fail(type(obj).__name__, field, value, f"must be in {left}{lo}, {hi}{right}")


def check_bool(obj, field: str) -> None:
    value = getattr(obj, field)
    if not isinstance(value, bool):
        _fail(type(obj).__name__, field, value, "must be true or false")


def check_choice(obj, field: str, choices: tuple) -> None:
    value = getattr(obj, field)
    if value not in choices:
        _fail(type(obj).__name__, field, value, f"must be one of {list(choices)}")


def check_sizes(obj, field: str) -> None:
    """A non-empty tuple of layer widths in [1, 65536] (a JSON list becomes a tuple, in place)."""
    sizes = getattr(obj, field)
    if isinstance(sizes, list):
        sizes = tuple(sizes)
    if (not isinstance(sizes, tuple) or not sizes
            or any(isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= 65_536 for s in sizes)):
        _fail(type(obj).__name__, field, getattr(obj, field), "must be a non-empty list of integers in [1, 65536]")
    object.__setattr__(obj, field, sizes)


def fail_field(obj, field: str, value: Any, allowed: str) -> None:
    """Raises the ConfigError of every check: ``<Class>.<field>=<value> is invalid: <allowed>``."""
    _fail(type(obj).__name__, field, value, allowed)


class SectionedConfig:
    """Base of an algorithm's config (a frozen dataclass): every field is a frozen section
    dataclass, which ``--set=section.field=value`` addresses. Call ``coerce_sections()``
    first in ``__post_init__``: sections given as dicts (from JSON) become dataclasses."""

    def coerce_sections(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            cls, value = hints[f.name], getattr(self, f.name)
            if isinstance(value, dict):
                object.__setattr__(self, f.name, from_dict(cls, value))
            elif not isinstance(value, cls):
                fail_field(self, f.name, value, f"must be a {cls.__name__}")

    def to_dict(self) -> dict:
        return to_dict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict):
        return from_dict(cls, data)

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))


def to_dict(config) -> dict:
    """A config dataclass as nested plain dicts (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config)))


def from_dict(cls, data: dict):
    """Builds ``cls`` from nested dicts; unknown keys raise :class:`ConfigError`."""
    if not isinstance(data, dict):
        raise ConfigError(f"{cls.__name__}: expected a dict, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    data = _move_fields(data, hints)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    moved = getattr(cls, "MOVED_FIELDS", {})
    for name in unknown:
        if name in moved:
            raise ConfigError(f"{cls.__name__}.{name} is {moved[name]} now (set it there)")
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown field(s) {unknown}; known fields: {sorted(known)}")
    kwargs = {}
    for name, value in data.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint) and isinstance(value, dict):
            value = from_dict(hint, value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def _move_fields(data: dict, hints: dict) -> dict:
    """``data`` (a config's sections as dicts) with each field a section declares moved
    (``MOVED_FIELDS = {field: "section.field"}``, a class variable) taken out of that section
    and put where it lives now, so a config.json written before the move still loads. A
    value that disagrees with one already at the new place raises ConfigError."""
    data = dict(data)
    for name, value in list(data.items()):
        moved = getattr(hints.get(name), "MOVED_FIELDS", {})
        if not isinstance(value, dict) or not moved.keys() & value.keys():
            continue
        value = data[name] = dict(value)
        for old in moved.keys() & value.keys():
            section, field = moved[old].split(".")
            target = data[section] = dict(data.get(section, {}))
            if field in target and target[field] != value[old]:
                raise ConfigError(f"{name}.{old}={value[old]!r} disagrees with {moved[old]}="
                                  f"{target[field]!r}: {name}.{old} is {moved[old]} now; keep that one")
            target[field] = value.pop(old)
    return data


def parse_override(item: str, known_sections: dict, flag: str = "--set") -> tuple:
    """One ``section.field=value`` override (a ``--set`` flag's value) -> (section, field,
    value), checked against ``known_sections`` ({name: section dataclass type}).

    The value is read as JSON when it parses (numbers, booleans, lists, objects), else kept
    as the text; a list becomes a tuple, and an object given for a field whose type is a
    dataclass (a value support, say) that dataclass. Raises :class:`ConfigError` naming what is
    wrong and what is known. The field's own range checks run when the section is rebuilt with the value."""
    match = re.fullmatch(r"(\w+)\.(\w+)=(.*)", item, re.S)
    if not match or match.group(1) not in known_sections:
        raise ConfigError(f"{flag}={item!r} must look like section.field=value with section in "
                          f"{', '.join(known_sections)}")
    section, field, text = match.groups()
    known = {f.name for f in dataclasses.fields(known_sections[section])}
    moved = getattr(known_sections[section], "MOVED_FIELDS", {})
    if field in moved:
        raise ConfigError(f"{flag}: {section}.{field} is {moved[field]} now: use {flag}={moved[field]}={text}")
    if field not in known:
        raise ConfigError(f"{flag}: {section} has no field {field!r}; fields: {', '.join(sorted(known))}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    kind = typing.get_type_hints(known_sections[section])[field]
    if dataclasses.is_dataclass(kind) and isinstance(value, dict):
        keys = [f.name for f in dataclasses.fields(kind)]
        if set(value) - set(keys):
            raise ConfigError(f"{flag}={item!r}: {section}.{field} takes keys {', '.join(keys)}; got "
                              f"{', '.join(sorted(value))}")
        value = kind(**value)
    if isinstance(value, list):
        value = tuple(value)
    return section, field, value
