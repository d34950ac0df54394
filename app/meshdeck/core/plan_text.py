"""The plan as a readable terminal table (what `meshdeck plan` prints without --json).

Pure text formatting, no I/O: numbers in GiB, estimates labelled "est.", the top pick's warnings,
traffic and vllm serve flags spelled out under the table.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from meshdeck.core.layout_plan import INSTANCES_LEGEND, LayoutPlan
from meshdeck.core.rules import EP_TIE_TOLERANCE
from meshdeck.core.serving import pareto_front
from meshdeck.core.units import GIB, KIB, MIB

if TYPE_CHECKING:
    from meshdeck.core.planner import PlanResult

COLUMNS = (
    ("#", ">"),
    ("layout", "<"),
    ("GPUs", ">"),
    ("weights", ">"),
    ("reserve", ">"),
    ("KV/GPU", ">"),
    ("KV tok/replica", ">"),
    ("KV tok total", ">"),
    ("conc@len", ">"),
    ("in flight", ">"),
    ("TTFT ms", ">"),
    ("TPOT ms", ">"),
    ("tok/s", ">"),
    ("tok/s/GPU", ">"),
    ("tok/s/user", ">"),
    ("warn", ">"),
)
SPEED_COLUMNS = 6  # in flight … tok/s/user: the serving estimate (TTFT, TPOT, throughput) at the workload


def _speed_cells(layout: LayoutPlan) -> list[str]:
    serving = layout.serving
    if serving is None:
        return ["—"] * SPEED_COLUMNS
    mark = "" if serving.source.measured else "~"  # ~: the roofline's (see the speed line under the table)
    sla = "" if serving.sla is None or serving.sla.meets else " ✗"
    return [
        f"{serving.concurrency:,}",
        f"{mark}{serving.ttft_ms:,.0f}",
        f"{mark}{serving.tpot_ms:,.1f}{sla}",
        f"{mark}{serving.output_tokens_per_s:,.0f}",
        f"{mark}{serving.output_tokens_per_s_per_gpu:,.0f}",
        f"{mark}{serving.tokens_per_s_per_user:,.1f}",
    ]


def _row(rank: int, layout: LayoutPlan) -> list[str]:
    if not layout.valid:
        return [
            str(rank),
            layout.label(),
            str(layout.gpus),
            *["—"] * (len(COLUMNS) - 4),
            f"invalid: {layout.invalid_reason}",
        ]
    reserve = layout.reserve.in_budget_bytes / GIB if layout.reserve else 0.0
    if not layout.fits:
        return [
            str(rank),
            layout.label(),
            str(layout.gpus),
            f"{layout.weights_gib_per_gpu:.1f}",
            f"{reserve:.1f}",
            f"short {layout.shortfall_bytes / GIB:.1f}",
            *["—"] * (3 + SPEED_COLUMNS),
            str(len(layout.warnings)),
        ]
    return [
        str(rank),
        layout.label(),
        str(layout.gpus),
        f"{layout.weights_gib_per_gpu:.1f}",
        f"{reserve:.1f}",
        f"{layout.kv_cache_gib_per_gpu:.1f}",
        f"{layout.kv_tokens_per_replica:,}",
        f"{layout.kv_tokens_total:,}",
        f"{layout.max_concurrency:.1f}x",
        *_speed_cells(layout),
        str(len(layout.warnings)),
    ]


def table(layouts: list[LayoutPlan]) -> str:
    rows = [[name for name, _ in COLUMNS]] + [_row(i + 1, layout) for i, layout in enumerate(layouts)]
    widths = [max(len(row[c]) for row in rows if c < len(row)) for c in range(len(COLUMNS))]
    lines = []
    for row in rows:
        cells = []
        for c, (_, align) in enumerate(COLUMNS):
            value = row[c] if c < len(row) else ""
            cells.append(value.rjust(widths[c]) if align == ">" else value.ljust(widths[c]))
        if len(row) > len(COLUMNS):
            cells.append(row[-1])
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


RANKING_LEGEND = (
    "order: documented layouts first, then PP inside an NVLink node, then DP × PP (see their warnings); "
    f"within each, the goal's serving estimate — a DP layout with EP goes ahead of its twin without EP inside "
    f"{EP_TIE_TOLERANCE:.0%}; ✗: misses the SLA targets"
)


def _speed_line(result: PlanResult) -> str:
    source = result.speed_source
    if source is None:
        return ""
    text = source.text()
    marker = "" if source.measured else " (~ marks it in the table)"
    return f"speed at {result.request.workload.text()}: {text}{marker}"


def front_rows(result: PlanResult) -> list[tuple[str, str, Any]]:
    """(kind, label, ServingEstimate) on the throughput–interactivity front: aggregated layouts and pools."""
    points: list[tuple[str, str, Any]] = [
        ("aggregated", layout.label(), layout.serving) for layout in result.fitting if layout.serving is not None
    ]
    points += [("disaggregated", option.label(), option.serving) for option in result.disaggregated]
    front = pareto_front([(s.tokens_per_s_per_user, s.output_tokens_per_s_per_gpu) for _, _, s in points])
    return [points[i] for i in front]


def render_front(result: PlanResult) -> list[str]:
    rows = front_rows(result)
    if not rows:
        return []
    out = ["", "Throughput–interactivity front (no layout beats these on both tok/s per GPU and tok/s per user):"]
    for kind, label, serving in rows:
        mark = "" if serving.source.measured else "~"
        out.append(
            f"  {mark}{serving.tokens_per_s_per_user:8.1f} tok/s/user  {mark}{serving.output_tokens_per_s_per_gpu:9,.0f} "
            f"tok/s/GPU  TTFT {serving.ttft_ms:8,.0f} ms  {serving.concurrency:6,} in flight  {label} ({kind})"
        )
    return out


def render_disaggregated(result: PlanResult, top: int) -> list[str]:
    if not result.request.disaggregated:
        return []
    out = ["", "Prefill/decode-disaggregated (rate-matched pools; KV over NixlConnector):"]
    if not result.disaggregated:
        return [*out, "  no split of this cluster holds a prefill and a decode worker"]
    best = result.aggregated_best
    if best is not None and best.serving is not None:
        s = best.serving
        out.append(
            f"  aggregated best, {best.label()} on {best.gpus} GPUs: {s.output_tokens_per_s:,.0f} tok/s "
            f"({s.output_tokens_per_s_per_gpu:,.0f}/GPU), TTFT {s.ttft_ms:,.0f} ms, TPOT {s.tpot_ms:,.1f} ms"
        )
    for i, option in enumerate(result.disaggregated[:top]):
        s = option.serving
        versus = "" if option.versus_aggregated is None else f" — {option.versus_aggregated:.2f}× the aggregated"
        sla = (
            ""
            if s.sla is None
            else (" (meets the SLA)" if s.sla.meets else f" (misses the SLA by {s.sla.worst_miss:.0%})")
        )
        out.append(
            f"  {i + 1}. {option.label()} on {s.gpus} GPUs: {s.output_tokens_per_s:,.0f} tok/s "
            f"({s.output_tokens_per_s_per_gpu:,.0f}/GPU), TTFT {s.ttft_ms:,.0f} ms (KV transfer "
            f"{option.kv_transfer_ms:,.1f} ms), TPOT {s.tpot_ms:,.1f} ms, {s.concurrency:,} in flight{versus}{sla}"
        )
    first = result.disaggregated[0]
    for pool in (first.prefill, first.decode):
        env = " ".join(f"{key}={value}" for key, value in pool.env)
        out.append(f"  {pool.role} worker: {env + ' ' if env else ''}vllm serve <model> {shlex.join(pool.vllm_args)}")
    out += [f"  warning: {warning}" for warning in first.warnings]
    return out


def _bytes(n_bytes: float) -> str:
    return f"{n_bytes / MIB:.1f} MiB" if n_bytes >= MIB else f"{n_bytes / KIB:.1f} KiB"


def _network(result: PlanResult) -> str:
    cluster = result.request.cluster
    if cluster.nodes == 1:
        return ""
    gbps = cluster.inter_node_bytes_per_s * 8 / 1e9
    origin = ", assumed — set --inter-node-gbps" if cluster.inter_node_assumed else ""
    return f"; network {gbps:,.0f} Gb/s per node{origin}"


def render_plan(result: PlanResult, *, top: int = 10, include_all: bool = False) -> str:
    request, settings, card = result.request, result.settings, result.request.model
    cluster = request.cluster
    link = "topology file" if cluster.topology else cluster.intra_node_link
    seqs_origin = "--max-num-seqs" if settings.max_num_seqs_from_user else "vLLM default"
    tokens_origin = "--max-num-batched-tokens" if request.max_num_batched_tokens else "vLLM default"
    out = [
        f"meshdeck plan — {card.name} on {cluster.nodes} × {cluster.gpus_per_node} {cluster.gpu.name} ({link}"
        f"{_network(result)}), {request.engine}, goal: {request.goal}",
        f"weights {settings.weights_dtype}, KV {settings.kv.kv_cache_dtype} ({settings.kv.attention_backend}, block "
        f"{settings.kv.block_size}), max_model_len {settings.max_model_len:,}, gpu_memory_utilization "
        f"{request.gpu_memory_utilization:g}, max_num_seqs {settings.max_num_seqs} ({seqs_origin}), "
        f"max_num_batched_tokens {settings.max_num_batched_tokens} ({tokens_origin}); "
        f"est. at {settings.context_tokens:,}-token contexts (--context-tokens)",
        f"parameters: {result.parameters.main_model / 1e9:.1f}B main model + {result.parameters.mtp / 1e9:.1f}B MTP "
        f"= {result.parameters.checkpoint_total / 1e9:.1f}B in the checkpoint; "
        f"{result.parameters.active_per_token / 1e9:.1f}B active per token",
        "",
    ]
    shown = result.layouts if include_all else result.fitting
    hidden = len(result.layouts) - len(result.fitting)
    if not shown:
        out.append("No layout fits.")
    else:
        out.append(table(shown[:top]))
        more = len(shown) - min(top, len(shown))
        tail = []
        if more > 0:
            tail.append(f"{more} more (--top {len(shown)})")
        if hidden and not include_all:
            tail.append(f"{hidden} that do not fit or vLLM would refuse (--all)")
        if tail:
            out.append("… " + "; ".join(tail))
        out.append(RANKING_LEGEND)
        if any(layout.instances > 1 for layout in shown[:top]):
            out.append(INSTANCES_LEGEND)
        out.append(_speed_line(result))
    out += render_disaggregated(result, top)
    out += render_front(result)
    out += ["", f"Top pick: {result.top_reason}"]
    best = result.layouts[0] if result.layouts else None
    if best is not None and best.valid:
        if best.reserve is not None:
            r = best.reserve
            # from vLLM 0.20 the CUDA-graph estimate is part of what the reserve subtracts
            graphs = f", CUDA graphs {r.cudagraph_bytes / GIB:.2f}" if r.cudagraph_in_budget else ""
            out.append(
                f"  per GPU: weights {best.weights_gib_per_gpu:.2f} GiB + reserve {r.in_budget_bytes / GIB:.2f} GiB "
                f"(activations {r.activation_peak_bytes / GIB:.2f}, sampler {r.sampler_bytes / GIB:.2f}, non-torch "
                f"{r.non_torch_bytes / GIB:.2f}{graphs}) + KV {best.kv_cache_gib_per_gpu:.2f} GiB of "
                f"{best.usable_bytes_per_gpu / GIB:.2f} GiB usable; KV {best.kv_bytes_per_token_per_gpu:,} B/token/GPU; "
                f"NCCL buffers {r.communicator_bytes / GIB:.2f} GiB outside the budget"
            )
        if best.fits:
            limit = "max_num_seqs" if best.est_batch_per_replica >= settings.max_num_seqs else "its KV cache"
            out.append(
                f"  est. at {best.est_batch_per_replica} sequences of {settings.context_tokens:,} tokens per replica "
                f"(as many as {limit} allows) × {best.replicas} replicas"
            )
        if best.traffic:
            parts = [f"{t.collective} {_bytes(t.bytes_per_token)} over {t.link.value}" for t in best.traffic]
            out.append("  traffic per token per GPU: " + "; ".join(parts))
        for warning in best.warnings:
            out.append(f"  warning: {warning}")
        if best.vllm_args:
            out.append("  vllm serve <model> " + shlex.join(best.vllm_args))
            if best.gpus_per_instance > cluster.gpus_per_node:
                out.append(
                    f"  (one `vllm serve` per node of its {best.placement.nodes_per_instance}: the per-node flags — "
                    "--nnodes/--node-rank/--master-addr, or --data-parallel-size-local/--data-parallel-address/"
                    "--data-parallel-start-rank, and --headless off the head node — are added at launch)"
                )
    out += ["", *(f"note: {note}" for note in result.notes)]
    return "\n".join(out) + "\n"


TRAIN_COLUMNS = (
    "#",
    "layout",
    "GPUs",
    "params",
    "grads",
    "optim",
    "activ.",
    "total",
    "bubble",
    "est. tok/s",
    "traffic/step",
)


def render_training(result: PlanResult, *, top: int = 10, include_all: bool = False) -> str:
    training, request = result.training, result.request
    settings = request.train_settings
    cluster = request.cluster
    out = [
        f"meshdeck plan --mode train — {request.model.name} on {cluster.nodes} × {cluster.gpus_per_node} "
        f"{cluster.gpu.name}, torch",
        f"seq_len {settings.seq_len}, micro-batch {settings.micro_batch_size} × {settings.micro_batches} per step, "
        f"ZeRO-{settings.zero_stage}, activation checkpointing {'on' if settings.activation_checkpointing else 'off'}; "
        "GiB per GPU",
        "",
    ]
    shown = training.layouts if include_all else [layout for layout in training.layouts if layout.fits]
    rows = [list(TRAIN_COLUMNS)]
    for i, layout in enumerate(shown[:top]):
        traffic = ", ".join(f"{name} {volume / GIB:.1f} GiB/{link.value}" for name, volume, link in layout.traffic)
        rows.append(
            [
                str(i + 1),
                layout.label() + ("" if layout.fits else " (does not fit)"),
                str(layout.placement.gpus_per_instance),
                f"{layout.params_bytes / GIB:.1f}",
                f"{layout.grads_bytes / GIB:.1f}",
                f"{layout.optimizer_bytes / GIB:.1f}",
                f"{layout.activations_bytes / GIB:.1f}",
                f"{layout.total_bytes / GIB:.1f}",
                f"{layout.bubble_fraction:.0%}",
                f"{layout.est_tokens_per_s:,.0f}",
                traffic or "—",
            ]
        )
    if len(rows) == 1:
        out.append("No layout fits (--all lists them).")
    else:
        widths = [max(len(row[c]) for row in rows) for c in range(len(TRAIN_COLUMNS) - 1)]
        for row in rows:
            cells = [row[c].rjust(widths[c]) if c not in (1,) else row[c].ljust(widths[c]) for c in range(len(widths))]
            out.append("  ".join([*cells, row[-1]]).rstrip())
    out += ["", f"Top pick: {training.top_reason}"]
    if training.strategies:
        out += [
            "",
            "Strategies on this cluster (GiB per GPU; traffic per step per GPU; link need to hide it behind compute):",
        ]
        for name, layout in training.strategies:
            needs = layout.link_needs_bytes_per_s()
            traffic = "; ".join(
                f"{kind} {volume / GIB:.1f} GiB over {link.value} (needs {needs.get(kind, 0) * 8 / 1e9:,.0f} Gb/s)"
                for kind, volume, link in layout.traffic
            )
            fits = "" if layout.fits else " — does not fit"
            out.append(
                f"  {name:<7} {layout.label():<28} {layout.total_bytes / GIB:7.1f}{fits}; {traffic or 'no traffic'}"
            )
    out += ["", *(f"note: {note}" for note in training.notes)]
    return "\n".join(out) + "\n"
