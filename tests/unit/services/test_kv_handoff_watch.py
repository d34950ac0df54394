"""The KV-handoff alarm: a decode engine of a deployment with a router that computes prompt tokens beyond its
requests' last partial blocks (or counts failed KV transfers) raises an alarm on the deployment naming it,
once; an aggregated deployment, a prefill engine and a working handoff raise none."""

from __future__ import annotations

from array import array

from deploy_fleet import FakeFleet, Recorder
from meshdeck.core.kv_handoff import BLOCK_ALLOWANCE_TOKENS, DecodeCounters, handoff_alarm, transfer_failure_alarm
from meshdeck.core.samples import Device, SampleBatch
from meshdeck.launch.plan import LaunchPlan, NodeCommand, ReadyCheck
from meshdeck.remote.events import SamplesReceived
from meshdeck.services.deployments.handoff_watch import HandoffWatch
from meshdeck.services.deployments.model import worker_id
from meshdeck.services.deployments.registry import DeployService
from meshdeck.ui.views.deployments.status import status_line


def pd_plan(with_router: bool = True) -> LaunchPlan:
    ready = (ReadyCheck("running"),)
    parts = [("gpu-a", "prefill0-vllm-node0", "prefill-head"), ("gpu-b", "decode0-vllm-node0", "decode-head")]
    if with_router:
        parts.append(("gpu-a", "router", "router"))
    commands = tuple(
        NodeCommand(host, 0, name, role, stage, ("x",), (), ready=ready)
        for stage, (host, name, role) in enumerate(parts)
    )
    return LaunchPlan("pd", "vllm", "m", "gpu-a", "10.0.0.1", commands, (), "disaggregated")


def samples(host_worker: str, **metrics: float) -> SampleBatch:
    series = tuple((Device("worker", name=host_worker), name) for name in metrics)
    return SampleBatch((1,), (1.0,), series, array("d", metrics.values()))


def test_the_rule_allows_each_requests_last_partial_block_and_no_more() -> None:
    within = DecodeCounters(computed=BLOCK_ALLOWANCE_TOKENS * 3, transferred=900, requests=3)
    beyond = DecodeCounters(computed=BLOCK_ALLOWANCE_TOKENS * 3 + 1, transferred=900, requests=3)
    assert handoff_alarm("decode0", within) is None
    message = handoff_alarm("decode0", beyond)
    assert message is not None and message.startswith("decode0 computed 193 prompt tokens itself (900 came over")
    assert transfer_failure_alarm("decode0", within) is None
    failed = transfer_failure_alarm("decode0", DecodeCounters(0, 0, 1, failed_transfers=2))
    assert failed is not None and failed.startswith("decode0: 2 KV transfer(s) failed")


def test_decode_computing_prompts_raises_one_alarm_naming_the_engine_and_it_is_recorded() -> None:
    fleet, recorder = FakeFleet(), Recorder()
    service = DeployService(fleet, recorder=recorder, poll_s=0.01)
    snapshot = service.launch(pd_plan())
    watch = HandoffWatch(service)
    decode = worker_id(snapshot.id, "decode0-vllm-node0")
    prefill = worker_id(snapshot.id, "prefill0-vllm-node0")
    # prefill computes every prompt: no alarm (it is not a decode engine); a working handoff: none either
    watch.handle(SamplesReceived("gpu-a", samples(prefill, prompt_tokens_computed_total=5000.0,
                                                  prompt_tokens_transferred_total=0.0, request_success_total=10)))  # fmt: skip
    watch.handle(SamplesReceived("gpu-b", samples(decode, prompt_tokens_computed_total=0.0,
                                                  prompt_tokens_transferred_total=5000.0, request_success_total=10)))  # fmt: skip
    assert service.get(snapshot.id).alarms == ()
    for _ in range(2):  # the router dropped kv_transfer_params: decode recomputes every prompt
        watch.handle(SamplesReceived("gpu-b", samples(decode, prompt_tokens_computed_total=5000.0,
                                                      prompt_tokens_transferred_total=0.0, request_success_total=10,
                                                      num_requests_running=2)))  # fmt: skip
    alarms = service.get(snapshot.id).alarms
    assert len(alarms) == 1 and alarms[0].startswith("decode0-vllm-node0 computed 5,000 prompt tokens itself")
    assert "; ALARM: decode0-vllm-node0 computed" in status_line(service.get(snapshot.id))
    service.close()


def test_an_aggregated_deployment_is_not_watched() -> None:
    fleet = FakeFleet()
    service = DeployService(fleet, poll_s=0.01)
    snapshot = service.launch(pd_plan(with_router=False))
    decode = worker_id(snapshot.id, "decode0-vllm-node0")
    HandoffWatch(service).handle(SamplesReceived("gpu-b", samples(decode, prompt_tokens_computed_total=5000.0,
                                                                  prompt_tokens_transferred_total=0.0)))  # fmt: skip
    assert service.get(snapshot.id).alarms == ()
    service.close()
