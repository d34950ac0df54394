"""The `processes` answer on the agent: NVML's process lists (a fake pynvml replaying the real structs) joined
with /proc (a made-up tree in the kernel's formats, or this test's own process) and the agent's workers."""

from __future__ import annotations

import copy
import json
import logging
import os
import pwd
from pathlib import Path

from fake_procfs import FakeProcess, fake_proc
from fake_pynvml import build
from meshdeck_agent import protocol
from meshdeck_agent.gpu.catalog import parse_simulate
from meshdeck_agent.gpu.nvml import Nvml, NvmlGpus
from meshdeck_agent.gpu.processes import build_listing, worker_ref
from meshdeck_agent.machine import RealMachine
from meshdeck_agent.procinfo import ProcReader
from meshdeck_agent.protocol import ProcessListing, Sample
from meshdeck_agent.sim.machine import SimulatedMachine
from meshdeck_agent.sim.traffic import SimWorkerActivity
from meshdeck_agent.wire_processes import MAX_COMMAND_CHARS

DELLA = json.loads((Path(__file__).resolve().parents[2] / "fakes" / "nvml_capture_h100_della.json").read_text())
GIB = 1 << 30
NOW = 1_764_480_000.0
USERS = {0: "root", 1000: "alice", 1001: "bob"}


def _capture(*gpus: dict) -> dict:
    """DELLA's H100, once per entry of `gpus` (each: the device keys to replace, e.g. its process lists)."""
    data = copy.deepcopy(DELLA)
    device = data["devices"][0]
    data["devices"] = [dict(copy.deepcopy(device), uuid=f"GPU-{i}", **changes) for i, changes in enumerate(gpus)]
    return data


def _listing(capture: dict, proc: Path | str, owners=None, **fake) -> ProcessListing:
    machine = RealMachine(nvml_module=build(capture, **fake))
    reader = ProcReader(str(proc), user_of=USERS.get)
    return build_listing(machine.gpu_processes, reader, owners or {}, simulated=False, now=NOW)


def _by_pid(listing: ProcessListing, index: int = 0) -> dict:
    return {p.pid: p for p in listing.gpus[index].processes}


def test_each_gpu_lists_its_compute_and_graphics_processes_with_user_memory_and_command(tmp_path):
    proc = fake_proc(tmp_path / "proc", [
        FakeProcess(4242, uid=1000, cmdline=["python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000"]),
        FakeProcess(5151, uid=0, cmdline=["/usr/lib/xorg/Xorg", ":0"], comm="Xorg"),
        FakeProcess(6161, uid=1001, cmdline=[], comm="kworker/0:1"),
    ])  # fmt: skip
    capture = _capture(
        {"processes": [{"pid": 4242, "used": 70 * GIB}, {"pid": 6161, "used": GIB}],
         "graphics_processes": [{"pid": 5151, "used": 200 << 20}, {"pid": 6161, "used": GIB}]},
        {"processes": [{"pid": 4242, "used": 2 * GIB}]},
    )  # fmt: skip
    listing = _listing(capture, proc)
    assert [g.index for g in listing.gpus] == [0, 1] and [g.uuid for g in listing.gpus] == ["GPU-0", "GPU-1"]
    first = _by_pid(listing)
    assert first[4242].kind == "compute" and first[4242].used_memory_bytes == 70 * GIB
    assert (first[4242].uid, first[4242].user) == (1000, "alice")
    assert first[4242].command == "python3 -m vllm.entrypoints.openai.api_server --port 8000"
    assert (
        first[5151].kind == "graphics" and first[5151].user == "root" and first[5151].command == "/usr/lib/xorg/Xorg :0"
    )
    assert first[6161].kind == "compute+graphics" and first[6161].used_memory_bytes == GIB
    assert first[6161].command == "[kworker/0:1]"  # no arguments: its name in brackets, as ps shows it
    assert _by_pid(listing, 1)[4242].used_memory_bytes == 2 * GIB  # one process on two GPUs: each its own share
    assert not listing.simulated and listing.omitted == 0 and listing.reason is None


def test_a_memory_nvml_cannot_tell_is_unknown_never_sixteen_exabytes(tmp_path):
    proc = fake_proc(tmp_path / "proc", [FakeProcess(4242, uid=1000, cmdline=["python3"])])
    listing = _listing(_capture({"processes": [{"pid": 4242, "used": None}]}), proc)  # NVML_VALUE_NOT_AVAILABLE
    assert _by_pid(listing)[4242].used_memory_bytes is None
    assert ProcessListing.from_wire(json.loads(json.dumps(listing.to_wire()))) == listing


def test_a_sample_with_a_process_whose_memory_nvml_cannot_tell_still_decodes():
    """Before: the raw 2**64-1 went into the sample, and the app refused the host's every sample whole."""
    gpus = NvmlGpus(Nvml(build(_capture({"processes": [{"pid": 77, "used": None}, {"pid": 78, "used": GIB}]}))))
    [gpu] = gpus.read()
    assert [(p.pid, p.used_memory_bytes) for p in gpu.processes] == [(77, None), (78, GIB)]
    [decoded] = Sample.from_wire(Sample(1, NOW, False, gpus=(gpu,)).to_wire()).gpus
    assert decoded.processes[0].used_memory_bytes is None


def test_a_process_that_exits_between_nvml_and_proc_is_skipped(tmp_path):
    proc = fake_proc(tmp_path / "proc", [FakeProcess(4242, uid=1000, cmdline=["python3", "train.py"])])
    capture = _capture({
        "processes_reads": [
            [{"pid": 4242, "used": GIB}, {"pid": 9999, "used": GIB}],  # 9999 is gone from /proc when it is read
            [{"pid": 4242, "used": GIB}],  # ... and NVML, asked again, no longer lists it
        ]
    })  # fmt: skip
    assert list(_by_pid(_listing(capture, proc))) == [4242]


def test_a_process_nvml_still_lists_but_proc_lacks_is_kept_without_user_or_command(tmp_path):
    """An agent in a container sees the host's pids from NVML but not in its own /proc: the GPU memory they
    hold is still shown, only who holds it is unknown."""
    proc = fake_proc(tmp_path / "proc", [])
    listing = _listing(_capture({"processes": [{"pid": 31337, "used": 40 * GIB}]}), proc)
    [entry] = listing.gpus[0].processes
    assert (entry.pid, entry.used_memory_bytes, entry.user, entry.command, entry.worker) == (
        31337, 40 * GIB, None, None, None,
    )  # fmt: skip


def test_a_huge_command_line_is_read_bounded_and_marked_cut(tmp_path):
    huge = b"python3\0" + b"--flag=" + b"x" * (8 << 20) + b"\0"
    proc = fake_proc(tmp_path / "proc", [FakeProcess(4242, raw_cmdline=huge)])
    listing = _listing(_capture({"processes": [{"pid": 4242, "used": GIB}]}), proc)
    entry = _by_pid(listing)[4242]
    assert entry.command_truncated and len(entry.command) == MAX_COMMAND_CHARS
    assert entry.command.startswith("python3 --flag=xxx")
    assert len(json.dumps(listing.to_wire())) < 4 * MAX_COMMAND_CHARS


def test_a_command_line_with_escape_codes_is_kept_as_sent_for_the_app_to_escape(tmp_path):
    proc = fake_proc(tmp_path / "proc", [FakeProcess(4242, cmdline=["python3", "\x1b[2Jowned"])])
    entry = _by_pid(_listing(_capture({"processes": [{"pid": 4242, "used": GIB}]}), proc))[4242]
    assert entry.command == "python3 \x1b[2Jowned"


def test_gpu_processes_map_to_the_worker_that_started_them_through_their_ancestors(tmp_path):
    proc = fake_proc(tmp_path / "proc", [
        FakeProcess(100, ppid=90, start_time=5000, cmdline=["vllm", "serve", "m"]),  # the worker (session leader)
        FakeProcess(101, ppid=100, session=100, cmdline=["python3", "-c", "engine core"]),
        FakeProcess(102, ppid=101, session=100, cmdline=["python3", "-c", "gpu worker"]),
        FakeProcess(103, ppid=1, session=100, cmdline=["python3", "orphan"]),  # its parent died: init adopted it
        FakeProcess(200, ppid=1, start_time=7777, cmdline=["python3", "mine.py"]),  # not meshdeck's
    ])  # fmt: skip
    worker = worker_ref("ds32-0101.vllm-node0", "meshdeck:ds32-0101:0:vllm-node0")
    owners = {100: (5000, worker)}
    capture = _capture({"processes": [{"pid": p, "used": GIB} for p in (100, 102, 103, 200)]})
    found = {pid: p.worker for pid, p in _by_pid(_listing(capture, proc, owners)).items()}
    assert found == {100: worker, 102: worker, 103: worker, 200: None}


def test_a_recycled_pid_is_not_taken_for_the_worker_that_once_had_it(tmp_path):
    proc = fake_proc(tmp_path / "proc", [FakeProcess(100, start_time=999_999, cmdline=["python3", "someone-else"])])
    owners = {100: (5000, worker_ref("w1", "meshdeck:d:0:vllm"))}  # the worker's process started at tick 5000
    entry = _by_pid(_listing(_capture({"processes": [{"pid": 100, "used": GIB}]}), proc, owners))[100]
    assert entry.worker is None


def test_bindings_without_the_graphics_list_still_list_compute_processes_and_log_it_once(tmp_path, caplog):
    proc = fake_proc(tmp_path / "proc", [FakeProcess(4242, cmdline=["python3"])])
    capture = _capture({"processes": [{"pid": 4242, "used": GIB}]})
    machine = RealMachine(nvml_module=build(capture, missing=("nvmlDeviceGetGraphicsRunningProcesses",)))
    reader = ProcReader(str(proc), user_of=USERS.get)
    with caplog.at_level(logging.INFO, logger="meshdeck_agent.gpu.nvml"):
        for _ in range(3):
            listing = build_listing(machine.gpu_processes, reader, {}, simulated=False, now=NOW)
    assert list(_by_pid(listing)) == [4242]
    assert sum("nvmlDeviceGetGraphicsRunningProcesses" in r.message for r in caplog.records) == 1


def test_a_server_without_nvml_answers_no_gpus_and_why(tmp_path):
    listing = _listing(_capture({}), tmp_path, init_error=9)  # NVML_ERROR_DRIVER_NOT_LOADED
    assert listing.gpus == () and "nvmlInit failed" in (listing.reason or "")


def test_this_process_read_from_the_real_proc_names_its_user_and_command():
    capture = _capture({"processes": [{"pid": os.getpid(), "used": GIB}]})
    machine = RealMachine(nvml_module=build(capture))
    listing = build_listing(machine.gpu_processes, ProcReader(), {}, simulated=False, now=NOW)
    [entry] = listing.gpus[0].processes
    assert entry.uid == os.getuid() and entry.user == pwd.getpwuid(os.getuid()).pw_name
    assert "pytest" in (entry.command or "") or "python" in (entry.command or "")


def test_the_simulated_server_reports_its_stand_ins_processes_deterministically():
    def activity() -> list[SimWorkerActivity]:
        return [
            SimWorkerActivity("ds32.vllm", gpus=(0, 1, 2, 3), held_bytes_per_gpu=120 * GIB, pids=(os.getpid(),)),
            SimWorkerActivity("small.vllm", gpus=(3,), held_bytes_per_gpu=10 * GIB, pids=(1,)),
            SimWorkerActivity("loading.vllm", gpus=(5,), held_bytes_per_gpu=0, pids=(2,)),  # holds nothing yet
        ]

    first = SimulatedMachine(parse_simulate("8xH200"), seed=3, activity=activity)
    second = SimulatedMachine(parse_simulate("8xH200"), seed=3, activity=activity)
    owners = {os.getpid(): (None, worker_ref("ds32.vllm", "meshdeck:ds32:0:vllm-node0"))}
    listings = [build_listing(m.gpu_processes, ProcReader(), owners, simulated=True, now=NOW) for m in (first, second)]
    assert listings[0] == listings[1] and listings[0].simulated
    gpus = listings[0].gpus
    assert [g.uuid for g in gpus] == first.gpus.uuids
    assert [p.pid for p in gpus[0].processes] == [os.getpid()]
    assert gpus[0].processes[0].used_memory_bytes == 120 * GIB and gpus[0].processes[0].worker == owners[os.getpid()][1]
    assert [(p.pid, p.used_memory_bytes) for p in gpus[3].processes] == [(1, 10 * GIB), (os.getpid(), 120 * GIB)]
    assert gpus[5].processes == () and gpus[7].processes == ()


def test_more_processes_than_the_answer_may_carry_are_counted_not_sent(tmp_path):
    per_gpu = 1100
    proc = fake_proc(tmp_path / "proc", [])
    capture = _capture({"processes": [{"pid": 10_000 + i, "used": 1} for i in range(per_gpu)]})
    listing = _listing(capture, proc)
    assert len(listing.gpus[0].processes) == 1024 and listing.omitted == per_gpu - 1024


def test_a_user_name_with_undecodable_bytes_still_makes_an_answer_the_wire_can_carry(tmp_path):
    proc = fake_proc(tmp_path / "proc", [FakeProcess(4242, uid=1002, cmdline=["python3"])])
    machine = RealMachine(nvml_module=build(_capture({"processes": [{"pid": 4242, "used": GIB}]})))
    reader = ProcReader(str(proc), user_of={1002: "b\udcffb"}.get)  # pwd's surrogate escape of a latin-1 name
    listing = build_listing(machine.gpu_processes, reader, {}, simulated=False, now=NOW)
    assert _by_pid(listing)[4242].user == "b\ufffdb"
    assert ProcessListing.from_wire(json.loads(protocol.encode(protocol.response(1, listing.to_wire())))["result"])
