"""`meshdeck plan --profile-out FILE`: the chosen layout written as deployment profile YAML.

The profiles are the console planner's (services.plan_profiles), so the CLI and the GUI save the same
thing. Every file starts with a comment naming a `meshdeck plan` command that writes it again
byte for byte (the options that differ from their defaults, in the parser's order), so an example or
a colleague's profile says where its numbers came from. Options are checked before anything is
planned or written; a layout that does not fit, that vLLM cannot run, or that packs instances into
one node is refused naming --rank. A torch layout (`--engine torch`) names the script its ranks run
with --script (a path on the servers or a built-in workload) and --script-args (split as a shell
would, never run by one); a training plan is refused, its settings have no field in a profile.
Where the plan warns and names the setting that avoids the failure (V3.2's FlashMLA batch limit), the
profile takes it unless --max-num-seqs said otherwise, and the output says so; a layout of several
instances says it made one profile (one endpoint) per instance and names the single-instance layout
on the same GPUs with its rank.

With --disaggregated the file is a prefill/decode plan instead (services.plan_profiles.disaggregated_profile):
one profile with `disaggregated:` pools on --hosts in order (prefill's nodes first, then decode's; hosts the
plan leaves idle are left out), chosen with --disaggregated-rank (the number of its row in the plan's
"Prefill/decode-disaggregated" list; default 1). --rank, which picks an aggregated layout, is refused there.
A plan whose sub-node workers share a node between the pools is refused naming --disaggregated-rank.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meshdeck.core.disaggregated import DisaggregatedPlan
from meshdeck.core.errors import InputError
from meshdeck.core.layout_plan import LayoutPlan
from meshdeck.core.planner import PlanResult
from meshdeck.core.units import GIB
from meshdeck.launch.profile import HOST_PATTERN, NAME_PATTERN
from meshdeck.launch.torch_launch import BUILTIN_WORKLOADS
from meshdeck.services.files import STDOUT, output_target
from meshdeck.services.plan_profiles import (
    SCRIPT_NEEDED,
    default_disaggregated_name,
    default_mitigations,
    default_pools_mitigations,
    default_profile_name,
    disaggregated_profile,
    instances_notice,
    model_id_for,
    profile_endpoint,
    profiles_from_layout,
    write_profiles,
)

PROFILE_OPTIONS = (
    "--hosts",
    "--profile-name",
    "--rank",
    "--disaggregated-rank",
    "--model-id",
    "--script",
    "--script-args",
)
_PROFILE_FIELDS = {
    "name": "--profile-name",
    "model": "--model-id",
    "hosts": "--hosts",
    "script": "--script",
    "torch.script": "--script",
    "torch.args": "--script-args",
}


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--profile-out", metavar="FILE", help="write the chosen layout as a deployment profile YAML (FILE-1.yaml, "
        "FILE-2.yaml, … for a layout of several instances); with --disaggregated, the chosen prefill/decode plan "
        "as one profile with its pools and router (see --disaggregated-rank); needs --hosts")  # fmt: skip
    add("--hosts", help="with --profile-out: the meshdeck host names of the nodes, in order, comma-separated "
        "(first is the head), e.g. gpu-a,gpu-b; as many as --nodes")  # fmt: skip
    add("--profile-name", help="with --profile-out: the profile's name (default <model>-<layout>)")
    add("--rank", help="with --profile-out: which layout of the ranking (the # column; default 1, the best that fits)")
    add("--disaggregated-rank", metavar="N", help="with --disaggregated --profile-out: which prefill/decode plan "
        "(its number in the plan's disaggregated list; default 1, the best)")  # fmt: skip
    add("--model-id", help="with --profile-out: the profile's model, a Hugging Face id or a path on the servers "
        "(default: the bundled model's id, else --model as given)")  # fmt: skip
    add("--script", help="with --profile-out and --engine torch: what each rank runs, a path on the servers "
        f"or a built-in test workload ({' / '.join(BUILTIN_WORKLOADS)})")  # fmt: skip
    add("--script-args", help='with --script: its arguments as one string, split like a shell would, '
        'e.g. "--config /data/ds32.yaml --steps 100"')  # fmt: skip


@dataclass(frozen=True)
class ProfileRequest:
    target: Path
    hosts: tuple[str, ...]
    rank: int
    name: str | None
    model_id: str | None
    script: str | None = None
    script_args: tuple[str, ...] = ()
    disaggregated: bool = False  # `rank` is then the disaggregated plan's (--disaggregated-rank)


def profile_request(args: argparse.Namespace) -> ProfileRequest | None:
    """The checked --profile-out options, or None without --profile-out (then the others are refused)."""
    if args.profile_out is None:
        for option in PROFILE_OPTIONS:
            if getattr(args, option[2:].replace("-", "_")) is not None:
                raise InputError(option, "only used with --profile-out FILE")
        return None
    if args.mode == "train":
        raise InputError(
            "--profile-out",
            "a training plan makes no deployment profile: a profile has no field for its ZeRO stage, "
            "micro-batches or activation checkpointing; plan the layout with --mode serve --engine torch "
            "and pass those to your script with --script-args",
        )
    script, script_args = _script_options(args)
    if args.profile_out == STDOUT:
        raise InputError("--profile-out", "'-' is not a file name: the plan itself is printed on stdout")
    output_target(args.profile_out, option="--profile-out")  # a directory, a missing folder: refused before planning
    target = Path(args.profile_out)
    if args.hosts is None:
        raise InputError(
            "--hosts", "required with --profile-out: the meshdeck host names of the nodes, e.g. --hosts gpu-a,gpu-b"
        )
    hosts = tuple(host.strip() for host in args.hosts.split(","))
    for host in hosts:
        if not re.fullmatch(HOST_PATTERN, host):
            raise InputError("--hosts", f"{host!r} is not a host name (letters, digits, '.', '_', '-'; up to 64)")
    if len(set(hosts)) != len(hosts):
        raise InputError("--hosts", "a host is listed twice")
    if args.profile_name is not None and not re.fullmatch(NAME_PATTERN, args.profile_name):
        raise InputError("--profile-name", f"{args.profile_name!r}: letters, digits, '.', '_', '-', up to 64")
    if args.disaggregated:
        if args.rank is not None:
            raise InputError(
                "--rank",
                "picks an aggregated layout; with --disaggregated, --profile-out writes a prefill/decode plan: "
                "choose it with --disaggregated-rank (leave out --disaggregated to write an aggregated layout)",
            )
        rank = 1 if args.disaggregated_rank is None else _positive(args.disaggregated_rank, "--disaggregated-rank")
    else:
        if args.disaggregated_rank is not None:
            raise InputError("--disaggregated-rank", "only used with --disaggregated")
        rank = 1 if args.rank is None else _positive(args.rank, "--rank")
    return ProfileRequest(
        target, hosts, rank, args.profile_name, args.model_id, script, script_args, bool(args.disaggregated)
    )


def _script_options(args: argparse.Namespace) -> tuple[str | None, tuple[str, ...]]:
    """--script and its split --script-args, checked against --engine before anything is planned."""
    if args.engine != "torch":
        for option in ("--script", "--script-args"):
            if getattr(args, option[2:].replace("-", "_")) is not None:
                raise InputError(option, "only for --engine torch: vLLM runs the model itself, not a script")
        return None, ()
    if args.script is None or not args.script.strip():
        raise InputError("--script", SCRIPT_NEEDED)
    if args.script_args is None:
        return args.script, ()
    try:
        return args.script, tuple(shlex.split(args.script_args))
    except ValueError as exc:  # an unclosed quote
        raise InputError("--script-args", f"{args.script_args!r} cannot be split into arguments: {exc}") from None


def _positive(value: str, flag: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise InputError(flag, f"must be an integer, got {value!r}") from None
    if number < 1:
        raise InputError(flag, f"must be at least 1, got {number}")
    return number


def chosen_layout(result: PlanResult, rank: int) -> LayoutPlan:
    """The layout at `rank` (1-based, the plan's # column), refused unless vLLM can run it and it fits."""
    layouts, fitting = result.layouts, len(result.fitting)
    choose = f"choose --rank 1 to {fitting}" if fitting else "nothing fits; see the plan's top pick"
    if rank > len(layouts):
        raise InputError("--rank", f"{rank}: the plan ranks {len(layouts)} layout(s), {fitting} of them fit; {choose}")
    layout = layouts[rank - 1]
    what = f"{rank} ({layout.label()})"
    if not layout.valid:
        raise InputError("--rank", f"{what} is not a valid layout: {layout.invalid_reason}; {choose}")
    if not layout.supported:
        raise InputError("--rank", f"{what}: vLLM cannot run this model on this GPU: {'; '.join(layout.warnings)}")
    if not layout.fits:
        need = result.settings.max_model_len
        raise InputError(
            "--rank",
            f"{what} does not fit: short by {layout.shortfall_bytes / GIB:.1f} GiB per GPU for one {need}-token "
            f"request; {choose}",
        )
    return layout


def command_line(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """`meshdeck plan` with every option that differs from its default, in the parser's order."""
    argv = ["meshdeck", "plan"]
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        flag = action.option_strings[-1]
        if action.nargs == 0:
            argv.append(flag)
        elif str(value).startswith("-"):  # `--model-id -x` would read -x as an option
            argv.append(f"{flag}={value}")
        else:
            argv += [flag, str(value)]
    return shlex.join(argv)


def write_plan_profiles(request: ProfileRequest, result: PlanResult, model: str, command: str) -> list[dict[str, Any]]:
    """Write the chosen layout's profiles; what was written, for the JSON key `profiles_written` and the text."""
    nodes = result.request.cluster.nodes
    if len(request.hosts) != nodes:
        raise InputError("--hosts", f"names {len(request.hosts)} host(s) but --nodes is {nodes}; name one per node")
    if request.disaggregated:
        return write_disaggregated_profile(request, result, model, command)
    layout = chosen_layout(result, request.rank)
    name = request.name or default_profile_name(result, layout)
    model_id = request.model_id if request.model_id is not None else model_id_for(model)
    applied = default_mitigations(layout, result)
    try:
        profiles = profiles_from_layout(
            layout, result, request.hosts, name, model_id, request.script, request.script_args, applied
        )
    except InputError as exc:
        raise _as_option_error(exc, request.rank, layout.label(), "--rank") from None
    header = f"# {command}\n# rank {request.rank} of the plan: {layout.label()} on {layout.gpus} GPUs\n"
    header += "".join(f"# {m.text}\n" for m in applied)
    paths = write_profiles(profiles, request.target, header, option="--profile-out")
    notice = instances_notice(result, layout)
    return [
        {
            "path": str(path),
            "name": p.name,
            "hosts": list(p.hosts),
            "rank": request.rank,
            "layout": layout.label(),
            "endpoint": profile_endpoint(p) or None,
            "mitigations": [m.text for m in applied],
            "instances_notice": notice or None,
            "disaggregated": False,
        }
        for path, p in zip(paths, profiles, strict=True)
    ]


def chosen_disaggregated(result: PlanResult, rank: int) -> DisaggregatedPlan:
    """The disaggregated plan at `rank` (1-based, its number in the plan's list)."""
    plans = result.disaggregated
    if not plans:
        raise InputError(
            "--disaggregated",
            "no split of this cluster holds both a prefill and a decode worker: there is no prefill/decode plan "
            "to write (plan two or more nodes, or leave out --disaggregated)",
        )
    if rank > len(plans):
        raise InputError("--disaggregated-rank", f"{rank}: the plan lists {len(plans)}; choose 1 to {len(plans)}")
    plan = plans[rank - 1]
    assert isinstance(plan, DisaggregatedPlan)
    return plan


def write_disaggregated_profile(
    request: ProfileRequest, result: PlanResult, model: str, command: str
) -> list[dict[str, Any]]:
    """Write the chosen prefill/decode plan as one profile; what was written (as write_plan_profiles)."""
    plan = chosen_disaggregated(result, request.rank)
    name = request.name or default_disaggregated_name(result, plan)
    model_id = request.model_id if request.model_id is not None else model_id_for(model)
    applied = default_pools_mitigations(plan, result)
    try:
        profile = disaggregated_profile(
            plan, result, name=name, hosts=request.hosts, model=model_id, mitigations=applied
        )
    except InputError as exc:
        raise _as_option_error(exc, request.rank, plan.label(), "--disaggregated-rank") from None
    gpus = plan.prefill.gpus + plan.decode.gpus
    header = f"# {command}\n# prefill/decode plan {request.rank}: {plan.label()} on {gpus} GPUs\n"
    idle = request.hosts[len(profile.hosts) :]
    if idle:
        header += f"# not used by the pools: {', '.join(idle)}\n"
    header += "".join(f"# {m.text}\n" for m in applied)
    (path,) = write_profiles([profile], request.target, header, option="--profile-out")
    return [
        {
            "path": str(path),
            "name": profile.name,
            "hosts": list(profile.hosts),
            "rank": request.rank,
            "layout": plan.label(),
            "endpoint": profile_endpoint(profile) or None,
            "mitigations": [m.text for m in applied],
            "instances_notice": None,
            "disaggregated": True,
        }
    ]


def _as_option_error(exc: InputError, rank: int, label: str, rank_option: str) -> InputError:
    """A profile-validation error named after the option that supplied the field; the layout's or a pool's
    after the option that chose the plan (`rank_option`)."""
    if exc.field == "layout" or exc.field.startswith("disaggregated."):
        where = f"{exc.field}: " if exc.field != "layout" else ""
        return InputError(rank_option, f"{rank} ({label}): {where}{exc.problem}")
    path = exc.field.removeprefix("profile: ").split("[")[0]  # "torch.args[0]" -> "torch.args"
    option = _PROFILE_FIELDS.get(path) or _PROFILE_FIELDS.get(path.split(".")[0], exc.field)
    return InputError(option, exc.problem)


def written_text(written: Sequence[dict[str, Any]]) -> str:
    first = written[0]
    files = ", ".join(f"{w['path']} ({w['name']} on {', '.join(w['hosts'])})" for w in written)
    which = "prefill/decode plan" if first.get("disaggregated") else "rank"
    lines = [f"Profile: {which} {first['rank']}, {first['layout']} → {files}"]
    if first.get("disaggregated") and first["endpoint"]:
        lines.append(f"  one deployment: its router serves at {first['endpoint']}")
    lines += [f"  applied: {text}" for text in first["mitigations"]]
    if first["instances_notice"]:
        lines.append(f"  {first['instances_notice']}")
    return "\n" + "\n".join(lines) + "\n"
