"""One generic (de)serializer for the record's typed sections: the same dataclass writes a
section of record.json and reads it back.

:func:`encode` walks a dataclass's fields (in declaration order) into JSON values;
:func:`decode` builds the dataclass back from JSON, guided by the fields' type hints:
dataclasses, ``dict[str, X]``, ``list[X]``, ``tuple[X, ...]``, ``X | None`` and other
unions, ``Literal[...]``, ``str`` / ``int`` / ``float`` / ``bool`` and the JSON alias
:data:`JsonValue` (open-ended data kept as written: the recorded config, host facts).
Decoding is strict: an unknown key, a missing key or a value of the wrong type is a
:class:`~quantkit.errors.RecordError` naming its key path. Records of older schema versions
are made current by :mod:`quantkit.record.migrate` before they are decoded.

Three field helpers say how a field is written: :func:`optional` (the key is left out while
the value is None: written only by the runs that have it), :func:`section` (a section of a
stage that did not run: None, written as ``{}``) and :func:`inline` (a group of keys written
together or not at all, in the parent object). A type that needs its own JSON form
registers an encoder and a decoder beside it (as Polygraphy's ``Encoder.register`` /
``Decoder.register`` do in ``comparator/struct.py``); :func:`to_dict_codec` does it in one
line for a domain type that writes itself with ``to_dict()``::

    @encoder(EmbeddingRecord)
    def _encode_embedding(e: EmbeddingRecord) -> JsonValue: ...

    @decoder(EmbeddingRecord)
    def _decode_embedding(data: JsonValue, where: str) -> EmbeddingRecord: ...
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from pathlib import PurePath
from typing import Literal, TypeVar, Union

import numpy as np

from quantkit.errors import RecordError

__all__ = ["JsonObject", "JsonValue", "RecordError", "decode", "decode_fields", "decoder",
           "encode", "encoder", "inline", "optional", "section", "to_dict_codec"]

#: A JSON value of any kind (what ``json.load`` returns): for open-ended recorded data.
JsonValue = Union[str, int, float, bool, None, list["JsonValue"], dict[str, "JsonValue"]]
#: A JSON object.
JsonObject = dict[str, JsonValue]

T = TypeVar("T")

_OMIT, _EMPTY, _INLINE = "record_omit_none", "record_empty_section", "record_inline"
_ENCODERS: dict[type, Callable[[object], JsonValue]] = {}
_DECODERS: dict[type, Callable[[JsonValue, str], object]] = {}
_JSON_LEAVES = (str, int, float, bool, type(None))


def optional(default: object = None) -> dataclasses.Field:
    """A field whose key is written only while its value is not None (what some runs
    record and others do not: an absent key reads back as ``default``)."""
    return dataclasses.field(default=default, metadata={_OMIT: True})


def section() -> dataclasses.Field:
    """A section of a stage that may not have run: None, written as ``{}`` (and ``{}``, or
    no key at all in a record written before the section existed, read back as None), as
    record.json has always written it."""
    return dataclasses.field(default=None, metadata={_EMPTY: True})


def inline(*, required: bool = False) -> dataclasses.Field:
    """A dataclass-typed field whose keys stand in the parent object itself: all of them
    written when it is set (nulls included), none while it is None (``X | None``); read
    back when any of them is there. For keys that are written together or not at all;
    ``required``: always there (typed ``X``: a group of the parent's keys)."""
    if required:
        return dataclasses.field(metadata={_INLINE: True})
    return dataclasses.field(default=None, metadata={_OMIT: True, _INLINE: True})


def encoder(tp: type) -> Callable:
    """Register ``fn(obj) -> JsonValue`` as the JSON form of ``tp`` (beside the type)."""
    def register(fn: Callable[[T], JsonValue]) -> Callable[[T], JsonValue]:
        _ENCODERS[tp] = fn
        return fn
    return register


def decoder(tp: type) -> Callable:
    """Register ``fn(data, where) -> tp`` as the reader of ``tp``'s JSON form."""
    def register(fn: Callable[[JsonValue, str], T]) -> Callable[[JsonValue, str], T]:
        _DECODERS[tp] = fn
        return fn
    return register


def to_dict_codec(tp: type, *, derived: dict[str, object] | None = None,
                  left_out: dict[str, JsonValue] | None = None) -> None:
    """Register the JSON form of a domain type that writes itself: its ``to_dict()``, read
    back field by field; each key of ``derived`` (name -> type: written for the reader,
    computed from the fields) checked and dropped, each key of ``left_out`` (name -> value)
    filled in where ``to_dict`` leaves it out."""
    @encoder(tp)
    def _encode(obj: object) -> JsonValue:
        return encode(obj.to_dict())  # type: ignore[attr-defined]

    @decoder(tp)
    def _decode(data: JsonValue, where: str) -> object:
        d = dict(decode(JsonObject, data, where))
        for key, kind in (derived or {}).items():
            decode(kind, d.pop(key, None), f"{where}.{key}")
        for key, value in (left_out or {}).items():
            d.setdefault(key, value)
        return decode_fields(tp, d, where)


# ----------------------------------------------------------------------------- encode

def encode(obj: object) -> JsonValue:
    """``obj`` (a record dataclass, or any value of a field's type) as JSON values: fields in
    declaration order, :func:`optional` ones left out while None, :func:`section` ones
    ``{}`` while None; numpy scalars and arrays as Python numbers and lists."""
    enc = _ENCODERS.get(type(obj))
    if enc is not None:
        return enc(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, JsonValue] = {}
        for f in _fields(type(obj)):
            value = getattr(obj, f.name)
            if value is None and f.metadata.get(_OMIT):
                continue
            if f.metadata.get(_INLINE):
                out.update(encode(value))  # type: ignore[arg-type]
                continue
            out[f.name] = {} if value is None and f.metadata.get(_EMPTY) else encode(value)
        return out
    if isinstance(obj, dict):
        return {k if isinstance(k, str) else _key(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode(v) for v in obj]
    if isinstance(obj, _JSON_LEAVES):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, PurePath):
        return str(obj)
    raise TypeError(f"no JSON form for a {type(obj).__name__} in a record")


def _key(k: object) -> str:
    """A non-string mapping key as json.dumps writes it (1 -> "1", True -> "true")."""
    if isinstance(k, (bool, type(None))):
        return {True: "true", False: "false", None: "null"}[k]
    return str(k.item() if isinstance(k, np.generic) else k)


# ----------------------------------------------------------------------------- decode

def decode(tp: type[T] | object, data: object, where: str = "record") -> T:
    """``data`` (parsed JSON) as a value of ``tp``; a :class:`RecordError` naming the key
    path ``where`` when it does not fit (an unknown or missing key, a wrong type)."""
    dec = _DECODERS.get(tp)  # type: ignore[call-overload]
    if dec is not None:
        return dec(data, where)  # type: ignore[return-value]
    if _is_json(tp) or tp is typing.Any:  # open data (a domain type's ``dict[str, Any]``)
        return _json(data, where)  # type: ignore[return-value]
    if tp in (dict, list):  # a domain type's bare ``dict`` / ``list``: open JSON of that kind
        if not isinstance(data, tp):
            raise _wrong(where, data, "an object" if tp is dict else "a list")
        return _json(data, where)  # type: ignore[return-value]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return decode_fields(tp, data, where)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return _union(args, data, where)
    if origin is Literal:
        if data in args and isinstance(data, tuple({type(a) for a in args})):
            return data  # type: ignore[return-value]
        raise _wrong(where, data, " or ".join(repr(a) for a in args))
    if origin is dict:
        if not isinstance(data, dict):
            raise _wrong(where, data, "an object")
        return {k: decode(args[1], v, f"{where}.{k}") for k, v in data.items()}  # type: ignore
    if origin in (list, tuple):
        if not isinstance(data, list):
            raise _wrong(where, data, "a list")
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(data) != len(args):
                raise _wrong(where, data, f"a list of {len(args)}")
            return tuple(decode(a, v, f"{where}[{i}]")  # type: ignore[return-value]
                         for i, (a, v) in enumerate(zip(args, data)))
        items = [decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(data)]
        return tuple(items) if origin is tuple else items  # type: ignore[return-value]
    return _leaf(tp, data, where)


def _leaf(tp: object, data: object, where: str) -> object:
    ok = {str: isinstance(data, str), bool: isinstance(data, bool),
          int: isinstance(data, int) and not isinstance(data, bool),
          float: isinstance(data, (int, float)) and not isinstance(data, bool),
          type(None): data is None}
    if tp not in ok:
        raise TypeError(f"the record schema names a type the serializer does not know: {tp!r}")
    if not ok[tp]:  # type: ignore[index]
        raise _wrong(where, data, getattr(tp, "__name__", str(tp)))
    return data


def _union(args: tuple, data: object, where: str) -> object:
    if data is None and type(None) in args:
        return None
    errors = []
    for a in sorted((a for a in args if a is not type(None)), key=lambda a: -_overlap(a, data)):
        try:
            return decode(a, data, where)
        except RecordError as err:
            errors.append(err)
    first = errors[0]  # the alternative whose keys fit ``data`` best says what is wrong
    if first.where != where or len(errors) == 1:
        raise first
    raise _wrong(where, data, " or ".join(_name(a) for a in args))


def _overlap(tp: object, data: object) -> int:
    """How many of ``data``'s keys are fields of the dataclass ``tp`` (0 for other types)."""
    if not (isinstance(data, dict) and isinstance(tp, type) and dataclasses.is_dataclass(tp)):
        return 0
    return len(set(data) & {f.name for f in _fields(tp)})


def _is_json(tp: object) -> bool:
    """Whether ``tp`` is :data:`JsonValue` (as ``typing.get_type_hints`` resolves it: the
    alias's forward references evaluated, so recognised by its members, not by identity)."""
    args = typing.get_args(tp) if typing.get_origin(tp) is Union else ()
    return set(_JSON_LEAVES) <= set(args) and \
        {typing.get_origin(a) for a in args} >= {list, dict}


def _json(data: object, where: str) -> object:
    """Open-ended data: any JSON value, checked to be one."""
    if isinstance(data, dict):
        for k, v in data.items():
            if not isinstance(k, str):
                raise _wrong(where, k, "a string key")
            _json(v, f"{where}.{k}")
    elif isinstance(data, list):
        for i, v in enumerate(data):
            _json(v, f"{where}[{i}]")
    elif not isinstance(data, _JSON_LEAVES):
        raise _wrong(where, data, "a JSON value")
    return data


def decode_fields(cls: type[T], data: object, where: str) -> T:
    """``data`` as the dataclass ``cls`` field by field (what :func:`decode` does for a
    dataclass without a registered decoder; a registered decoder may call it)."""
    if not isinstance(data, dict):
        raise _wrong(where, data, f"an object ({cls.__name__})")
    fields = _fields(cls)
    hints = _hints(cls)
    inlined = {f.name: _inline_type(hints[f.name]) for f in fields if f.metadata.get(_INLINE)}
    names = {f.name for f in fields if f.name not in inlined}
    names |= {g.name for t in inlined.values() for g in _fields(t)}
    unknown = [k for k in data if k not in names]
    if unknown:
        raise RecordError(f"unknown key in a {cls.__name__}", where=f"{where}.{unknown[0]}",
                          value=unknown[0], fix=_FIX)
    kwargs = {}
    for f in fields:
        if f.name in inlined:
            keys = {g.name for g in _fields(inlined[f.name])}
            part = {k: v for k, v in data.items() if k in keys}
            if part or not f.metadata.get(_OMIT):
                kwargs[f.name] = decode_fields(inlined[f.name], part, where)
            continue
        if f.name not in data:
            if f.metadata.get(_OMIT) or f.metadata.get(_EMPTY):
                continue
            raise RecordError(f"missing key of a {cls.__name__}", where=f"{where}.{f.name}",
                              fix=_FIX)
        value = data[f.name]
        if f.metadata.get(_EMPTY) and value == {}:
            kwargs[f.name] = None
            continue
        kwargs[f.name] = decode(hints[f.name], value, f"{where}.{f.name}")
    return cls(**kwargs)


def _inline_type(tp: object) -> type:
    """The dataclass of an :func:`inline` field typed ``X`` or ``X | None``."""
    found = [a for a in (tp, *typing.get_args(tp)) if dataclasses.is_dataclass(a)]
    if len(found) != 1:
        raise TypeError(f"an inline record field must be typed 'X' or 'X | None': {tp!r}")
    return found[0]


_FIX = ("load a record.json through quantkit.load_record (older schema versions are upgraded "
        "by quantkit/record/migrate.py); a record this version wrote fits its schema")


def _wrong(where: str, value: object, expected: str) -> RecordError:
    shown = value if isinstance(value, (*_JSON_LEAVES,)) else type(value).__name__
    return RecordError(f"a value of the wrong type (expected {expected})", where=where,
                       value=shown, fix=_FIX)


def _name(tp: object) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


@functools.cache
def _fields(cls: type) -> tuple[dataclasses.Field, ...]:
    return tuple(f for f in dataclasses.fields(cls) if f.init)


@functools.cache
def _hints(cls: type) -> dict[str, object]:
    # JsonValue's own forward references resolve here, whatever the class's module imports
    return typing.get_type_hints(cls, localns={"JsonValue": JsonValue})
