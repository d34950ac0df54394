"""The demo chooses every port its engines open: a second demo on the same machine, or anything already
listening on vLLM's or torch's fixed defaults (29550 was taken by another demo when a fresh clone's `make test`
failed), no longer fails its launch."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from meshdeck.launch.profile import Profile
from meshdeck.services.demo import demo_real_vllm_profile, demo_torch_profile, demo_vllm_profile

DEFAULTS = {8000, 29500, 29501, 29550, 6379}  # vLLM API, torchrun, vLLM master, DP RPC, Ray


@contextmanager
def defaults_taken() -> Iterator[None]:
    """Something else listens on each default port (one already taken is taken all the same)."""
    held = []
    for port in sorted(DEFAULTS):
        listener = socket.socket()
        try:
            listener.bind(("127.0.0.1", port))
            listener.listen()
            held.append(listener)
        except OSError:
            listener.close()
    try:
        yield
    finally:
        for listener in held:
            listener.close()


def _vllm_ports(profile: Profile) -> list[int]:
    settings = profile.vllm
    return [settings.port, settings.master_port, settings.data_parallel_rpc_port, settings.ray_port]


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_every_port_of_the_demo_profiles_is_chosen_free_and_none_is_a_fixed_default() -> None:
    planned = {
        "name": "planned",
        "model": "deepseek-ai/DeepSeek-V3.2",
        "engine": "vllm",
        "hosts": ["demo-a", "demo-b"],
        "gpus_per_node": 8,
        "layout": {"tensor_parallel": 1, "data_parallel": 16, "expert_parallel": True},
    }
    with defaults_taken():
        simulated = _vllm_ports(demo_vllm_profile(planned))
        real = _vllm_ports(demo_real_vllm_profile("/opt/vllm/bin/vllm"))
        rendezvous = demo_torch_profile().torch.master_port
        for ports in (simulated, real, [rendezvous]):
            assert len(set(ports)) == len(ports)
            assert not DEFAULTS & set(ports)
            assert all(_free(port) for port in ports)
