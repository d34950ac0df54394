"""An agent of another version holding a socket, for the attach upgrade test.

It does what a real older daemon does at the level attach sees: takes `<socket>.lock`, writes
`<state dir>/agent.pid`, greets every connection with a hello naming its version, and on SIGTERM
removes its socket and exits. Usage: python old_agent.py SOCKET STATE_DIR VERSION [PROTOCOL]
(PROTOCOL defaults to 1; another number fabricates an agent of another protocol major).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import sys


def main() -> int:
    socket_path, state_dir, version = sys.argv[1:4]
    protocol = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    lock = open(socket_path + ".lock", "a+")  # noqa: SIM115 - held until exit
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(f"/proc/{os.getpid()}/stat", "rb") as handle:
        data = handle.read()
    start_time = int(data[data.rindex(b")") + 2 :].split()[19])
    with open(os.path.join(state_dir, "agent.pid"), "w") as handle:
        json.dump({"pid": os.getpid(), "start_time": start_time, "agent": version}, handle)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(socket_path)
    listener.listen(8)

    def stop(*_: object) -> None:
        os.unlink(socket_path)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        connection, _ = listener.accept()
        connection.sendall(json.dumps({"hello": {"protocol": protocol, "agent": version}}).encode() + b"\n")
        connection.close()


if __name__ == "__main__":
    sys.exit(main())
