"""A small /proc tree of made-up processes, in the kernel's own file formats, for meshdeck_agent.procinfo.

    root = fake_proc(tmp_path, [FakeProcess(4242, ppid=1, uid=1000, cmdline=["python3", "-m", "vllm"])])
    ProcReader(str(root))

Each process gets `stat` (proc(5): "pid (comm) state ppid pgrp session ... starttime(22) ..."), `status`
(with its "Uid:\treal\teffective\tsaved\tfs" line), `cmdline` (arguments NUL-terminated) and `comm`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class FakeProcess:
    pid: int
    ppid: int = 1
    uid: int = 0
    cmdline: list[str] = field(default_factory=list)
    comm: str = "python3"
    session: int | None = None  # default: its own pid (a session leader)
    start_time: int = 1000  # clock ticks since boot
    raw_cmdline: bytes | None = None  # overrides `cmdline` (a huge or non-UTF-8 one)


def _stat_line(process: FakeProcess) -> str:
    session = process.pid if process.session is None else process.session
    # fields after the comm, proc(5) numbering 3..: state ppid pgrp session tty_nr tpgid flags minflt cminflt
    # majflt cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime(22) vsize rss
    after = ["S", process.ppid, session, session, 0, -1, 4194560, 0, 0, 0, 0, 5, 2, 0, 0, 20, 0, 1, 0]
    after += [process.start_time, 123456789, 2048]
    return f"{process.pid} ({process.comm}) " + " ".join(str(v) for v in after) + "\n"


def fake_proc(root: Path, processes: list[FakeProcess]) -> Path:
    """Write the processes under `root` (returned), one directory per pid."""
    root.mkdir(parents=True, exist_ok=True)
    for process in processes:
        folder = root / str(process.pid)
        folder.mkdir()
        (folder / "stat").write_text(_stat_line(process))
        uid = process.uid
        (folder / "status").write_text(f"Name:\t{process.comm}\nState:\tS (sleeping)\nPid:\t{process.pid}\n"
                                       f"PPid:\t{process.ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")  # fmt: skip
        cmdline = process.raw_cmdline
        if cmdline is None:
            cmdline = b"".join(arg.encode() + b"\0" for arg in process.cmdline)
        (folder / "cmdline").write_bytes(cmdline)
        (folder / "comm").write_text(process.comm + "\n")
    return root
