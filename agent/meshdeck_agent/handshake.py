"""What `attach` needs of the wire protocol before it relays: the protocol version, its exit status for
a version conflict, and the (protocol, agent version) pair a daemon's hello line names.

`attach` runs once per connection (DESIGN §1), and importing the whole protocol module (its parameter
tables and message classes) was about a sixth of its start-up, so these live here and protocol.py
re-exports them. The hello is only read here to decide whether this daemon is ours; the line is relayed
unchanged and the app decodes and checks all of it (protocol.decode).
"""

from __future__ import annotations

import json
from typing import Optional, Tuple

PROTOCOL_VERSION = 1

# `meshdeck-agent attach` exits with this status when a daemon of another agent version (or protocol)
# holds the socket and could not be replaced; its last stderr line names both versions. Retrying the
# same attach cannot help, so the app reports it instead of reconnecting in a loop.
ATTACH_EXIT_VERSION_CONFLICT = 4

# hello.agent (a version) and hello.epoch (16 hex digits today) are short; a longer one is refused.
MAX_HELLO_FIELD_CHARS = 64


def hello_version(line: bytes) -> Optional[Tuple[int, str]]:
    """(protocol, agent version) from a hello line; None when the line is no hello protocol.decode accepts
    in these two fields (an integer protocol, an agent version of at most MAX_HELLO_FIELD_CHARS)."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, an integer past Python's digit bound, or nested
        return None  # past the interpreter's recursion limit (protocol.decode refuses the same lines)
    body = message.get("hello") if isinstance(message, dict) else None
    if not isinstance(body, dict):
        return None
    protocol, agent = body.get("protocol"), body.get("agent", "")
    if isinstance(protocol, bool) or not isinstance(protocol, int):
        return None
    if not isinstance(agent, str) or len(agent) > MAX_HELLO_FIELD_CHARS:
        return None
    return protocol, agent
