"""A vLLM profile as a Kubernetes LeaderWorkerSet and its Service (`meshdeck launch PROFILE --k8s-manifest`).

On Kubernetes the cluster's scheduler places the pods, so meshdeck writes the objects instead of starting
anything. The shape follows vLLM's LWS deployment guide (docs/deployment/frameworks/lws.md): one group of
`size` = the profile's node count, the leader pod serving the API behind a ClusterIP Service, /dev/shm as a
memory emptyDir. Unlike the guide it needs no Ray: each pod runs exactly the argv the plan builds for its node
rank (what `launch --dry-run` shows is what runs), with only what the cluster decides taken from the pod:

- the head's address: the leader's own pod IP (`$(VLLM_HOST_IP)`, set from status.podIP as the plan sets
  VLLM_HOST_IP to each node's own address; a pod IP, because the head binds to it) and `$(LWS_LEADER_ADDRESS)`
  on the workers (LWS injects it into every container, before the container's own env);
- a worker's node rank: `$(LWS_WORKER_INDEX)` (0 on the leader, 1..size-1 on the workers, as the plan's ranks).

Kubernetes expands `$(VAR)` in a container's command itself, so no shell is needed; every literal `$` is
written `$$` so nothing of the profile is expanded. One case needs arithmetic Kubernetes lacks: a DP worker's
`--data-parallel-start-rank` is rank × local DP size, so when that size is over 1 the workers run `/bin/sh -c`
with the other arguments shell-quoted. Ray layouts and torchrun profiles are refused. Pure: contacts nothing.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from meshdeck.core.errors import InputError
from meshdeck.core.secret_env import refuse_secret_env
from meshdeck.launch.k8s_options import K8sOptions
from meshdeck.launch.network import NodeNetwork
from meshdeck.launch.plan import LaunchPlan, NodeCommand
from meshdeck.launch.profile import Profile
from meshdeck.launch.vllm_launch import build_vllm_plan, layout_class

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"  # the label LWS puts on every pod of the set
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
POD_IP_ENV = "VLLM_HOST_IP"
GPU_RESOURCE = "nvidia.com/gpu"
HF_CACHE = "/root/.cache/huggingface"  # where the vllm-openai image's vLLM keeps downloaded models
# Placeholder addresses the plan is built with, swapped for the pod's values above (.invalid never resolves).
_HEAD = "meshdeck-lws-leader.invalid"
_RANK_FLAGS = ("--node-rank", "--data-parallel-start-rank")


@dataclass(frozen=True)
class Manifest:
    """The objects to apply, the plan they were made from (for the dry-run comparison) and its warnings."""

    objects: tuple[dict[str, Any], ...]
    plan: LaunchPlan
    warnings: tuple[str, ...] = ()

    def to_yaml(self) -> str:
        header = "# Written by `meshdeck launch --k8s-manifest` (LeaderWorkerSet + Service, after vLLM's LWS guide).\n"
        return header + yaml.safe_dump_all(self.objects, sort_keys=False, default_flow_style=False)


def build_manifest(profile: Profile, options: K8sOptions) -> Manifest:
    """The LeaderWorkerSet and Service for `profile` (vLLM; one node per pod, `gpus_per_node` GPUs each)."""
    if profile.engine != "vllm":
        raise InputError("engine", "a Kubernetes manifest is written for vLLM profiles only (torchrun: not yet)")
    if layout_class(profile) == "ray":
        raise InputError(
            "vllm.distributed_backend",
            "the manifest runs vLLM's own multi-node launcher, not Ray; remove distributed_backend: ray",
        )
    nodes = [NodeNetwork(host, _HEAD if rank == 0 else f"meshdeck-lws-node{rank}.invalid", nics_known=False)
             for rank, host in enumerate(profile.hosts)]  # fmt: skip
    plan = build_vllm_plan(profile, nodes)
    refuse_secret_env(
        plan.commands[0].env,
        "the manifest in the clear",
        "keep it in a Kubernetes Secret (--k8s-hf-secret NAME for HF_TOKEN) and leave it out of the profile's env",
    )
    size = len(plan.commands)
    leader = _pod_template(plan.commands[0], profile, options, role="leader")
    template: dict[str, Any] = {"size": size, "restartPolicy": "RecreateGroupOnPodRestart"}
    if size == 1:  # the one pod is the leader, and LWS makes it from workerTemplate
        template["workerTemplate"] = leader
    else:
        template["leaderTemplate"] = leader
        template["workerTemplate"] = _pod_template(plan.commands[1], profile, options, role="worker")
    lws = {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": _metadata(options.name, options),
        "spec": {"replicas": 1, "leaderWorkerTemplate": template},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(f"{options.name}-leader", options),
        "spec": {
            "type": "ClusterIP",
            "selector": {LWS_NAME_LABEL: options.name, "role": "leader"},
            "ports": [{"name": "http", "port": profile.vllm.port, "protocol": "TCP", "targetPort": profile.vllm.port}],
        },
    }
    warnings = [w for w in plan.warnings if _HEAD not in w]  # the plan's guesses about placeholder hosts go
    if size > 1 and "NCCL_SOCKET_IFNAME" not in profile.env:
        warnings.append(
            "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME are left to NCCL and gloo; where pods have several networks "
            "(--k8s-host-network, RDMA), set them in the profile's env"
        )
    return Manifest(objects=(lws, service), plan=plan, warnings=tuple(warnings))


def _metadata(name: str, options: K8sOptions) -> dict[str, Any]:
    return {"name": name, **({"namespace": options.namespace} if options.namespace else {})}


def container_command(command: NodeCommand, local_dp: int) -> list[str]:
    """The container's command for `command`'s node, from the pod's env (see the module doc)."""
    leader = command.node_rank == 0
    dynamic: dict[int, str] = {}  # argv index -> the same value as a shell expression
    out: list[str] = []
    needs_shell = False
    for index, token in enumerate(command.argv):
        flag = command.argv[index - 1] if index else ""
        if token == _HEAD:
            out.append(f"$({POD_IP_ENV})" if leader else LEADER_ADDRESS)
            dynamic[index] = f'"${POD_IP_ENV}"' if leader else '"$LWS_LEADER_ADDRESS"'
        elif flag in _RANK_FLAGS and not leader:
            scale = local_dp if flag == "--data-parallel-start-rank" else 1
            if int(token) != command.node_rank * scale:
                raise ValueError(f"{flag} {token} on node {command.node_rank}: not rank × {scale}")
            out.append(WORKER_INDEX)
            needs_shell = needs_shell or scale != 1
            dynamic[index] = f'"$((LWS_WORKER_INDEX * {scale}))"'
        else:
            out.append(escape(token))
    if not needs_shell:
        return out
    words = [dynamic[i] if i in dynamic else shlex.quote(token) for i, token in enumerate(command.argv)]
    return ["/bin/sh", "-c", escape("exec " + " ".join(words))]


def escape(text: str) -> str:
    """`text` as Kubernetes passes it on unchanged: its `$(VAR)` expansion reads `$$` as one `$`."""
    return text.replace("$", "$$")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion of a command word (k8s.io/kubernetes third_party/forked/golang/expansion):
    `$$` is `$`, `$(NAME)` is NAME's value when set and left as written when not, any other `$` stays."""
    out: list[str] = []
    cursor = 0
    while cursor < len(text):
        if text[cursor] != "$" or cursor + 1 == len(text):
            out.append(text[cursor])
            cursor += 1
        elif text[cursor + 1] == "$":
            out.append("$")
            cursor += 2
        elif text[cursor + 1] == "(" and (close := text.find(")", cursor + 2)) != -1:
            name = text[cursor + 2 : close]
            out.append(env.get(name, f"$({name})"))
            cursor = close + 1
        else:
            out.append(text[cursor : cursor + 2])
            cursor += 2
    return "".join(out)


def _pod_template(command: NodeCommand, profile: Profile, options: K8sOptions, *, role: str) -> dict[str, Any]:
    gpus = str(profile.gpus_per_node)
    resources = {GPU_RESOURCE: gpus, **({options.rdma_resource: "1"} if options.rdma_resource else {})}
    container: dict[str, Any] = {
        "name": f"vllm-{role}",
        "image": options.image,
        "command": container_command(command, _local_dp(profile)),
        "env": list(_env(command, options)),
        "resources": {"limits": resources, "requests": dict(resources)},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, *_model_mount(profile, options)],
    }
    if role == "leader":
        port = profile.vllm.port
        container["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
        container["readinessProbe"] = {"tcpSocket": {"port": port}, "initialDelaySeconds": 15, "periodSeconds": 10}
    if options.rdma_resource:  # RDMA registers (pins) memory
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    spec: dict[str, Any] = {"containers": [container], "volumes": list(_volumes(options))}
    if options.host_network:  # LWS_LEADER_ADDRESS is a cluster DNS name, so keep the cluster's DNS
        spec.update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    return {"metadata": {"labels": {"role": role}}, "spec": spec}


def _local_dp(profile: Profile) -> int:
    return max(1, profile.layout.data_parallel // len(profile.hosts))


def _env(command: NodeCommand, options: K8sOptions) -> Iterator[dict[str, Any]]:
    for key, value in command.env:
        if key == POD_IP_ENV:  # the plan's own-address for the node: here, the pod's IP
            yield {"name": key, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        else:
            yield {"name": key, "value": escape(value)}  # Kubernetes expands $(VAR) in env values too
    if options.hf_secret:
        yield {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": options.hf_secret, "key": "HF_TOKEN"}}}


def _model_mount(profile: Profile, options: K8sOptions) -> list[dict[str, Any]]:
    """The model's volume where the argv reads it: at the profile's model path, or the Hugging Face cache."""
    if not (options.model_pvc or options.model_host_path):
        return []
    is_path = profile.model.startswith("/")
    path = posixpath.normpath(profile.model) if is_path else HF_CACHE
    return [{"name": "model", "mountPath": path, "readOnly": is_path}]


def _volumes(options: K8sOptions) -> Iterator[dict[str, Any]]:
    yield {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": options.shm_size}}
    if options.model_pvc:
        yield {"name": "model", "persistentVolumeClaim": {"claimName": options.model_pvc}}
    elif options.model_host_path:
        yield {"name": "model", "hostPath": {"path": options.model_host_path, "type": "Directory"}}
