"""Hypothesis strategies of protobuf requests built from their descriptors (any service)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import strategies as st

Overrides = Mapping[str, st.SearchStrategy[Any]]

# Codes a handler may legitimately answer with; UNKNOWN/INTERNAL mean it crashed.
CLEAN_STATUS = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,
}

_text = st.one_of(
    st.text(max_size=24),
    st.sampled_from(["", "n0", "n0/dram", "k", "(", "[a-", "a" * 300, "\x00", "*", "../x"]),
)
_U64 = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 4096, 2**63, 2**64 - 1]))


def _field(f: FieldDescriptor, depth: int, over: Overrides) -> st.SearchStrategy[Any]:
    t = f.type
    if f.name in over:
        s: st.SearchStrategy[Any] = over[f.name]
    elif t == FieldDescriptor.TYPE_STRING:
        s = _text
    elif t == FieldDescriptor.TYPE_BYTES:
        s = st.binary(max_size=32)
    elif t == FieldDescriptor.TYPE_BOOL:
        s = st.booleans()
    elif t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        s = _U64
    elif t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        s = st.integers(0, 2**32 - 1)
    elif t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64):
        s = st.integers(-(2**63), 2**63 - 1)
    elif t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32):
        s = st.integers(-(2**31), 2**31 - 1)
    elif t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        s = st.floats(
            allow_nan=True, allow_infinity=True, width=32 if t == FieldDescriptor.TYPE_FLOAT else 64
        )
    elif t == FieldDescriptor.TYPE_ENUM and f.enum_type is not None:
        s = st.sampled_from([v.number for v in f.enum_type.values])
    elif t == FieldDescriptor.TYPE_MESSAGE and f.message_type is not None and depth < 3:
        s = message(f.message_type, depth + 1, over)
    else:
        return st.nothing()
    if f.is_repeated:
        return st.lists(s, max_size=4)
    return s


def message(
    desc: Descriptor, depth: int = 0, over: Overrides | None = None
) -> st.SearchStrategy[Any]:
    """A strategy of ``desc`` messages with any subset of fields set to random values.

    Args:
        desc: the message descriptor.
        depth: nesting level (messages deeper than 3 are left unset).
        over: strategies for fields by name, replacing the type's default.
    """
    over = over or {}
    cls = message_factory.GetMessageClass(desc)
    fields = {f.name: _field(f, depth, over) for f in desc.fields}
    fields = {k: v for k, v in fields.items() if not v.is_empty}
    return st.fixed_dictionaries({}, optional=fields).map(lambda kw: _build(cls, kw))


def _build(cls: Any, kw: dict[str, Any]) -> Any:
    msg = cls()
    for k, v in kw.items():
        f = msg.DESCRIPTOR.fields_by_name[k]
        if f.is_repeated:
            getattr(msg, k).extend(v)
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(msg, k).CopyFrom(v)
        else:
            setattr(msg, k, v)
    return msg
