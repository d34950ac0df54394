"""The process's open-file limit, raised for a fleet: every host holds descriptors while it is connected.

A host reached over SSH holds one socket; a local or demo host holds the three pipes of its `attach`
process (stdin, stdout, stderr). The read hub (read_hub.py) waits on all of them with epoll, which has
no FD_SETSIZE ceiling, but the kernel's soft RLIMIT_NOFILE — 1,024 on most desktops — is a hard stop:
past it, connecting host 300-odd fails with "Too many open files", and so does opening the database or
a log. The hard limit is usually far higher (524,288 under systemd), and raising the soft one up to it
needs no privilege, so the console and the CLI raise it once at start.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

log = logging.getLogger(__name__)

WANTED_OPEN_FILES = 65_536  # ~20,000 local hosts' pipes, far more SSH hosts; the rest is the hard limit's


@dataclass(frozen=True)
class OpenFilesLimit:
    before: int
    now: int
    hard: int


def raise_open_files_limit(wanted: int = WANTED_OPEN_FILES) -> OpenFilesLimit:
    """Raise the soft limit on open files to `wanted` (within the hard limit); never lowers it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < ceiling:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
        except (ValueError, OSError) as exc:  # a sandbox that refuses: the fleet works up to the soft limit
            log.warning("could not raise the open-file limit from %d to %d (%s)", soft, ceiling, exc)
            return OpenFilesLimit(soft, soft, hard)
        log.debug("open-file limit raised from %d to %d (hard limit %d)", soft, ceiling, hard)
        return OpenFilesLimit(soft, ceiling, hard)
    return OpenFilesLimit(soft, soft, hard)
