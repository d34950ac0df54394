"""The simulated server: spec parsing, per-type layout, determinism, and numbers that follow the load."""

from __future__ import annotations

import pytest
from meshdeck_agent.gpu.catalog import GPU_TYPES, SimulateSpecError, parse_simulate
from meshdeck_agent.gpu.simulated import GpuLoad, SimulatedGpus
from meshdeck_agent.sim.load import EngineLoad, ExportedMetrics
from meshdeck_agent.sim.machine import SimulatedMachine
from meshdeck_agent.sim.spec import BadStandInPlan, SimVllmTracker, validate_simulate
from meshdeck_agent.sim.traffic import SimWorkerActivity, machine_load, worker_traffic

GIB = 1 << 30


@pytest.mark.parametrize(
    ("text", "count", "key"),
    [("8xH200", 8, "H200"), (" 16 x h100 ", 16, "H100"), ("1xRTX4090", 1, "RTX-4090"), ("4*l40s", 4, "L40S")],
)
def test_simulate_specs_parse(text, count, key):
    spec = parse_simulate(text)
    assert (spec.count, spec.gpu.key) == (count, key)


@pytest.mark.parametrize(
    ("text", "message"),
    [("8xV100", "unknown GPU type 'V100'"), ("17xH200", "1-16"), ("0xH100", "1-16"), ("H200", "COUNTxTYPE")],
)
def test_bad_simulate_specs_say_what_is_accepted(text, message):
    with pytest.raises(SimulateSpecError, match=message):
        parse_simulate(text)


def test_every_required_type_is_simulated():
    assert {"H200", "H100", "H20", "B200", "A100", "L40S", "RTX-4090"} <= set(GPU_TYPES)


def test_sxm_parts_are_nvswitch_all_to_all_and_pcie_parts_have_no_nvlink():
    h200 = SimulatedGpus(parse_simulate("8xH200"))
    assert {label for row in h200.matrix() for label in row} == {"X", "NV18"}
    a100 = SimulatedGpus(parse_simulate("8xA100"))
    assert a100.matrix()[0][7] == "NV12"
    l40s = SimulatedGpus(parse_simulate("8xL40S"))
    labels = l40s.matrix()
    assert labels[0][1] == "PIX" and labels[0][2] == "NODE" and labels[0][7] == "SYS"
    assert all(not g.nvlink_links for g in l40s.inventory())
    sixteen = SimulatedGpus(parse_simulate("16xH100"))
    assert sixteen.matrix()[0][7] == "NV18" and sixteen.matrix()[0][8] == "SYS"


def test_memory_sizes_are_what_nvidia_smi_reports():
    gpu = SimulatedGpus(parse_simulate("1xH100")).inventory()[0]
    assert gpu.memory_total_bytes == 81559 * 2**20 and gpu.memory_reserved_bytes == 328 * 2**20
    assert SimulatedGpus(parse_simulate("1xH200")).inventory()[0].memory_total_bytes == 143771 * 2**20


def test_same_seed_same_numbers_other_seed_other_numbers():
    def run(seed: int) -> list:
        gpus = SimulatedGpus(parse_simulate("4xH200"), seed=seed)
        load = {0: GpuLoad(held_bytes=100 * GIB, compute=0.6, nvlink_bytes_per_s=50e9)}
        return [gpus.read(1000.0 + t, load) for t in range(5)]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_idle_gpus_look_idle():
    sample = SimulatedGpus(parse_simulate("8xH100"), seed=1).read(0.0)[0]
    assert sample.value("memory_used_bytes") == 2 * 2**20 and sample.value("utilization_pct") == 0
    assert 60 < sample.value("power_w") < 90 and 28 <= sample.value("temperature_c") <= 38
    assert sample.value("sm_clock_mhz") == 345
    assert sum(tx for tx, _ in sample.nvlink_links) < 18 * 1000


def test_memory_power_and_links_follow_the_load():
    gpus = SimulatedGpus(parse_simulate("8xH200"), seed=1)
    busy = {2: GpuLoad(held_bytes=120 * GIB, compute=0.8, nvlink_bytes_per_s=90e9, pcie_rx_bytes_per_s=5e9)}
    for t in range(30):
        samples = gpus.read(float(t), busy)
    hot, cold = samples[2], samples[3]
    assert hot.value("memory_used_bytes") == 120 * GIB + 2 * 2**20
    assert hot.value("power_w") > 400 and cold.value("power_w") < 100 and hot.value("utilization_pct") > 70
    assert hot.value("nvlink_tx_bytes_per_s") == pytest.approx(90e9, rel=0.03)
    assert all(tx <= 25e9 for tx, _ in hot.nvlink_links)
    assert hot.value("pcie_rx_bytes_per_s") >= 5e9 and hot.value("temperature_c") > cold.value("temperature_c")


def _ecc_after(seed: int, seconds: int = 900, step: int = 30) -> list[tuple[list, list, list]]:
    """(uncorrected, corrected, row remap pending) per GPU at every read of an idle 8xH200 over `seconds`."""
    gpus = SimulatedGpus(parse_simulate("8xH200"), seed=seed)
    readings = []
    for t in range(0, seconds + 1, step):
        samples = gpus.read(1000.0 + t)
        readings.append(
            (
                [g.value("ecc_uncorrected_volatile") for g in samples],
                [g.value("ecc_corrected_volatile") for g in samples],
                [g.remapped_rows_pending for g in samples],
            )
        )
    return readings


def test_ecc_counts_are_mostly_zero_and_a_few_servers_get_one_seeded_uncorrected_error():
    runs = {seed: _ecc_after(seed) for seed in range(64)}
    assert runs[5] == _ecc_after(5) and runs[17] == _ecc_after(17)  # the same seed, the same errors
    faulty = {}
    for seed, readings in runs.items():
        for uncorrected, corrected, pending in readings:
            assert all(v is not None and v >= 0 for v in uncorrected + corrected)  # counted, never null
            assert pending == [v > 0 for v in uncorrected]  # an uncorrectable error leaves a row remap pending
        final = readings[-1][0]
        if any(final):
            assert sorted(final) == [0.0] * 7 + [1.0]  # one GPU, one error
            faulty[seed] = final.index(1.0)
            first = next(i for i, (u, _, _) in enumerate(readings) if any(u))
            assert all(any(u) for u, _, _ in readings[first:])  # a volatile count stays until a reset
    assert 1 <= len(faulty) <= 16  # rare: a few of 64 servers (one in 16 expected; these seeds give 9)
    assert len(set(faulty.values())) > 1  # not always the same GPU
    corrected = [c for readings in runs.values() for c in readings[-1][1]]
    assert corrected.count(0.0) > 0.75 * len(corrected) and max(corrected) > 0


def test_tensor_and_expert_parallel_traffic_estimates():
    tp8 = SimWorkerActivity(
        "w", tuple(range(8)), GIB, prompt_tokens_per_s=0, generation_tokens_per_s=1000, tensor_parallel=8
    )
    nvlink, network, compute, _ = worker_traffic(tp8)
    assert nvlink == pytest.approx(1000 * 61 * 2 * 7168 * 2 * 2 * 7 / 8)
    assert network == 0 and 0 < compute < 1
    ep16 = SimWorkerActivity(
        "w",
        tuple(range(8)),
        GIB,
        generation_tokens_per_s=8000,
        data_parallel_local=8,
        data_parallel_size=16,
        expert_parallel=True,
        nodes=2,
    )
    nvlink, network, _, _ = worker_traffic(ep16)
    assert network > 0 and nvlink > 0  # half the experts live on the other node
    assert machine_load([ep16], 8).gpus[0].held_bytes == GIB


def test_simulated_machine_labels_everything_simulated_and_feeds_nics_from_the_load():
    load = [
        SimWorkerActivity(
            "w",
            tuple(range(8)),
            100 * GIB,
            generation_tokens_per_s=8000,
            data_parallel_local=8,
            data_parallel_size=16,
            expert_parallel=True,
            nodes=2,
        )
    ]
    machine = SimulatedMachine(parse_simulate("8xH200"), seed=2, activity=lambda: load)
    inventory = machine.inventory()
    assert inventory["simulated"] is True and [n["name"] for n in inventory["nics"]][:2] == ["mlx5_0/1", "mlx5_1/1"]
    assert inventory["topology"]["gpu_nic_affinity"]["0"]["mlx5_0/1"] == "PIX"
    reading = machine.read(1.0)
    assert reading.nics[0].tx_bytes_per_s > 1e9
    assert reading.host.value("cpu_pct") > 1.5


def _plan(**overrides) -> dict:
    plan = {
        "kind": "vllm",
        "gpus": [0, 1],
        "gpu_memory_bytes": 100 * GIB,
        "weights_bytes": 60 * GIB,
        "kv_cache_bytes": 30 * GIB,
        "kv_tokens": 200000,
        "max_model_len": 8192,
    }
    plan.update(overrides)
    return plan


def test_a_stand_in_plan_read_back_gets_its_defaults_and_names_a_bad_field():
    normal = validate_simulate(_plan(), gpu_count=8)
    assert normal["tensor_parallel"] == 1 and normal["max_concurrency"] == pytest.approx(200000 / 8192)
    for overrides, field in (
        ({"kind": "sglang"}, "kind"),
        ({"gpus": []}, "gpus"),
        ({"gpus": [0, 0]}, "gpus"),
        ({"weights_bytes": 90 * GIB}, "gpu_memory_bytes"),
        ({"tensor_parallel": 0}, "tensor_parallel"),
        ({"port": 70000}, "port"),
        ({"expert_parallel": "yes"}, "expert_parallel"),
        ({"startup_s": -1}, "startup_s"),
    ):
        with pytest.raises(BadStandInPlan, match=f"stand-in plan: {field}"):
            validate_simulate(_plan(**overrides), gpu_count=8)


def test_the_tracker_holds_memory_by_phase_of_the_vllm_log():
    tracker = SimVllmTracker("w", validate_simulate(_plan(startup_s=100.0), gpu_count=8))
    assert tracker.held_bytes() == 0
    tracker.process_started(1234)
    assert tracker.held_bytes() < 2 * GIB
    tracker.log_event("vllm_startup", {"weights_gib": 60.0})
    assert 60 * GIB < tracker.held_bytes() < 62 * GIB
    tracker.log_event("vllm_startup", {"kv_cache_tokens": 200000})
    assert tracker.held_bytes() == 100 * GIB
    tracker.process_ended()
    assert tracker.held_bytes() == 0


def test_synthetic_load_is_deterministic_and_never_overfills_the_kv_cache():
    def run(seed: int) -> tuple:
        metrics = ExportedMetrics("m", ["0"], {"block_size": "64", "num_gpu_blocks": "100"})
        engine = EngineLoad("0", metrics, kv_tokens=20000, max_model_len=8192, request_rate=30.0, seed=seed)
        peak = 0.0
        for step in range(600):
            engine.step(step * 0.1, 0.1)
            peak = max(peak, engine.kv_used)
        value = metrics.registry.get_sample_value
        return (
            value("vllm:generation_tokens_total", {"model_name": "m", "engine": "0"}),
            value("vllm:num_preemptions_total", {"model_name": "m", "engine": "0"}),
            peak,
        )

    first = run(1)
    assert first == run(1)
    assert first[0] > 0 and first[2] <= 20000 + 0.5
    assert run(2) != first
