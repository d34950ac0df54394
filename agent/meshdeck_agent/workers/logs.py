"""Reading a worker's rotating log by logical byte offset (`workers.logs {id, offset, limit}`).

The keeper writes `<log>`, rotates it to `<log>.1` ... `<log>.<keep>`, and records in logstate.json
the logical offset where the current file starts (`base`). Offsets therefore count every byte the
worker ever wrote, across rotations: a client that polls with the returned `offset` sees each byte
once. If it asks for bytes that were rotated away, it gets the oldest bytes still kept and `start`
says where they begin. Data is decoded as UTF-8 (invalid bytes replaced) and never ends in the middle
of a multi-byte character.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

DEFAULT_LIMIT = 256 * 1024
MAX_LIMIT = 512 * 1024


def _base(state_path: str) -> Tuple[int, int]:
    try:
        with open(state_path) as handle:
            state = json.load(handle)
        return int(state.get("base", 0)), int(state.get("keep", 3))
    except (OSError, ValueError, AttributeError):
        return 0, 3


def _segments(path: str, state_path: str) -> Tuple[List[Tuple[str, int, int]], int]:
    """[(file, logical start, length)] oldest first, and the total logical size."""
    base, keep = _base(state_path)
    try:
        current = os.path.getsize(path)
    except OSError:
        current = 0
    segments = [(path, base, current)]
    start = base
    for number in range(1, keep + 1):
        rotated = "%s.%d" % (path, number)
        try:
            length = os.path.getsize(rotated)
        except OSError:
            break
        start -= length
        if start < 0:
            break
        segments.append((rotated, start, length))
    segments.reverse()
    return segments, base + current


def _utf8_cut(data: bytes) -> bytes:
    """Drop an incomplete UTF-8 sequence at the end (at most 3 bytes)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue
        if byte & 0x80 == 0:
            return data
        needed = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4
        return data if back >= needed else data[:-back]
    return data


def read_log(path: str, state_path: str, offset: Optional[int], limit: Optional[int] = None) -> Dict[str, Any]:
    """{"data": str, "offset": next offset, "size": total logical size, "start": offset of data[0]}.

    `offset` None means the tail: the last `limit` bytes.
    """
    limit = DEFAULT_LIMIT if limit is None else max(1, min(MAX_LIMIT, limit))
    for _attempt in range(3):
        before = _base(state_path)[0]
        segments, size = _segments(path, state_path)
        oldest = segments[0][1] if segments else size
        start = max(0, size - limit) if offset is None else offset
        start = max(start, oldest)
        chunks: List[bytes] = []
        wanted = limit
        position = start
        for file_path, seg_start, length in segments:
            seg_end = seg_start + length
            if position >= seg_end or wanted <= 0:
                continue
            try:
                with open(file_path, "rb") as handle:
                    handle.seek(position - seg_start)
                    piece = handle.read(min(wanted, seg_end - position))
            except OSError:
                piece = b""
            chunks.append(piece)
            position += len(piece)
            wanted -= len(piece)
        if _base(state_path)[0] != before:
            continue  # rotated while we read: try again
        data = b"".join(chunks)
        if start >= size:
            return {"data": "", "offset": size, "size": size, "start": size}
        cut = _utf8_cut(data) or data
        return {
            "data": cut.decode("utf-8", errors="replace"),
            "offset": start + len(cut),
            "size": size,
            "start": start,
        }
    return {"data": "", "offset": offset or 0, "size": 0, "start": offset or 0}
