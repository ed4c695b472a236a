"""Constraints on configuration values, declared on their types: a msgspec :class:`~msgspec.Meta` and the problem a
user reads when a value breaks it.

A field ``port: Port`` (``Annotated[int, Rule(Meta(ge=0, le=65535), "{value} is not a TCP port; ...")]``) carries its
rule; a section calls :func:`check_section` first in ``__post_init__``, which checks every rule of its fields and
of the structs inside them (dictionary keys and values, list items) and raises :class:`ConfigError` at the first
broken one, naming its key path (``platforms.telegram.bots.main``). ``__post_init__`` runs whether a section is
built in Python or decoded from ``config.yaml`` (``msgspec.convert``), so both refuse a bad value the same way and
only cross-field rules remain to be written by hand.

The rule is not a bare ``Meta`` in the annotation: msgspec's decoder would refuse the value first, with its own
``ValidationError`` and message, and a section built in Python would not be checked at all. :meth:`Rule.refuses`
applies the ``Meta`` as msgspec does.

A problem may name ``{value}`` (the value refused) and ``{entry}`` (what the value names, from its field: ``a
bot`` for a key of ``bots``, ``a server`` for ``server_name``).

A value of the wrong type, an unknown field or a wrong enum value is msgspec's to refuse while decoding;
:func:`decode_section` turns its ``ValidationError`` into the same :class:`ConfigError` with a key path, and a
wrong type into one that shows the right shape when the field's rule has an ``example``.
"""

from __future__ import annotations

import enum
import operator
import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from hermes_actors.errors import ConfigError

__all__ = [
    "WEBHOOK_SECRET_HINT",
    "AccountName",
    "BodyBytes",
    "Burst",
    "ListenHost",
    "NonNegativeSeconds",
    "Port",
    "PositiveBytes",
    "PositiveRate",
    "PositiveSeconds",
    "Rule",
    "WebhookSecret",
    "check_section",
    "decode_section",
]


class Rule:
    """A msgspec :class:`~msgspec.Meta` constraint and the problem a user reads when a value breaks it; ``example``
    (optional) shows the value's shape to whoever wrote a value of the wrong type.

    :meth:`refuses` applies the ``Meta``'s bounds (``gt``, ``ge``, ``lt``, ``le``), ``min_length``/``max_length``
    and ``pattern`` (found anywhere, as msgspec does: anchor it) the way msgspec's decoder would; NaN is below and
    above every bound.
    """

    __slots__ = ("_bounds", "_pattern", "example", "meta", "problem")

    def __init__(self, meta: msgspec.Meta, problem: str, *, example: str | None = None) -> None:
        self.meta = meta
        self.problem = problem
        self.example = example
        self._bounds = tuple(
            (compare, bound) for name, compare in _BOUNDS if (bound := getattr(meta, name)) is not None
        )
        self._pattern = None if meta.pattern is None else re.compile(meta.pattern)

    def refuses(self, value: Any) -> bool:
        """Whether ``value`` breaks the constraint (a value it cannot be compared with does)."""
        try:
            for compare, bound in self._bounds:
                if not compare(value, bound):
                    return True
            return self._pattern is not None and self._pattern.search(value) is None
        except TypeError:
            return True

    def __repr__(self) -> str:
        return f"Rule({self.meta!r}, {self.problem!r})"


def _long_enough(value: Any, length: int) -> bool:
    return len(value) >= length


def _short_enough(value: Any, length: int) -> bool:
    return len(value) <= length


_BOUNDS: tuple[tuple[str, Callable[[Any, Any], bool]], ...] = (
    ("gt", operator.gt),
    ("ge", operator.ge),
    ("lt", operator.lt),
    ("le", operator.le),
    ("min_length", _long_enough),
    ("max_length", _short_enough),
)

AccountName = Annotated[
    str,
    Rule(
        Meta(pattern=r"^[A-Za-z0-9_-]{1,64}\Z"),
        "{entry} name is 1 to 64 letters, digits, '_' or '-' (it is the account in session keys)",
    ),
]
"""The name of a bot, app, robot, route or mailbox in its section: the ``account_id`` of what it receives."""
Port = Annotated[int, Rule(Meta(ge=0, le=65535), "{value} is not a TCP port; use 0..65535 (0 picks a free one)")]
ListenHost = Annotated[str, Rule(Meta(pattern=r"\S"), "must not be empty; use 127.0.0.1 to listen on loopback only")]
PositiveSeconds = Annotated[float, Rule(Meta(gt=0), "must be a positive number of seconds")]
NonNegativeSeconds = Annotated[float, Rule(Meta(ge=0), "must not be negative: a number of seconds, at least 0")]
PositiveRate = Annotated[float, Rule(Meta(gt=0), "must be a positive number")]
Burst = Annotated[int, Rule(Meta(ge=1), "must be at least 1 message")]
BodyBytes = Annotated[int, Rule(Meta(ge=1024), "must be at least 1024 bytes; leave it out for the default")]
PositiveBytes = Annotated[int, Rule(Meta(ge=1), "must be a positive number of bytes")]
WEBHOOK_SECRET_HINT = (
    "generate one with: python -c \"import secrets,base64;print('whsec_'+base64.b64encode(secrets.token_bytes(24))"
    '.decode())"'
)
WebhookSecret = Annotated[
    str,
    Rule(
        Meta(pattern=r"^whsec_(?:[A-Za-z0-9+/]{4}){8,}(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\Z"),
        f"must be 'whsec_' followed by the base64 of at least 24 random bytes; {WEBHOOK_SECRET_HINT}",
    ),
]
"""A Standard Webhooks secret: ``whsec_`` and the base64 of its HMAC key (at least 24 bytes, as the standard asks)."""

S = typing.TypeVar("S", bound=msgspec.Struct)


class _Fault:
    """A broken rule found below a section: the key path from the section down, last segment first."""

    __slots__ = ("problem", "segments")

    def __init__(self, problem: str) -> None:
        self.problem, self.segments = problem, list[str]()


_Check = Callable[[object, str], _Fault | None]  # (value, the field holding it) -> the fault or None
_STRUCTS: dict[type[msgspec.Struct], _Check | None] = {}


def check_section(section: msgspec.Struct, path: str) -> None:
    """Raise :class:`ConfigError` at the first value in ``section`` (whose key path is ``path``) that breaks the
    :class:`Rule` of its type, looking into the structs, dictionaries and lists it holds."""
    check = _struct_check(type(section))
    fault = check(section, "") if check is not None else None
    if fault is not None:
        raise ConfigError(path + "".join(reversed(fault.segments)), fault.problem)


def _struct_check(struct: type[msgspec.Struct]) -> _Check | None:
    if struct not in _STRUCTS:
        _STRUCTS[struct] = None  # a struct that holds itself is checked to the depth it is built
        # A field still holding its default (the very object) passes without a look: the default is checked here.
        fields = [(f.name, f.default, check) for f in msgspec.structs.fields(struct) if (check := _compile(f.type))]
        for name, default, check in fields:
            if default is not msgspec.NODEFAULT and (fault := check(default, name)) is not None:
                raise TypeError(f"the default of {struct.__name__}.{name} breaks its rule: {fault.problem}")

        def check_fields(value: object, entry: str) -> _Fault | None:
            for name, default, check in fields:
                field = getattr(value, name)
                if field is not default and (fault := check(field, name)) is not None:
                    fault.segments.append(f".{name}")
                    return fault
            return None

        _STRUCTS[struct] = check_fields if fields else None
    return _STRUCTS[struct]


def _compile(kind: object) -> _Check | None:
    """What checking a value of type ``kind`` takes; ``None`` when no rule applies to it."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Annotated:
        return _annotated(_compile(args[0]), [extra for extra in args[1:] if isinstance(extra, Rule)])
    if origin is types.UnionType or origin is typing.Union:
        options = [option for option in args if option not in (type(None), msgspec.UnsetType)]
        return _optional(_compile(options[0])) if len(options) == 1 else None
    if origin is dict:
        return _entries(_compile(args[0]), _compile(args[1]))
    if origin in (list, tuple, set, frozenset) and args:
        return _items(_compile(args[0]))
    if _is_struct(kind):
        return _struct_check(kind)
    return None


def _annotated(inner: _Check | None, rules: list[Rule]) -> _Check | None:
    if not rules:
        return inner

    def check(value: object, entry: str) -> _Fault | None:
        for rule in rules:
            if rule.refuses(value):
                return _Fault(rule.problem.format(value=value, entry=_entry(entry)))
        return inner(value, entry) if inner is not None else None

    return check


def _optional(inner: _Check | None) -> _Check | None:
    if inner is None:
        return None

    def check(value: object, entry: str) -> _Fault | None:
        return None if value is None or value is msgspec.UNSET else inner(value, entry)

    return check


def _entries(key: _Check | None, value: _Check | None) -> _Check | None:
    if key is None and value is None:
        return None

    def check(entries: object, entry: str) -> _Fault | None:
        for name, item in typing.cast(dict[object, object], entries).items():
            fault = key(name, entry) if key is not None else None
            if fault is None and value is not None:
                fault = value(item, entry)
            if fault is not None:
                fault.segments.append(f".{name}")
                return fault
        return None

    return check


def _items(item: _Check | None) -> _Check | None:
    if item is None:
        return None

    def check(items: object, entry: str) -> _Fault | None:
        for index, value in enumerate(typing.cast(list[object], items)):
            if (fault := item(value, entry)) is not None:
                fault.segments.append(f"[{index}]")
                return fault
        return None

    return check


def _entry(field: str) -> str:
    """``a bot`` for the field ``bots``, ``an app`` for ``apps``, ``a server`` for ``server_name``."""
    noun = field.removesuffix("_name").removesuffix("s")
    return f"{'an' if noun[:1] in ('a', 'e', 'i', 'o', 'u') else 'a'} {noun}"


_AT = re.compile(r"^(?P<message>.*?) - at `(?P<path>\$[^`]*)`$")
_AT_KEY = re.compile(r"^(?P<message>.*?) - at `key` in `(?P<path>\$[^`]*)`$")
_TOKEN = re.compile(r"\.(?P<field>\w+)|\[(?P<index>[^\]]*)\]")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<field>[^`]*)`$")
_INVALID_ENUM = re.compile(r"^Invalid enum value ")


def decode_section(obj: object, struct: type[S], path: str) -> S:
    """``obj`` (parsed YAML or JSON) as ``struct``, the section at ``path``; a nested section left empty (YAML null,
    every line of it commented out) reads as ``{}``. Raises :class:`ConfigError` naming the key path."""
    try:
        return msgspec.convert(_empty_sections(obj, struct), struct)
    except msgspec.ValidationError as exc:
        raise _translate(exc, obj, struct, path) from None


def _empty_sections(obj: object, kind: object) -> object:
    if obj is None and (typing.get_origin(kind) is dict or _is_struct(kind)):
        return {}
    if isinstance(obj, dict) and _is_struct(kind):
        return {key: _empty_sections(value, _field_type(kind, str(key))) for key, value in obj.items()}
    if isinstance(obj, dict) and _value_type(kind) is not None:
        return {key: _empty_sections(value, _value_type(kind)) for key, value in obj.items()}
    return obj


def _translate(error: msgspec.ValidationError, obj: object, struct: type[msgspec.Struct], path: str) -> ConfigError:
    """msgspec's ``message - at `$.a[...].b``` as the key path with the real dictionary keys (``path.a.main.b``); an
    unknown field lists the known ones, a wrong enum value the allowed ones."""
    text = str(error)
    key = _AT_KEY.match(text)
    match = key or _AT.match(text)
    message, at = (match["message"], match["path"]) if match else (text, "$")
    names: list[str] = [path]
    node, kind = obj, _unwrap(struct)
    example: str | None = None
    for token in _TOKEN.finditer(at):
        example = None
        if token["field"] is not None:
            names.append(token["field"])
            node = node.get(token["field"]) if isinstance(node, dict) else None
            example = _example(kind, token["field"])
            kind = _field_type(kind, token["field"])
        elif isinstance(node, dict):
            kind = _value_type(kind)
            name, node = _first_invalid(node, kind)
            names.append(name)
        else:
            names[-1] += f"[{token['index']}]"
    if key is not None:
        message += " (for a key)"
    elif (unknown := _UNKNOWN.match(message)) is not None:
        names.append(unknown["field"])
        if _is_struct(kind):
            message = f"unknown field (expected one of: {', '.join(f.name for f in msgspec.structs.fields(kind))})"
        else:
            message = "unknown field"
    elif _INVALID_ENUM.match(message) and isinstance(kind, type) and issubclass(kind, enum.Enum):
        message += f" (expected one of: {', '.join(str(member.value) for member in kind)})"
    elif _INVALID_ENUM.match(message) and typing.get_origin(kind) is typing.Literal:
        message += f" (expected one of: {', '.join(str(value) for value in typing.get_args(kind))})"
    elif example is not None and message.startswith("Expected "):
        message += f"; write {example}"
    return ConfigError(".".join(names), message)


def _example(kind: object, name: str) -> str | None:
    """The ``example`` of the rule on field ``name`` of struct ``kind``, if it has one."""
    if _is_struct(kind):
        for field in msgspec.structs.fields(kind):
            if field.name == name and typing.get_origin(field.type) is Annotated:
                rules = [extra for extra in typing.get_args(field.type)[1:] if isinstance(extra, Rule)]
                return next((rule.example for rule in rules if rule.example is not None), None)
    return None


def _is_struct(kind: object) -> typing.TypeGuard[type[msgspec.Struct]]:
    return isinstance(kind, type) and issubclass(kind, msgspec.Struct)


def _field_type(kind: object, name: str) -> object:
    if _is_struct(kind):
        for field in msgspec.structs.fields(kind):
            if field.name == name:
                return _unwrap(field.type)
    return None


def _value_type(kind: object) -> object:
    args = typing.get_args(kind)
    return _unwrap(args[1]) if typing.get_origin(kind) is dict and len(args) == 2 else None


def _unwrap(kind: object) -> object:
    """``Annotated[X, ...]``, ``X | None`` and ``X | UnsetType`` → ``X``."""
    if typing.get_origin(kind) is Annotated:
        return _unwrap(typing.get_args(kind)[0])
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        options = [a for a in typing.get_args(kind) if a not in (type(None), msgspec.UnsetType)]
        return _unwrap(options[0]) if len(options) == 1 else kind
    return kind


def _first_invalid(entries: dict[Any, Any], entry: object) -> tuple[str, object]:
    # msgspec reports a failing dictionary value as "[...]": the first entry that fails on its own is the one.
    if isinstance(entry, type):
        for key, value in entries.items():
            try:
                msgspec.convert(value, entry)
            except (msgspec.ValidationError, ConfigError):
                return str(key), value
    return "...", None
