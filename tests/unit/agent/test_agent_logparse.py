"""vLLM startup lines and NCCL transport lines are recognised in every recorded log, old and new formats."""

from __future__ import annotations

from pathlib import Path

import pytest
from meshdeck_agent.logparse import parse_line, parse_nccl_transport, parse_vllm_startup, transport_class

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "agent"
VLLM_LOGS = sorted(FIXTURES.glob("vllm_log_*.txt"))
NCCL_LOGS = sorted(FIXTURES.glob("nccl_info_*.txt"))


def _events(path: Path, kind: str) -> list[dict]:
    events = [parse_line(line) for line in path.read_text().splitlines()]
    return [e["fields"] for e in events if e and e["kind"] == kind]


@pytest.mark.parametrize("path", VLLM_LOGS, ids=lambda p: p.name)
def test_every_recorded_vllm_log_yields_startup_numbers(path):
    fields = _events(path, "vllm_startup")
    assert fields, path.name
    merged = {k: v for f in fields for k, v in f.items()}
    assert "kv_cache_tokens" in merged or "available_kv_gib" in merged


def test_vllm_numbers_match_the_recorded_lines():
    v32 = {
        k: v
        for f in _events(
            FIXTURES / "vllm_log_deepseek-v3.2_ray_tp8-pp4_kv-cache_vllm-issue31903_excerpt.txt", "vllm_startup"
        )
        for k, v in f.items()
    }
    assert (
        v32["kv_cache_tokens"] == 1214464 and v32["max_concurrency"] == 7.41 and v32["max_concurrency_tokens"] == 163840
    )
    assert v32["process"] == "EngineCore_DP0" and v32["pid"] == 749
    dcp = {
        k: v
        for f in _events(
            FIXTURES / "vllm_log_v0.11.x_kimi-k2-thinking_deepseekv3-arch_8xH200_tp8-dcp8_kv-cache_recipes.txt",
            "vllm_startup",
        )
        for k, v in f.items()
    }
    assert dcp["available_kv_gib"] == 46.8 and dcp["dcp_world_size"] == 8 and dcp["kv_cache_tokens"] == 5721088
    per_rank = _events(
        FIXTURES / "vllm_log_v1-0.8.x_deepseek-v3_mi308_per-rank-kv-cache_vllm-issue15928_excerpt.txt", "vllm_startup"
    )
    assert [f["kv_cache_tokens"] for f in per_rank if "kv_cache_tokens" in f] == [
        107824,
        107456,
        107312,
        107344,
        107392,
    ]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "(Worker_TP0 pid=1) INFO 11-06 10:51:48 [gpu_model_runner.py:2653] Model loading took 80.7812 GiB and 45.123456 seconds",
            {"weights_gib": 80.7812, "load_seconds": 45.123456},
        ),
        (
            "INFO 01-02 03:04:05 [gpu_model_runner.py:1] Model loading took 15.27 GiB memory and 30.1 seconds",
            {"weights_gib": 15.27, "load_seconds": 30.1},
        ),
        ("INFO 10-01 12:00:00 model_runner.py:1072] Loading model weights took 14.9595 GB", {"weights_gib": 14.9595}),
        (
            "INFO x [kv_cache_utils.py:1] GPU KV cache size: 34,952 tokens, Maximum concurrency for 8,192 tokens per request: 4.27x",
            {"kv_cache_tokens": 34952, "max_concurrency": 4.27, "max_concurrency_tokens": 8192},
        ),
        ("INFO 04-01 executor_base.py:1] # GPU blocks: 2048, # CPU blocks: 0", {"gpu_blocks": 2048}),
    ],
)
def test_vllm_line_formats_across_versions(line, expected):
    fields = parse_vllm_startup(line)
    assert {k: fields[k] for k in expected} == expected


def test_lines_without_numbers_are_not_events():
    assert parse_line("(APIServer pid=1) INFO:     Application startup complete.") is None
    assert parse_line("ravg1040:41358:41358 [1] NCCL INFO cudaDriverVersion 12020") is None


@pytest.mark.parametrize("path", NCCL_LOGS, ids=lambda p: p.name)
def test_every_recorded_nccl_log_yields_transport_events(path):
    assert _events(path, "nccl_transport"), path.name


def test_nccl_channel_lines_name_transport_direction_and_ranks():
    ibext = _events(FIXTURES / "nccl_info_2node_ibext_p2p-ipc-read_deepspeed-issue4715_excerpt.txt", "nccl_transport")
    first = ibext[0]
    assert (first["src_rank"], first["dst_rank"], first["direction"], first["transport"], first["net_dev"]) == (
        1,
        4,
        "send",
        "NET/IBext",
        0,
    )
    assert {e["transport"] for e in ibext if e["what"] == "channel"} == {"NET/IBext", "P2P/IPC"}
    socket_shm = _events(FIXTURES / "nccl_info_2node_socket_shm_nccl-issue690_excerpt.txt", "nccl_transport")
    assert {e["transport_class"] for e in socket_shm if e["what"] == "channel"} == {"net_socket", "shm"}
    counts = next(e for e in socket_shm if e["what"] == "channels")
    assert (counts["coll"], counts["nvls"], counts["p2p"]) == (2, 0, 2)
    gdr = [
        e
        for e in _events(
            FIXTURES / "nccl_info_vllm-ray-2node_deepseek-r1_aibrix758_nvls-head-gdrdma_excerpt.txt", "nccl_transport"
        )
        if e["what"] == "channel"
    ]
    assert (
        gdr[0]["gdrdma"] is True
        and gdr[0]["net_dev"] == 15
        and gdr[0]["host"] == "deepseek-r1-671b-88957849-q6slh-head-fwl2w"
    )


def test_nccl_network_selection_and_devices():
    events = _events(FIXTURES / "nccl_info_network-ib-vs-socket_nccl-tests-issue188_excerpt.txt", "nccl_transport")
    assert {e["network"] for e in events if e["what"] == "network"} == {"Socket", "IB"}
    no_ib = next(e for e in events if e["what"] == "net_devices" and e["plugin"] == "IB" and not e["devices"])
    assert no_ib["cuda_dev"] == 7
    ib = next(e for e in events if e["what"] == "net_devices" and e["plugin"] == "IB" and e["devices"])
    assert [(d["name"], d["link"]) for d in ib["devices"]] == [("mlx5_0", "IB"), ("mlx5_2", "IB"), ("mlx5_4", "RoCE")]
    init = _events(FIXTURES / "nccl_info_2node_ibext-sharp-roce_init_deepspeed-issue4715_excerpt.txt", "nccl_transport")
    assert init[0] == {
        "what": "net_plugin",
        "internal": False,
        "plugin": "IBext",
        "message": "P2P plugin IBext",
        "host": "ravg1040",
        "pid": 41359,
        "cuda_dev": 2,
    }
    sharp = next(e for e in init if e["what"] == "net_devices")
    assert sharp["devices"][0]["sharp"] is True and sharp["oob"] == "ib0:10.181.140.40<0>"
    head = _events(FIXTURES / "nccl_info_vllm-ray-2node_deepseek-r1_aibrix758_head-init_excerpt.txt", "nccl_transport")
    assert {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_DISABLE"} <= {e["name"] for e in head if e["what"] == "env"}
    assert any(e["what"] == "version" and e["version"] == "2.25.1+cuda12.2" for e in head)


def test_transport_classes():
    assert transport_class("NET/IB/15/GDRDMA") == "net_ib" and transport_class("P2P/CUMEM/read") == "p2p"
    assert transport_class("NET/Socket/0") == "net_socket" and transport_class("NVLS") == "nvls"
    assert (
        parse_nccl_transport("host:1:2 [0] NCCL INFO Channel 03/0 : 0[0] -> 1[1] via P2P/CUMEM/read")["mode"] == "read"
    )
