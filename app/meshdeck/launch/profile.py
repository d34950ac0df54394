"""Deployment profiles: the YAML file format, validated by pydantic, naming the field in every error.

A profile is untrusted input (it may come from a colleague or the internet): unknown keys, wrong
types, a key given twice, anchors/aliases/merge keys (YAML bombs), deep nesting and oversized files
(profile_yaml.py reads every profile), control characters in any string (they would rewrite the
terminal that shows the dry run), env variables meshdeck sets itself (`MESHDECK_*`: the inline
workload and the layout; a node's own address), `vllm.extra_args` that set what the launcher sets itself
(`--port`, `--tensor-parallel-size`, `--host`, `--model`, ...: vLLM takes the last one given, so the plan,
the readiness check and the pre-flight would watch one thing while another ran) and layouts that do not
match the hosts are refused before anything is stored or launched.
`dump_profile(load_profile(text))` round-trips.

    name: ds32-h200-2n
    model: deepseek-ai/DeepSeek-V3.2      # HF id or a path on the servers
    engine: vllm                          # or torch
    hosts: [gpu-a, gpu-b]                 # meshdeck host names, first is the head; "local" = this machine
    gpus_per_node: 8
    layout: {tensor_parallel: 8, pipeline_parallel: 2, data_parallel: 1, expert_parallel: false}
    vllm: {max_model_len: 32768, gpu_memory_utilization: 0.9, kv_cache_dtype: auto, port: 8000, extra_args: []}
    torch: {script: tiny-deepseek, args: []}
    env: {NCCL_SOCKET_IFNAME: eth0}

Optional keys with defaults: `vllm.executable` (`vllm`, or a path such as /opt/venv/bin/vllm; `ray` is taken
from the same folder), `vllm.distributed_backend` (mp | ray), `vllm.master_port` (29501, multi-node mp),
`vllm.data_parallel_rpc_port` (29550, DP across nodes), `vllm.ray_port` (6379), `vllm.max_num_seqs`,
`vllm.speculative_mtp`; `torch.python` (`python3` on the servers), `torch.master_port` (c10d rendezvous).

A prefill/decode-disaggregated profile has `disaggregated: {prefill: POOL, decode: POOL, kv_connector: {name:
NixlConnector, buffer_device: cuda|cpu, transport: rdma|tcp}, router: {executable: vllm-router, host, port: 8000,
prometheus_port: 29000, policy, extra_args}}`, each POOL `{hosts, layout, workers, port, side_channel_port,
extra_args, wide_ep: {all2all_backend, eplb, redundant_experts, dbo}}`; then `hosts` is the prefill pool's hosts
followed by the decode pool's, there is no top-level `layout`, and `vllm:` holds what both pools share (the
engines' ports are the pools'; the router serves the API). launch/disaggregated_launch.py builds its processes.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from meshdeck.core.errors import InputError
from meshdeck.core.serving import parallel_label
from meshdeck.core.text import printable
from meshdeck.launch.profile_yaml import MAX_PROFILE_BYTES as MAX_PROFILE_BYTES
from meshdeck.launch.profile_yaml import parse_yaml
from meshdeck.launch.slurm_options import slurm_options
from meshdeck.launch.vllm_flags import flag_as_vllm_reads

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
HOST_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "nvfp4_ds_mla")

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0 (ESC, CR, newline, tab, NUL, ...), DEL and C1 (CSI, ...)
RESERVED_ENV_PREFIX = "MESHDECK_"
RESERVED_ENV = {  # env variables the launch builders set per node or from the layout; a profile cannot
    "VLLM_HOST_IP": "meshdeck sets it per node from the host's address",
    "VLLM_RAY_DP_PACK_STRATEGY": "meshdeck sets it from the layout",
    "VLLM_NIXL_SIDE_CHANNEL_HOST": "meshdeck sets it per engine node from the host's address",
    "VLLM_NIXL_SIDE_CHANNEL_PORT": "meshdeck sets it per engine from its pool's side_channel_port",
}


def _no_control(value: str, what: str = "") -> str:
    if _CONTROL.search(value):
        raise ValueError(
            f"{what + ' ' if what else ''}must not contain control characters (ESC, CR, newline, tab, ...)"
        )
    return value


def reserved_env_reason(key: str) -> str | None:
    """Why a profile may not set env variable `key` (meshdeck sets it itself), or None when it may."""
    if key.upper().startswith(RESERVED_ENV_PREFIX):
        return (
            "meshdeck sets MESHDECK_* variables itself (the inline workload, the layout); remove it from the "
            "profile's env"
        )
    if key.upper() in RESERVED_ENV:
        return f"{RESERVED_ENV[key.upper()]}; remove it from the profile's env"
    return None


def _not_reserved(key: str) -> str:
    reason = reserved_env_reason(key)
    if reason is not None:
        raise ValueError(reason)
    return key


_PER_NODE = "meshdeck sets it on each node from the layout and the hosts; remove it"
LAUNCHER_FLAGS = {  # vLLM flags the launcher sets itself -> what a profile says instead
    "--model": "the model is the profile's `model`",
    "--port": "set vllm.port instead (the readiness check, the pre-flight port check and the serving URL use it)",
    "--host": "vLLM listens on every interface and meshdeck checks and serves it at the head's address; remove it",
    "--uds": "the API must listen on vllm.port: the readiness check and the serving URL use it; remove it",
    "--tensor-parallel-size": "set layout.tensor_parallel instead",
    "--pipeline-parallel-size": "set layout.pipeline_parallel instead",
    "--data-parallel-size": "set layout.data_parallel instead",
    "--enable-expert-parallel": "set layout.expert_parallel instead",
    "--no-enable-expert-parallel": "set layout.expert_parallel instead",
    "--max-model-len": "set vllm.max_model_len instead (the planner sizes the KV cache by it)",
    "--gpu-memory-utilization": "set vllm.gpu_memory_utilization instead (the planner budgets by it)",
    "--kv-cache-dtype": "set vllm.kv_cache_dtype instead (the planner sizes the KV cache by it)",
    "--max-num-seqs": "set vllm.max_num_seqs instead",
    "--distributed-executor-backend": "set vllm.distributed_backend instead",
    "--master-port": "set vllm.master_port instead",
    "--data-parallel-rpc-port": "set vllm.data_parallel_rpc_port instead",
    "--nnodes": _PER_NODE,
    "--node-rank": _PER_NODE,
    "--master-addr": _PER_NODE,
    "--headless": _PER_NODE,
    "--data-parallel-size-local": _PER_NODE,
    "--data-parallel-address": _PER_NODE,
    "--data-parallel-start-rank": _PER_NODE,
    "--data-parallel-rank": _PER_NODE,
    "--data-parallel-backend": _PER_NODE,
}


def launcher_flag_reason(token: str) -> str | None:
    """Why `token` of vllm.extra_args may not be there (it is, or abbreviates, a flag the launcher decides:
    vLLM takes the last one given, so it would silently override the plan), or None."""
    flag = flag_as_vllm_reads(token)
    reason = LAUNCHER_FLAGS.get(flag) if flag is not None else None
    if reason is None:
        return None
    shown = "" if token.split("=", 1)[0] == flag else f" ({flag} to vLLM)"
    return f"{printable(token.split('=', 1)[0], 40)}{shown} would override the launcher (vLLM takes the last one given): {reason}"


def _not_launcher_flag(token: str) -> str:
    reason = launcher_flag_reason(token)
    if reason is not None:
        raise ValueError(reason)
    return token


Text = Annotated[str, AfterValidator(_no_control)]  # any profile string: no control characters
ExtraArg = Annotated[str, AfterValidator(_no_control), AfterValidator(_not_launcher_flag)]
EnvName = Annotated[str, Field(pattern=ENV_NAME_PATTERN), AfterValidator(_not_reserved)]


def _program(value: str, what: str) -> str:
    """A program name or path run as argv[0]: no control characters, no leading '-', not empty."""
    if not value or value.startswith("-"):
        raise ValueError(f"{what} must be a program name or path, not {value!r}")
    return _no_control(value, what)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Layout(_Strict):
    tensor_parallel: Annotated[int, Field(ge=1, le=1024)] = 1
    pipeline_parallel: Annotated[int, Field(ge=1, le=1024)] = 1
    data_parallel: Annotated[int, Field(ge=1, le=4096)] = 1
    expert_parallel: bool = False

    @property
    def world_size(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    def label(self) -> str:
        """ "TP1·DP16·EP": the planner's notation (core.serving.parallel_label), wherever a layout is shown."""
        expert = "EP" if self.expert_parallel else ""
        return parallel_label(self.tensor_parallel, self.pipeline_parallel, self.data_parallel, expert)


class VllmSettings(_Strict):
    max_model_len: Annotated[int, Field(ge=16, le=1_048_576)] | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)] = 0.9
    kv_cache_dtype: Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "nvfp4_ds_mla"] = "auto"
    max_num_seqs: Annotated[int, Field(ge=1, le=65536)] | None = None
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    distributed_backend: Literal["mp", "ray"] = "mp"
    speculative_mtp: bool = False
    extra_args: list[ExtraArg] = Field(default_factory=list)
    executable: str = "vllm"
    master_port: Annotated[int, Field(ge=1, le=65535)] = 29501
    data_parallel_rpc_port: Annotated[int, Field(ge=1, le=65535)] = 29550
    ray_port: Annotated[int, Field(ge=1, le=65535)] = 6379

    @field_validator("executable")
    @classmethod
    def _executable_clean(cls, value: str) -> str:
        return _program(value, "executable")

    @field_validator("gpu_memory_utilization", mode="before")
    @classmethod
    def _int_is_float(cls, value: Any) -> Any:
        # YAML `gpu_memory_utilization: 1` is an int; accept it as the float it means.
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class TorchSettings(_Strict):
    script: str = "tiny-deepseek"  # built-in workload name, or a path on the servers
    args: list[Text] = Field(default_factory=list)
    master_port: Annotated[int, Field(ge=1, le=65535)] = 29500
    python: str = "python3"

    @field_validator("python")
    @classmethod
    def _python_clean(cls, value: str) -> str:
        return _program(value, "python")

    @field_validator("script")
    @classmethod
    def _script_clean(cls, value: str) -> str:
        return _program(value, "script")


class SlurmSettings(_Strict):
    """What a profile asks of a Slurm cluster (`launch --slurm CLUSTER`); the command line's options win. Each
    value is held to Slurm's own rule (launch/slurm_options.py) when the profile is read."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None

    @model_validator(mode="after")
    def _slurm_values(self) -> SlurmSettings:
        try:
            slurm_options(job_name="profile", partition=self.partition, account=self.account, qos=self.qos,
                          time_limit=self.time)  # fmt: skip
        except InputError as exc:
            raise ValueError(f"{exc.field.lstrip('-')}: {exc.problem}") from None
        return self


ALL2ALL_BACKENDS = (  # vLLM 0.32's All2AllBackend (vllm/config/parallel.py)
    "naive", "pplx", "deepep_high_throughput", "deepep_low_latency", "deepep_v2", "mori_high_throughput",
    "mori_low_latency", "moonep", "nixl_ep", "allgather_reducescatter", "flashinfer_nvlink_two_sided",
)  # fmt: skip
ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "kv_aware", "power_of_two", "consistent_hash",
                   "sticky_least_loaded")  # fmt: skip  # vllm-router 0.1.17's --policy choices
# Flags a disaggregated pool's engines get from the pool's settings, not from extra_args.
POOL_FLAGS = {
    "--kv-transfer-config": "set disaggregated.kv_connector instead (each pool's role is meshdeck's)",
    "--all2all-backend": "set the pool's wide_ep.all2all_backend instead",
    "--enable-eplb": "set the pool's wide_ep.eplb instead",
    "--eplb-config": "set the pool's wide_ep.redundant_experts instead",
    "--enable-dbo": "set the pool's wide_ep.dbo instead",
}
Port = Annotated[int, Field(ge=1, le=65535)]


class WideEp(_Strict):
    """A pool's wide expert parallelism: the all-to-all kernels (DeepEP's high-throughput ones for prefill,
    low-latency ones for decode), EPLB with its redundant experts, dual-batch overlap."""

    all2all_backend: Literal[ALL2ALL_BACKENDS] | None = None  # type: ignore[valid-type]
    eplb: bool = False
    redundant_experts: Annotated[int, Field(ge=0, le=4096)] = 0
    dbo: bool = False

    @model_validator(mode="after")
    def _redundant_needs_eplb(self) -> WideEp:
        if self.redundant_experts and not self.eplb:
            raise ValueError("redundant_experts needs eplb: true (EPLB places the redundant experts)")
        return self


class Pool(_Strict):
    """One pool of a disaggregated deployment: `workers` vLLM engines of one layout over the pool's hosts."""

    hosts: Annotated[list[Annotated[str, Field(pattern=HOST_PATTERN)]], Field(min_length=1, max_length=1024)]
    layout: Layout = Field(default_factory=Layout)
    workers: Annotated[int, Field(ge=1, le=4096)] = 1
    port: Port | None = None  # the engines' API port (consecutive ports for engines sharing a node)
    side_channel_port: Port | None = None  # NIXL's handshake port (VLLM_NIXL_SIDE_CHANNEL_PORT), per DP rank up
    extra_args: list[ExtraArg] = Field(default_factory=list)
    wide_ep: WideEp | None = None

    @field_validator("extra_args")
    @classmethod
    def _no_pool_flags(cls, value: list[str]) -> list[str]:
        for token in value:
            flag = flag_as_vllm_reads(token)
            if flag in POOL_FLAGS:
                raise ValueError(f"{printable(token.split('=', 1)[0], 40)}: {POOL_FLAGS[flag]}")
        return value


class KvConnector(_Strict):
    """How KV moves from prefill to decode engines: vLLM's NixlConnector (UCX underneath), its buffer on the
    GPU (`cuda`, GPUDirect RDMA) or in host memory (`cpu`: vLLM's CPU build, or GPUs without GPUDirect)."""

    name: Literal["NixlConnector"] = "NixlConnector"
    buffer_device: Literal["cuda", "cpu"] = "cuda"
    transport: Literal["rdma", "tcp"] = "rdma"  # rdma: the pre-flight wants an active IB/RoCE port per engine node


class Router(_Strict):
    """vLLM's router (vllm-project/router, `pip install vllm-router`) in front of the pools."""

    executable: str = "vllm-router"
    host: Annotated[str, Field(pattern=HOST_PATTERN)] | None = None  # default: the first prefill host
    port: Port = 8000
    prometheus_port: Port = 29000
    policy: Literal[ROUTER_POLICIES] | None = None  # type: ignore[valid-type]
    extra_args: list[Text] = Field(default_factory=list)

    @field_validator("executable")
    @classmethod
    def _executable_clean(cls, value: str) -> str:
        return _program(value, "executable")


class Disaggregated(_Strict):
    """A prefill pool and a decode pool joined by a KV connector, behind a router (docs: profile.py)."""

    prefill: Pool
    decode: Pool
    kv_connector: KvConnector = Field(default_factory=KvConnector)
    router: Router = Field(default_factory=Router)

    def pools(self) -> tuple[tuple[str, Pool], ...]:
        return (("prefill", self.prefill), ("decode", self.decode))


class Profile(_Strict):
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    model: Annotated[str, Field(min_length=1, max_length=4096)]
    engine: Literal["vllm", "torch"] = "vllm"
    hosts: Annotated[list[Annotated[str, Field(pattern=HOST_PATTERN)]], Field(min_length=1, max_length=1024)]
    gpus_per_node: Annotated[int, Field(ge=1, le=64)]
    layout: Layout = Field(default_factory=Layout)
    vllm: VllmSettings = Field(default_factory=VllmSettings)
    torch: TorchSettings = Field(default_factory=TorchSettings)
    env: dict[EnvName, Text] = Field(default_factory=dict)
    slurm: SlurmSettings | None = None  # a profile meant for a Slurm cluster may carry its job's options
    disaggregated: Disaggregated | None = None  # prefill/decode pools behind a router (vLLM only)

    @field_validator("model")
    @classmethod
    def _model_clean(cls, value: str) -> str:
        if value.startswith("-"):
            # `vllm serve MODEL` would read it as an option
            raise ValueError("model must be a Hugging Face id or a path; it must not start with '-'")
        return _no_control(value, "model")

    @field_validator("hosts")
    @classmethod
    def _hosts_unique(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for host in value:
            if host in seen:
                raise ValueError(f"host {host!r} is listed twice")
            seen.add(host)
        return value

    @model_validator(mode="after")
    def _layout_matches_hosts(self) -> Profile:
        if self.disaggregated is not None:
            return self._pools_match_hosts(self.disaggregated)
        gpus = len(self.hosts) * self.gpus_per_node
        if self.layout.world_size != gpus:
            raise ValueError(
                f"layout: tensor_parallel × pipeline_parallel × data_parallel = {self.layout.tensor_parallel} × "
                f"{self.layout.pipeline_parallel} × {self.layout.data_parallel} = {self.layout.world_size}, but "
                f"{len(self.hosts)} host(s) × gpus_per_node {self.gpus_per_node} = {gpus} GPUs"
            )
        return self

    def _pools_match_hosts(self, pools: Disaggregated) -> Profile:
        """`hosts` is every pool's hosts, prefill's first; each pool's workers fill its hosts' GPUs exactly."""
        if self.engine != "vllm":
            raise ValueError("disaggregated: prefill/decode pools are vLLM engines; set engine: vllm")
        if self.layout != Layout():
            raise ValueError("layout: a disaggregated profile sets each pool's layout (disaggregated.*.layout)")
        listed = [*pools.prefill.hosts, *pools.decode.hosts]
        if listed != self.hosts:
            raise ValueError(
                f"hosts: must be the prefill pool's hosts then the decode pool's, in order ({listed}); a host "
                "serves one pool"
            )
        for role, pool in pools.pools():
            world, gpus = pool.layout.world_size, len(pool.hosts) * self.gpus_per_node
            if pool.workers * world != gpus:
                raise ValueError(
                    f"disaggregated.{role}: {pool.workers} worker(s) × {pool.layout.label()} ({world} GPUs) = "
                    f"{pool.workers * world} GPUs, but its {len(pool.hosts)} host(s) × gpus_per_node "
                    f"{self.gpus_per_node} = {gpus}"
                )
            if world < self.gpus_per_node and self.gpus_per_node % world:
                raise ValueError(
                    f"disaggregated.{role}.layout: a worker of {world} GPUs does not divide gpus_per_node "
                    f"{self.gpus_per_node}; workers would straddle nodes"
                )
            if world > self.gpus_per_node and world % self.gpus_per_node:
                raise ValueError(
                    f"disaggregated.{role}.layout: a worker of {world} GPUs is not a whole number of nodes of "
                    f"{self.gpus_per_node} GPUs"
                )
        router = pools.router.host
        if router is not None and router not in self.hosts:
            raise ValueError(f"disaggregated.router.host: {router!r} is not one of the profile's hosts")
        return self


def _field_path(loc: tuple[Any, ...]) -> str:
    """`env.HF_TOKEN`, `vllm.extra_args[1]`: pydantic's location, the parts from the file escaped."""
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item != "[key]":  # pydantic's marker for "the key itself" (env names): the key is named already
            parts.append(("." if parts else "") + printable(str(item)))
    return "".join(parts) or "profile"


def validation_error_to_input_error(exc: ValidationError, source: str) -> InputError:
    """The first pydantic error as one line: `<source>: <field.path>: <what is wrong>`."""
    err = exc.errors()[0]
    loc = tuple(x for x in err.get("loc", ()) if not (isinstance(x, str) and x.startswith("function-")))
    message = err.get("msg", "invalid")
    if err.get("type") == "extra_forbidden":
        message = "unknown key"
    elif message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    more = len(exc.errors()) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return InputError(f"{source}: {_field_path(loc)}", f"{message}{suffix}")


def profile_from_mapping(data: Any, source: str = "profile") -> Profile:
    if not isinstance(data, dict):
        raise InputError(source, f"a profile must be a mapping of keys to values, got {type(data).__name__}")
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise validation_error_to_input_error(exc, source) from None


def load_profile(text: str | bytes, source: str = "profile") -> Profile:
    """Parse (profile_yaml's safe loader) and validate profile YAML. Raises InputError naming the file and field."""
    return profile_from_mapping(parse_yaml(text, source), source)


def profile_to_mapping(profile: Profile) -> dict[str, Any]:
    """Plain dict in the file's key order, every field present (so export -> import is exact), except
    the other engine's section while it holds only defaults: a torch profile does not carry a `vllm:`
    block it never uses (and the reverse). Loading fills it back in, so the round trip stays exact."""
    data = profile.model_dump(mode="python")
    unused = "torch" if profile.engine == "vllm" else "vllm"
    if getattr(profile, unused) == type(getattr(profile, unused))():
        del data[unused]
    if profile.slurm is None:
        del data["slurm"]  # profiles written before Slurm options existed export unchanged
    else:
        data["slurm"] = {key: value for key, value in data["slurm"].items() if value is not None}
    if profile.disaggregated is None:
        del data["disaggregated"]  # aggregated profiles export as before
    else:
        del data["layout"]  # each pool has its own
    return data


def dump_profile(profile: Profile) -> str:
    return yaml.safe_dump(profile_to_mapping(profile), sort_keys=False, allow_unicode=True, default_flow_style=None)
