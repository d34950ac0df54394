"""Deployment profiles: the YAML file format, validated by pydantic, naming the field in every error.

A profile is untrusted input (it may come from a colleague or the internet): unknown keys, wrong
types, anchors/aliases (YAML bombs), nesting deeper than MAX_PROFILE_DEPTH (which would otherwise
exhaust Python's recursion limit in the YAML composer), oversized files and layouts that do not match
the hosts are refused before anything is stored or launched. `dump_profile(load_profile(text))` round-trips.

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
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from meshdeck.core.errors import InputError

MAX_PROFILE_BYTES = 256 * 1024
MAX_PROFILE_DEPTH = 16  # a real profile nests 3 deep (vllm -> extra_args -> item); anything far deeper is hostile
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
HOST_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _no_control(value: str, what: str) -> str:
    if _CONTROL.search(value):
        raise ValueError(f"{what} must not contain control characters (newline, tab, NUL, ...)")
    return value


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


class VllmSettings(_Strict):
    max_model_len: Annotated[int, Field(ge=16, le=1_048_576)] | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)] = 0.9
    kv_cache_dtype: Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla"] = "auto"
    max_num_seqs: Annotated[int, Field(ge=1, le=65536)] | None = None
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    distributed_backend: Literal["mp", "ray"] = "mp"
    speculative_mtp: bool = False
    extra_args: list[str] = Field(default_factory=list)
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

    @field_validator("extra_args")
    @classmethod
    def _args_clean(cls, value: list[str]) -> list[str]:
        for arg in value:
            _no_control(arg, "extra_args entries")
        return value


class TorchSettings(_Strict):
    script: str = "tiny-deepseek"  # built-in workload name, or a path on the servers
    args: list[str] = Field(default_factory=list)
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

    @field_validator("args")
    @classmethod
    def _args_clean(cls, value: list[str]) -> list[str]:
        for arg in value:
            _no_control(arg, "args entries")
        return value


class Profile(_Strict):
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    model: Annotated[str, Field(min_length=1, max_length=4096)]
    engine: Literal["vllm", "torch"] = "vllm"
    hosts: Annotated[list[Annotated[str, Field(pattern=HOST_PATTERN)]], Field(min_length=1, max_length=1024)]
    gpus_per_node: Annotated[int, Field(ge=1, le=64)]
    layout: Layout = Field(default_factory=Layout)
    vllm: VllmSettings = Field(default_factory=VllmSettings)
    torch: TorchSettings = Field(default_factory=TorchSettings)
    env: dict[Annotated[str, Field(pattern=ENV_NAME_PATTERN)], str] = Field(default_factory=dict)

    @field_validator("model")
    @classmethod
    def _model_clean(cls, value: str) -> str:
        if value.startswith("-"):
            # `vllm serve MODEL` would read it as an option
            raise ValueError("model must be a Hugging Face id or a path; it must not start with '-'")
        return _no_control(value, "model")

    @field_validator("env")
    @classmethod
    def _env_clean(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if "\x00" in item:
                raise ValueError(f"env value of {key} must not contain NUL")
        return value

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
        gpus = len(self.hosts) * self.gpus_per_node
        if self.layout.world_size != gpus:
            raise ValueError(
                f"layout: tensor_parallel × pipeline_parallel × data_parallel = {self.layout.tensor_parallel} × "
                f"{self.layout.pipeline_parallel} × {self.layout.data_parallel} = {self.layout.world_size}, but "
                f"{len(self.hosts)} host(s) × gpus_per_node {self.gpus_per_node} = {gpus} GPUs"
            )
        return self


class _TooDeep(yaml.YAMLError):
    """Collections nested deeper than MAX_PROFILE_DEPTH; `mark` is where the limit was crossed."""

    def __init__(self, mark: Any) -> None:
        super().__init__(f"nested deeper than {MAX_PROFILE_DEPTH} levels")
        self.mark = mark


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors, aliases and deep nesting: a profile never needs them, YAML bombs
    and stack-exhaustion attacks do. The composer recurses once per nesting level, so the depth is
    checked here, before Python's recursion limit is reached."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self._depth >= MAX_PROFILE_DEPTH:
            raise _TooDeep(self.peek_event().start_mark)
        self._depth += 1
        try:
            return self._compose_checked(parent, index)
        finally:
            self._depth -= 1

    def _compose_checked(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.constructor.ConstructorError(
                None, None, "aliases (*name) are not allowed in a profile", event.start_mark
            )
        event = self.peek_event()
        if getattr(event, "anchor", None):
            raise yaml.constructor.ConstructorError(
                None, None, "anchors (&name) are not allowed in a profile", event.start_mark
            )
        return super().compose_node(parent, index)


def _field_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
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
    """Parse and validate profile YAML. Raises InputError naming the file and field."""
    if isinstance(text, bytes):
        if len(text) > MAX_PROFILE_BYTES:
            raise InputError(source, f"profile is {len(text)} bytes; the limit is {MAX_PROFILE_BYTES}")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(source, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if len(text.encode("utf-8")) > MAX_PROFILE_BYTES:
        raise InputError(source, f"profile is larger than {MAX_PROFILE_BYTES} bytes")
    try:
        data = yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader subclass
    except _TooDeep as exc:
        where = f" at line {exc.mark.line + 1}, column {exc.mark.column + 1}" if exc.mark else ""
        raise InputError(
            source, f"nested deeper than {MAX_PROFILE_DEPTH} levels{where}; a profile needs at most 3"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(source, f"not valid YAML{where}: {problem}") from None
    return profile_from_mapping(data, source)


def profile_to_mapping(profile: Profile) -> dict[str, Any]:
    """Plain dict in the file's key order, every field present (so export -> import is exact), except
    the other engine's section while it holds only defaults: a torch profile does not carry a `vllm:`
    block it never uses (and the reverse). Loading fills it back in, so the round trip stays exact."""
    data = profile.model_dump(mode="python")
    unused = "torch" if profile.engine == "vllm" else "vllm"
    if getattr(profile, unused) == type(getattr(profile, unused))():
        del data[unused]
    return data


def dump_profile(profile: Profile) -> str:
    return yaml.safe_dump(profile_to_mapping(profile), sort_keys=False, allow_unicode=True, default_flow_style=None)
