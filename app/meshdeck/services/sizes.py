"""Byte sizes as a person types and reads them (`50GB`, `500MiB`), through pydantic's ByteSize.

GB, MB, TB are decimal (10^9 ...), GiB, MiB, TiB binary, as `df -H` and `df -h` say them. Either is read;
sizes are written in the binary units, as every memory figure of meshdeck is (GiB, as nvidia-smi's MiB and
vLLM's startup log), so "50GB" typed reads back as "46.6GiB" beside a GPU's "140.0GiB" (no space: one column of a table)."""

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


_BINARY_UNITS = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def format_size(size: int) -> str:
    """`46.6GiB`: binary units, one decimal (`512B` under a KiB), no space (one column of a CLI table)."""
    for factor, unit in _BINARY_UNITS:
        if abs(size) >= factor:
            return f"{size / factor:.1f}{unit}"
    return f"{size:.0f}B"
