"""Worker supervision with real child processes: start, crash, kill, restart policy, stop of the whole
process group, logs by offset, log events, and re-adoption by a restarted agent."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from agent_harness import InProcessAgent, in_process_agent, short_dir, wait_for

PY = sys.executable


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _worker_event(client, worker_id: str, state: str, timeout: float = 30.0) -> dict:
    return client.wait_event(
        lambda e: e["event"] == "worker" and e["data"]["id"] == worker_id and e["data"]["state"] == state, timeout
    )["data"]


@pytest.fixture(scope="module")
def agent():
    with in_process_agent(None, interval_s=0.5) as running:
        yield running


def test_a_worker_runs_in_its_own_process_group_and_session(agent):
    client = agent.client()
    worker = client.call("workers.start", {"spec": {"argv": [PY, "-c", "import time; time.sleep(60)"], "id": "group"}})
    assert worker["state"] == "running" and worker["pid"] > 0
    assert os.getpgid(worker["pid"]) == worker["pid"] and os.getsid(worker["pid"]) == worker["pid"]
    assert os.getpgid(worker["pid"]) != os.getpgid(0)
    stopped = client.call("workers.stop", {"id": "group", "grace_s": 5})
    assert stopped["state"] == "stopped" and not _alive(worker["pid"])
    client.close()


def test_a_crash_is_reported_with_its_exit_code_within_two_seconds(agent, tmp_path):
    marker = tmp_path / "exited_at"
    code = f"import sys, time; time.sleep(0.5); open({str(marker)!r}, 'w').write(repr(time.time())); sys.exit(3)"
    client = agent.client()
    client.call("workers.start", {"spec": {"argv": [PY, "-c", code], "id": "crash"}})
    event = _worker_event(client, "crash", "failed")
    assert event["exit_code"] == 3 and event["signal"] is None and event["reason"] == "exited with code 3"
    assert event["ts"] - float(marker.read_text()) < 2.0
    client.close()


def test_a_sigkill_like_the_oom_killer_is_reported_as_a_signal(agent):
    client = agent.client()
    worker = client.call("workers.start", {"spec": {"argv": [PY, "-c", "import time; time.sleep(60)"], "id": "oom"}})
    killed_at = time.time()
    os.kill(worker["pid"], signal.SIGKILL)
    event = _worker_event(client, "oom", "failed")
    assert event["signal"] == 9 and event["exit_code"] is None
    assert "SIGKILL" in event["reason"]
    assert event["ts"] - killed_at < 2.0
    client.close()


def test_on_failure_restarts_up_to_max_then_stays_failed(agent):
    client = agent.client()
    spec = {
        "argv": [PY, "-c", "import sys; sys.exit(7)"],
        "id": "flaky",
        "restart": {"policy": "on-failure", "max": 2, "backoff_s": 0.1},
    }
    client.call("workers.start", {"spec": spec})
    assert wait_for(lambda: _state(client, "flaky") == ("failed", 2), timeout=30)
    worker = _worker(client, "flaky")
    assert worker["exit_code"] == 7 and worker["restarts"] == 2
    client.close()


def test_never_policy_does_not_restart_and_a_clean_exit_is_exited(agent):
    client = agent.client()
    client.call("workers.start", {"spec": {"argv": [PY, "-c", "print('done')"], "id": "once"}})
    assert wait_for(lambda: _state(client, "once") == ("exited", 0), timeout=30)
    assert _worker(client, "once")["exit_code"] == 0
    client.close()


def test_stop_kills_the_whole_group_and_uses_sigkill_after_the_grace(agent, tmp_path):
    child_pid_file = tmp_path / "child.pid"
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)'])\n"
        f"open({str(child_pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(120)\n"
    )
    client = agent.client()
    worker = client.call("workers.start", {"spec": {"argv": [PY, "-c", script], "id": "stubborn"}})
    assert wait_for(child_pid_file.exists, timeout=20)
    child = int(child_pid_file.read_text())
    started = time.monotonic()
    stopped = client.call("workers.stop", {"id": "stubborn", "grace_s": 1})
    assert stopped["state"] == "stopped" and stopped["signal"] == 9
    assert time.monotonic() - started < 15
    assert wait_for(lambda: not _alive(worker["pid"]) and not _alive(child), timeout=10)
    client.close()


def test_logs_are_read_by_byte_offset_and_stdout_and_stderr_are_both_kept(agent):
    client = agent.client()
    script = "import sys\nfor i in range(2000):\n    print('line %04d' % i)\nprint('oops', file=sys.stderr)\n"
    client.call("workers.start", {"spec": {"argv": [PY, "-c", script], "id": "chatty"}})
    assert wait_for(lambda: _state(client, "chatty")[0] == "exited", timeout=30)
    collected, offset = "", 0
    while True:
        page = client.call("workers.logs", {"id": "chatty", "offset": offset, "limit": 4096})
        collected += page["data"]
        if page["offset"] == page["size"]:
            break
        offset = page["offset"]
    lines = collected.splitlines()
    assert lines[:2] == ["line 0000", "line 0001"] and "line 1999" in lines and "oops" in lines
    tail = client.call("workers.logs", {"id": "chatty", "limit": 100})
    assert tail["start"] == tail["size"] - 100 and tail["data"].endswith("oops\n")
    client.close()


def test_vllm_and_nccl_lines_in_a_worker_log_become_log_events(agent):
    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "agent"
    text = (fixtures / "vllm_log_v0.11.x_kimi-linear_tp2_mla_kv-cache_vllm-issue28228_excerpt.txt").read_text()
    text += (fixtures / "nccl_info_vllm-ray-2node_deepseek-r1_aibrix758_nvls-head-gdrdma_excerpt.txt").read_text()
    client = agent.client()
    client.call(
        "workers.start", {"spec": {"argv": [PY, "-c", f"import sys; sys.stdout.write({text!r})"], "id": "loggy"}}
    )
    startup = client.wait_event(
        lambda e: (
            e["event"] == "log" and e["data"]["kind"] == "vllm_startup" and "kv_cache_tokens" in e["data"]["fields"]
        )
    )
    assert startup["data"]["worker"] == "loggy" and startup["data"]["fields"]["kv_cache_tokens"] == 75840
    nccl = client.wait_event(
        lambda e: (
            e["event"] == "log" and e["data"]["kind"] == "nccl_transport" and e["data"]["fields"]["what"] == "channel"
        )
    )
    assert nccl["data"]["fields"]["transport"] == "NET/IB" and nccl["data"]["fields"]["gdrdma"] is True
    client.close()


def test_workers_keep_running_with_no_client_attached(agent):
    client = agent.client()
    worker = client.call("workers.start", {"spec": {"argv": [PY, "-c", "import time; time.sleep(60)"], "id": "alone"}})
    client.close()
    assert wait_for(lambda: not agent.daemon._sessions)  # the daemon has ended the closed client's session
    assert _alive(worker["pid"])
    again = agent.client()
    assert _worker(again, "alone")["state"] == "running"
    again.call("workers.stop", {"id": "alone", "grace_s": 5})
    again.close()


def test_starting_a_running_id_again_is_a_conflict_and_bad_specs_name_the_field(agent, tmp_path):
    client = agent.client()
    client.call("workers.start", {"spec": {"argv": [PY, "-c", "import time; time.sleep(60)"], "id": "dup"}})
    assert client.request("workers.start", {"spec": {"argv": ["true"], "id": "dup"}})["error"]["code"] == "conflict"
    bad_cwd = client.request("workers.start", {"spec": {"argv": ["true"], "cwd": str(tmp_path / "missing")}})
    assert bad_cwd["error"]["code"] == "bad_params" and "spec.cwd" in bad_cwd["error"]["message"]
    relative_log = client.request("workers.start", {"spec": {"argv": ["true"], "log": "logs/out.log"}})
    assert "spec.log: must be an absolute path" in relative_log["error"]["message"]
    bad_argv = client.request("workers.start", {"spec": {"argv": "vllm serve"}})
    assert "spec.argv" in bad_argv["error"]["message"]
    simulated = client.request("workers.start", {"spec": {"argv": ["vllm"], "simulate": {"kind": "vllm"}}})
    assert (
        simulated["error"]["code"] == "bad_params"
        and "spec.simulate: is not part of the protocol" in (simulated["error"]["message"])
    )
    client.call("workers.stop", {"id": "dup", "grace_s": 5})
    client.close()


def test_a_missing_program_fails_with_127_and_says_why(agent):
    client = agent.client()
    worker = client.call("workers.start", {"spec": {"argv": ["/nonexistent/vllm", "serve"], "id": "missing"}})
    if worker["state"] != "failed":
        worker = _worker_event(client, "missing", "failed")
    assert worker["exit_code"] == 127 and "cannot start /nonexistent/vllm" in worker["reason"]
    client.close()


def test_a_restarted_agent_readopts_running_workers_and_learns_exits_it_missed():
    directory = short_dir()
    try:
        first = InProcessAgent(directory, simulate=None, interval_s=0.5)
        client = first.client()
        long = client.call(
            "workers.start", {"spec": {"argv": [PY, "-c", "import time; time.sleep(120)"], "id": "long"}}
        )
        short = client.call(
            "workers.start",
            {"spec": {"argv": [PY, "-c", "import sys, time; time.sleep(1.5); sys.exit(4)"], "id": "short"}},
        )
        client.close()
        first.stop(stop_workers=False)
        assert _alive(long["pid"])
        exit_file = directory / "agent.state" / "workers" / "short" / "exit.json"
        assert wait_for(exit_file.exists)  # "short" exits while no agent runs: its keeper records it
        second = InProcessAgent(directory, simulate=None, interval_s=0.5)
        client = second.client()
        workers = {w["id"]: w for w in client.call("workers.list")["workers"]}
        assert (
            workers["long"]["state"] == "running"
            and workers["long"]["pid"] == long["pid"]
            and workers["long"]["adopted"]
        )
        assert workers["short"]["state"] == "failed" and workers["short"]["exit_code"] == 4
        assert short["pid"] != long["pid"]
        stopped = client.call("workers.stop", {"id": "long", "grace_s": 5})
        assert stopped["state"] == "stopped" and not _alive(long["pid"])
        client.close()
        second.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_a_recycled_pid_is_never_signalled(agent, monkeypatch):
    client = agent.client()
    worker = client.call(
        "workers.start", {"spec": {"argv": [PY, "-c", "import time; time.sleep(60)"], "id": "recycle"}}
    )
    record = agent.daemon.supervisor._records["recycle"]
    record.start_time = (record.start_time or 0) + 1  # as if the pid now belonged to another process
    killpg = os.killpg
    signalled: list[int] = []

    def recording_killpg(pid: int, signum: int) -> None:
        signalled.append(pid)
        killpg(pid, signum)

    monkeypatch.setattr(os, "killpg", recording_killpg)
    agent.daemon.supervisor._signal_group(record, signal.SIGTERM)  # signals, if at all, before it returns
    monkeypatch.setattr(os, "killpg", killpg)
    assert worker["pid"] not in signalled and _alive(worker["pid"])
    os.killpg(worker["pid"], signal.SIGKILL)
    _worker_event(client, "recycle", "failed")
    client.close()


def _worker(client, worker_id: str) -> dict:
    return next(w for w in client.call("workers.list")["workers"] if w["id"] == worker_id)


def _state(client, worker_id: str) -> tuple[str, int]:
    worker = _worker(client, worker_id)
    return worker["state"], worker["restarts"]


def test_a_worker_log_goes_where_the_spec_says(agent, tmp_path):
    client = agent.client()
    target = tmp_path / "logs" / "vllm.log"
    client.call(
        "workers.start", {"spec": {"argv": [PY, "-c", "print('to my file')"], "id": "ownlog", "log": str(target)}}
    )
    assert wait_for(lambda: _state(client, "ownlog")[0] == "exited", timeout=30)
    assert target.read_text() == "to my file\n"
    assert client.call("workers.logs", {"id": "ownlog", "offset": 0})["data"] == "to my file\n"
    client.close()


def test_worker_state_files_are_private_and_json(agent):
    client = agent.client()
    client.call("workers.start", {"spec": {"argv": [PY, "-c", "print(1)"], "id": "files"}})
    assert wait_for(lambda: _state(client, "files")[0] == "exited", timeout=30)
    directory = Path(agent.config.state_dir) / "workers" / "files"
    assert oct(os.stat(directory).st_mode & 0o777) == "0o700"
    for name in ("spec.json", "agent.json", "keeper.json", "exit.json"):
        json.loads((directory / name).read_text())
    client.close()


def test_a_worker_id_that_is_not_one_plain_path_component_is_refused_and_no_file_is_touched():
    """`.` and `..` once made workers.start rmtree `workers/` or the whole state dir (a running worker lost
    its spec and log); ids are single path components that cannot name a directory above their own."""
    with in_process_agent(None, interval_s=0.5) as own:
        state = Path(own.config.state_dir)
        client = own.client()
        kept = client.call("workers.start", {"spec": {"argv": [PY, "-c", "import time; time.sleep(60)"], "id": "kept"}})
        files_before = {p for p in state.rglob("*") if p.is_file() and not p.name.startswith(".")}
        for bad_id in (".", "..", ".hidden", "../kept", "kept/..", "a/b", "", "x" * 65, "gpu\u0663"):
            reply = client.request("workers.start", {"spec": {"argv": [PY, "-c", "print(1)"], "id": bad_id}})
            assert reply.get("error", {}).get("code") == "bad_params", (bad_id, reply)
            assert "spec.id" in reply["error"]["message"]
            assert files_before <= {p for p in state.rglob("*") if p.is_file()}, bad_id
        assert (state / "seq.json").is_file() and (state / "workers" / "kept" / "spec.json").is_file()
        assert _worker(client, "kept")["state"] == "running" and _alive(kept["pid"])
        client.close()


def test_a_worker_dir_whose_spec_names_another_id_is_not_adopted():
    """A new agent adopts `workers/<id>/` only when its spec.json has that id: the dir a later start of
    that id replaces must be the one the record lives in."""
    directory = short_dir()
    try:
        worker_dir = directory / "agent.state" / "workers" / "a"
        worker_dir.mkdir(parents=True, mode=0o700)
        (worker_dir / "spec.json").write_text(json.dumps({"argv": ["true"], "id": "b"}))
        agent = InProcessAgent(directory, simulate=None, interval_s=0.5)
        try:
            assert [w["id"] for w in agent.daemon.supervisor.list_workers()] == []
        finally:
            agent.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
