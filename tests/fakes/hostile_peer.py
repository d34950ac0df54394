"""What a careless or hostile peer puts on the wire, as hypothesis strategies: any JSON value Python's
json writes (NaN and Infinity included), objects keyed by the protocol's own field names so fuzzed
input gets past the first checks, and lines of raw bytes."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

WIRE_KEYS = ("hello", "id", "method", "params", "result", "error", "event", "data", "protocol", "agent", "epoch")

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
)


def json_values(keys: Sequence[str] = WIRE_KEYS, max_leaves: int = 20) -> st.SearchStrategy[object]:
    """Nested JSON values whose object keys are mostly `keys`."""
    key = st.one_of(st.sampled_from(list(keys)), st.text(max_size=10))
    return st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(key, inner, max_size=5)),
        max_leaves=max_leaves,
    )


def wire_objects(keys: Sequence[str] = WIRE_KEYS) -> st.SearchStrategy[dict]:
    """Objects made of the protocol's field names with any values."""
    return st.dictionaries(st.sampled_from(list(keys)), json_values(keys), max_size=5)


def line(value: object) -> bytes:
    """JSON as a careless or hostile peer writes it: NaN and Infinity included, no newline."""
    return json.dumps(value, allow_nan=True).encode()


garbage_lines = st.binary(max_size=200).map(lambda data: data.replace(b"\n", b" "))


def json_locations(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON value (keys and list indices), the root included."""
    found = [here]
    if isinstance(value, dict):
        for key, item in value.items():
            found += json_locations(item, (*here, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += json_locations(item, (*here, index))
    return found


def mutated(wire: Any, path: tuple[Any, ...], action: str, new: Any) -> Any:
    """A copy of `wire` with the value at `path` replaced or removed, or a value added next to it
    (`action`: "replace", "remove" or "add")."""
    if not path:
        return new
    root = copy.deepcopy(wire)
    parent = root
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if action == "replace":
        parent[last] = new
    elif action == "remove":
        del parent[last]
    elif isinstance(parent, dict):
        parent[f"new_{len(parent)}"] = new
    else:
        parent.insert(last, new)
    return root
