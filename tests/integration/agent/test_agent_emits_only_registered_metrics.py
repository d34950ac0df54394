"""A real simulated agent serving a simulated vLLM deployment sends only metrics the registry knows,
each within its range: every sample it stored, read over the RPC and decoded as the app decodes it."""

from __future__ import annotations

from agent_harness import in_process_agent, wait_for
from meshdeck_agent.metric_registry import WORKER, lookup
from meshdeck_agent.wire_sample import Sample
from test_agent_simulated_vllm import _argv, _free_port  # the stand-in deployment that test starts


def _samples(client) -> list[Sample]:
    """Every sample the agent holds, decoded (Sample.from_wire refuses a value outside its range)."""
    samples, since = [], 0
    while True:
        reply = client.call("samples.read", {"since_seq": since, "limit": 500})
        samples.extend(Sample.from_wire(raw) for raw in reply["samples"])
        if not reply["samples"]:
            return samples
        since = samples[-1].seq


def test_every_worker_metric_a_simulated_deployment_sends_is_registered_and_in_range():
    with in_process_agent("8xH200", interval_s=0.25) as agent:
        client = agent.client()
        port = _free_port()
        # the agent's stand-in for `vllm serve` (it runs on a --simulate agent instead of vLLM)
        client.call("workers.start", {"spec": {"argv": _argv(port, "-tp", "4", "-dp", "2"), "id": "dsv32"}})
        wanted = {"generation_tokens_per_s", "ttft_p99_s", "itl_mean_s", "e2e_p50_s", "prefix_cache_hit_rate"}

        def serving() -> bool:
            names = {
                name
                for sample in _samples(client)[-4:]
                for worker in sample.workers
                if worker.engine == ""
                for name, _ in worker.metrics
            }
            return wanted <= names

        assert wait_for(serving, timeout=90, interval=0.5)
        client.call("workers.stop", {"id": "dsv32", "grace_s": 5})
        samples = _samples(client)
        client.close()
    sent = [(worker, name, value) for sample in samples for worker in sample.workers for name, value in worker.metrics]
    assert {name for _, name, _ in sent} >= wanted | {"up", "engines", "kv_cache_usage_perc", "num_requests_running"}
    unknown = sorted({name for _, name, _ in sent if lookup(WORKER, name) is None})
    assert unknown == []
    outside = [(w.engine, name, value) for w, name, value in sent if not lookup(WORKER, name).holds(value)]
    assert outside == []
    assert all(sample.simulated for sample in samples) and all(sample.gpus and sample.nics for sample in samples)
