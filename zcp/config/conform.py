"""How a config value is checked against a schema's annotations: `conform` (types), `build` (a dataclass from a
mapping, unknown keys refused with a did-you-mean), `plain` (a resolved plain copy of a DictConfig).

The machinery under every schema of zcp.config (zcp.config.groups, zcp.config.jobs) and of the packages that
reuse it; it imports only zcp.config.checks and zcp.errors.
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from zcp.config.checks import (
    check_value,
    key_alias,
    unknown_key_message,
    user_key,
)
from zcp.errors import ConfigError

# ---------------------------------------------------------------------------------------------- validation
# the prefix each group schema's messages use (its usual place), so a schema checked elsewhere names the real key
MESSAGE_PREFIX: dict[type, str] = {}  # filled by zcp.config.groups / zcp.config.jobs, next to the classes


def _message_prefix(cls: type) -> str | None:
    return MESSAGE_PREFIX.get(cls)


def _describe(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [_describe(a) for a in args if a is not type(None)]
        return ("null or " if type(None) in args else "") + " or ".join(inner)
    if origin in (list, tuple, collections.abc.Sequence):
        plural = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}
        return f"a list of {plural[args[0]]}" if args and args[0] in plural else "a list"
    if origin in (dict, collections.abc.Mapping) or tp is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return f"a mapping of {tp.__name__} keys"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, str(tp))


def _unset(value: Any) -> bool:
    """A value validation leaves to the job: `???` (required, not given) or an interpolation it could not resolve."""
    return isinstance(value, str) and (value == "???" or "${" in value)


def conform(value: Any, tp: Any, key: str) -> Any:
    """`value` checked against the annotation `tp` (ConfigError naming `key`); mappings of a dataclass schema
    are built into it (`build`). Numbers stay as given (an int where a float is expected is fine)."""
    if tp is Any or _unset(value) or isinstance(tp, (str, typing.TypeVar)):
        return value
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            if type(None) in args:
                return None
            raise ConfigError(f"{user_key(key)}=None: must be {_describe(tp)}")
        members = [a for a in args if a is not type(None)]
        errors = []
        for a in sorted(members, key=lambda a: not dataclasses.is_dataclass(a)):
            try:
                return conform(value, a, key)
            except ConfigError as e:
                errors.append(e)
        if len(members) == 1 or (isinstance(value, dict) and any(dataclasses.is_dataclass(a) for a in members)):
            raise errors[0]
        raise ConfigError(f"{user_key(key)}={value!r}: must be {_describe(tp)}")
    if origin is typing.Literal:
        check_value(value in args, key, value, f"one of {list(args)}")
        return value
    if value is None:
        raise ConfigError(f"{user_key(key)}=None: must be {_describe(tp)}")
    if dataclasses.is_dataclass(tp):
        check_value(isinstance(value, dict), key, value, _describe(tp))
        return build(tp, value, key)
    if origin in (list, tuple, collections.abc.Sequence) or tp in (list, tuple):
        check_value(isinstance(value, (list, tuple)), key, value, _describe(tp))
        elem = args[0] if args and args[0] is not Ellipsis else Any
        return [conform(v, elem, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin in (dict, collections.abc.Mapping) or tp is dict:
        check_value(isinstance(value, dict), key, value, _describe(tp))
        vt = args[1] if len(args) == 2 else Any
        return {k: conform(v, vt, f"{key}.{k}") for k, v in value.items()}
    if tp is bool:
        check_value(isinstance(value, bool), key, value, _describe(tp))
    elif tp is int:
        check_value(isinstance(value, int) and not isinstance(value, bool), key, value, _describe(tp))
    elif tp is float:
        check_value(isinstance(value, (int, float)) and not isinstance(value, bool), key, value, _describe(tp))
    elif tp is str:  # Hydra gives `name=3` as an int; a typed str field would have converted it
        check_value(isinstance(value, (str, int, float)) and not isinstance(value, bool), key, value, _describe(tp))
    return value


def build(cls: type, values: Mapping[str, Any], where: str) -> Any:
    """An instance of the schema `cls` from a mapping: every key known (`EXTRA_KEYS` too), every value of its
    field's type (a field's `metadata["schema"]` overrides its annotation), then the ranges of `__post_init__`.
    `where` is the mapping's place ("" = the top level), named by every message. A schema with
    `KEEP_EXTRA_KEYS = True` gets its checked `EXTRA_KEYS` values as attributes (ModelConfig's run-time engines)."""
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    extra = getattr(cls, "EXTRA_KEYS", {})
    for k in values:
        if k not in fields and k not in extra:
            raise ConfigError(unknown_key_message(where, str(k), [*fields, *extra]))
    kwargs: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    for k, v in values.items():
        key = f"{where}.{k}" if where else str(k)
        if k in extra:
            checked = conform(v, extra[k], key)
            if getattr(cls, "KEEP_EXTRA_KEYS", False):
                kept[k] = checked
            continue
        if _unset(v):
            continue  # the job reports a missing value itself (or keeps the interpolation)
        kwargs[k] = conform(v, fields[k].metadata.get("schema", hints.get(k, Any)), key)
    prefix = _message_prefix(cls)
    with key_alias(prefix, where) if prefix and where and prefix != where else contextlib.nullcontext():
        try:
            obj = cls(**kwargs)
        except TypeError as e:
            if "__init__()" not in str(e):  # a bug in a check, not a user's key
                raise
            raise ConfigError(f"{where or 'config'}: {e}") from None
    for k, v in kept.items():
        setattr(obj, k, v)
    return obj


def _hints(cls: type) -> dict[str, Any]:
    """Field annotations as types (a string one that does not resolve: Any, never a silent skip of the rest)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # resolve field by field
        out: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            out[f.name] = f.type if not isinstance(f.type, str) else Any
        return out


def plain(cfg: Any) -> Any:
    """A plain (dict/list) copy of a config with interpolations resolved; a value that does not resolve here
    (`${hydra:...}` outside a Hydra run, a `???`) is kept as written."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(cfg, (DictConfig, ListConfig)):
        try:
            return OmegaConf.to_container(cfg, resolve=True)
        except Exception:  # resolve key by key below
            keys = list(cfg.keys()) if isinstance(cfg, DictConfig) else list(range(len(cfg)))
            out = {k: _plain_child(cfg, k) for k in keys}
            return out if isinstance(cfg, DictConfig) else list(out.values())
    if isinstance(cfg, Mapping):
        return {k: plain(v) for k, v in cfg.items()}
    if isinstance(cfg, (list, tuple)):
        return [plain(v) for v in cfg]
    return cfg


def _plain_child(node: Any, key: Any) -> Any:
    try:
        value = node[key]
    except Exception:  # unresolvable or missing: the raw text
        raw = node._get_node(key)
        return raw._value() if hasattr(raw, "_value") else str(raw)
    return plain(value)


