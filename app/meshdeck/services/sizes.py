"""Byte sizes as a person types and reads them (`50GB`, `500MiB`), through pydantic's ByteSize.

GB, MB, TB are decimal (10^9 ...), GiB, MiB, TiB binary, as `df -H` and `df -h` say them."""

from __future__ import annotations

from pydantic import ByteSize, TypeAdapter, ValidationError

from meshdeck.core.errors import InputError

_BYTE_SIZE = TypeAdapter(ByteSize)
_NO_LIMIT = ("none", "unlimited", "off")


def parse_size(text: str, *, field: str) -> int | None:
    """Bytes from `50GB` / `50 GiB` / `123456`; None for `none` (no limit). InputError names `field`."""
    if text.strip().lower() in _NO_LIMIT:
        return None
    try:
        return int(_BYTE_SIZE.validate_python(text.strip()))
    except ValidationError:
        raise InputError(field, f"{text!r} is not a size: use e.g. 50GB, 500MiB, 2TB, or 'none'") from None


def format_size(size: int) -> str:
    """`50.0GB`: decimal units, one decimal."""
    return ByteSize(size).human_readable(decimal=True)
