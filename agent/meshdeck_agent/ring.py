"""The sample ring: every sample the agent took, seq-numbered, kept for a client that reconnects.

Samples are stored pre-encoded (the exact JSON bytes that go on the wire) and, once a block of
`block_samples` is full, zlib-compressed as one block: consecutive samples share their keys and most
digits, so a 16-GPU sample of ~18 KB costs about 1.2 KB. The ring keeps at least `capacity` samples
(7200 = 2 h at 1 Hz by default) and never more than `max_bytes` (24 MiB) of blocks: 2 h of a simulated
16-GPU server take about 9 MiB. The oldest block goes first. A reader whose `since_seq` fell off the front is told how many samples it lost (`dropped`).

Replies are spliced from the stored bytes without decoding them again (`RingRead.chunks`). A sample is
appended as its record (wire_sample.Sample) and serialised here, once, with `Sample.to_wire`.
"""

from __future__ import annotations

import json
import threading
import zlib
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Deque, Dict, List, Optional

from .wire_sample import Sample

DEFAULT_CAPACITY = 7200
DEFAULT_BLOCK_SAMPLES = 60
DEFAULT_MAX_BYTES = 24 * 1024 * 1024


@dataclass(frozen=True)
class RingRead:
    """What `read` found: encoded samples (JSON objects, no newline) and where they sit in the ring."""

    chunks: List[bytes]
    dropped: int  # samples after since_seq that the ring no longer holds
    first_seq: int  # oldest seq held (0 when empty)
    last_seq: int  # newest seq held (0 when empty)
    next_since: int  # pass this as since_seq to continue after what was returned

    def samples_json(self) -> bytes:
        return b"[" + b",".join(self.chunks) + b"]"


@dataclass
class _Block:
    first_seq: int
    count: int
    data: bytes  # zlib of the samples joined by b"\n"


def encode_sample(sample: Dict[str, Any]) -> bytes:
    try:
        return json.dumps(sample, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    except ValueError:
        from .protocol import _finite

        return json.dumps(_finite(sample), separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class SampleRing:
    """Thread-safe ring of encoded samples. `append` assigns the seq."""

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        block_samples: int = DEFAULT_BLOCK_SAMPLES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        first_seq: int = 1,
    ) -> None:
        if capacity < 1 or block_samples < 1 or max_bytes < 1:
            raise ValueError("capacity, block_samples and max_bytes must be positive")
        self.capacity = capacity
        self.block_samples = block_samples
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._blocks: Deque[_Block] = deque()
        self._blocks_bytes = 0
        self._blocks_samples = 0
        self._open: List[bytes] = []
        self._open_first = first_seq
        self._next_seq = first_seq
        self._evicted = 0
        self._latest: Optional[Sample] = None
        self._cache_first = -1
        self._cache_lines: List[bytes] = []

    # -- writing ---------------------------------------------------------------------------------

    def append(self, sample: Sample) -> int:
        """Store `sample` under the next seq (its own `seq` is replaced) and return that seq."""
        with self._lock:
            seq = self._next_seq
            sample = replace(sample, seq=seq)
            encoded = encode_sample(sample.to_wire())
            if not self._open:
                self._open_first = seq
            self._open.append(encoded)
            self._next_seq = seq + 1
            self._latest = sample
            if len(self._open) >= self.block_samples:
                self._seal()
            self._evict()
            return seq

    def _seal(self) -> None:
        data = zlib.compress(b"\n".join(self._open), 6)
        self._blocks.append(_Block(self._open_first, len(self._open), data))
        self._blocks_bytes += len(data)
        self._blocks_samples += len(self._open)
        self._open = []
        self._open_first = self._next_seq

    def _evict(self) -> None:
        open_count = len(self._open)
        while self._blocks:
            oldest = self._blocks[0]
            held_after = self._blocks_samples - oldest.count + open_count
            if held_after >= self.capacity or self._blocks_bytes > self.max_bytes:
                self._blocks.popleft()
                self._blocks_bytes -= len(oldest.data)
                self._blocks_samples -= oldest.count
                self._evicted += oldest.count
                if self._cache_first == oldest.first_seq:
                    self._cache_first, self._cache_lines = -1, []
            else:
                break

    # -- reading ---------------------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        with self._lock:
            return self._next_seq - 1 if self._held() else 0

    @property
    def first_seq(self) -> int:
        with self._lock:
            return self._first_held()

    def __len__(self) -> int:
        with self._lock:
            return self._held()

    def _held(self) -> int:
        return self._blocks_samples + len(self._open)

    def _first_held(self) -> int:
        if self._blocks:
            return self._blocks[0].first_seq
        return self._open_first if self._open else 0

    def latest(self) -> Optional[Sample]:
        """The newest sample, or None before the first."""
        with self._lock:
            return self._latest

    def stats(self) -> Dict[str, int]:
        with self._lock:
            return {
                "held": self._held(),
                "evicted": self._evicted,
                "block_bytes": self._blocks_bytes,
                "open_bytes": sum(len(x) for x in self._open),
                "first_seq": self._first_held(),
                "last_seq": self._next_seq - 1 if self._held() else 0,
            }

    def read(self, since_seq: int, limit: Optional[int] = None, max_bytes: int = 3 * 1024 * 1024) -> RingRead:
        """Samples with seq > since_seq, oldest first, at most `limit` of them and about `max_bytes`.

        At least one sample is returned when one exists, whatever its size.
        """
        with self._lock:
            held = self._held()
            if not held:
                return RingRead([], 0, 0, 0, since_seq)
            first = self._first_held()
            last = self._next_seq - 1
            dropped = max(0, first - 1 - since_seq)
            start = max(since_seq + 1, first)
            chunks: List[bytes] = []
            size = 0
            seq = start
            while seq <= last:
                if limit is not None and len(chunks) >= limit:
                    break
                encoded = self._get(seq)
                if chunks and size + len(encoded) + 1 > max_bytes:
                    break
                chunks.append(encoded)
                size += len(encoded) + 1
                seq += 1
            next_since = seq - 1 if chunks else max(since_seq, first - 1)
            return RingRead(chunks, dropped, first, last, next_since)

    def _get(self, seq: int) -> bytes:
        if self._open and seq >= self._open_first:
            return self._open[seq - self._open_first]
        for block in self._blocks:
            if block.first_seq <= seq < block.first_seq + block.count:
                if self._cache_first != block.first_seq:
                    self._cache_lines = zlib.decompress(block.data).split(b"\n")
                    self._cache_first = block.first_seq
                return self._cache_lines[seq - block.first_seq]
        raise KeyError(seq)
