"""tiny-deepseek: a small DeepSeek-shaped model run sharded by the planned layout, checked against a
single-process run of the same seeded weights.

    torchrun ... tiny_deepseek.py [--batch 8] [--seq-len 16] [--iters 3] [--duration-s 0] [--seed 0]

Tensor parallel splits attention heads and MLP columns (all-reduce in the TP group); pipeline parallel
splits the layers into stages (activations sent stage to stage); data parallel splits the batch;
expert parallel spreads whole routed experts over the dp × tp ranks of a stage (tokens dispatched
and combined by all-to-all). On the last stage, tensor rank 0 of every replica recomputes its logits
with the unsharded model in one process and compares: the run passes when the max absolute difference
is below 1e-4 (fp32). Rank 0 prints tokens/s, the bytes each group's collectives carried per forward,
and one `MESHDECK_RESULT {json}` line; the exit status is 1 when the logits do not match.

NCCL on GPUs, gloo on CPUs. torch and the standard library only: shipped to servers with
layout_mesh.py and tiny_deepseek_model.py next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from typing import Any

import torch
import torch.distributed as dist

if __package__:
    from . import layout_mesh
    from . import tiny_deepseek_model as model
else:  # shipped next to its helpers and run as a script
    import layout_mesh
    import tiny_deepseek_model as model

TOLERANCE = 1e-4


class Traffic:
    """Payload bytes this rank hands to collectives, per group kind (tp / ep / pp / dp)."""

    def __init__(self) -> None:
        self.bytes: dict[str, int] = defaultdict(int)

    def add(self, kind: str, tensor: torch.Tensor) -> None:
        self.bytes[kind] += tensor.numel() * tensor.element_size()


def make_shard(mesh: layout_mesh.LayoutMesh, traffic: Traffic) -> model.Shard:
    sizes = mesh.sizes

    def all_reduce_tp(t: torch.Tensor) -> torch.Tensor:
        if mesh.tensor_group is None:
            return t
        traffic.add("tp", t)
        t = t.contiguous()
        dist.all_reduce(t, group=mesh.tensor_group)
        return t

    def all_gather_tp(t: torch.Tensor) -> torch.Tensor:
        if mesh.tensor_group is None:
            return t
        traffic.add("tp", t)
        parts = [torch.empty_like(t) for _ in range(sizes.tensor_parallel)]
        dist.all_gather(parts, t.contiguous(), group=mesh.tensor_group)
        return torch.cat(parts)

    def all_to_all_ep(t: torch.Tensor, output_split: list[int], input_split: list[int]) -> torch.Tensor:
        traffic.add("ep", t)
        out = t.new_empty((sum(output_split), *t.shape[1:]))
        dist.all_to_all_single(out, t.contiguous(), output_split, input_split, group=mesh.expert_group)
        return out

    expert_parallel = len(mesh.expert_ranks) if sizes.expert_parallel else 1
    return model.Shard(
        tensor_parallel=sizes.tensor_parallel,
        tensor_rank=mesh.tensor_rank,
        expert_parallel=expert_parallel,
        expert_rank=mesh.expert_rank if sizes.expert_parallel else 0,
        all_reduce_tp=all_reduce_tp,
        all_gather_tp=all_gather_tp,
        all_to_all_ep=all_to_all_ep if expert_parallel > 1 else None,
    )


def check_layout(cfg: model.TinyConfig, sizes: layout_mesh.LayoutSizes, batch: int) -> None:
    problems = []
    if cfg.num_heads % sizes.tensor_parallel:
        problems.append(f"{cfg.num_heads} heads do not split over tensor_parallel {sizes.tensor_parallel}")
    if cfg.num_layers % sizes.pipeline_parallel:
        problems.append(f"{cfg.num_layers} layers do not split over pipeline_parallel {sizes.pipeline_parallel}")
    if batch % sizes.data_parallel:
        problems.append(f"batch {batch} does not split over data_parallel {sizes.data_parallel}")
    if sizes.expert_parallel and cfg.num_experts % (sizes.data_parallel * sizes.tensor_parallel):
        problems.append(f"{cfg.num_experts} experts do not split over EP {sizes.data_parallel * sizes.tensor_parallel}")
    if problems:
        raise SystemExit("tiny-deepseek: " + "; ".join(problems))


class StageRunner:
    """One rank's part of the forward: its pipeline stage's layers, sharded by TP / EP."""

    def __init__(self, mesh: layout_mesh.LayoutMesh, cfg: model.TinyConfig, weights: dict[str, torch.Tensor]):
        self.mesh, self.cfg, self.weights = mesh, cfg, weights
        self.traffic = Traffic()
        self.shard = make_shard(mesh, self.traffic)
        per_stage = cfg.num_layers // mesh.sizes.pipeline_parallel
        self.layers = range(mesh.stage * per_stage, (mesh.stage + 1) * per_stage)
        self.first = mesh.stage == 0
        self.last = mesh.stage == mesh.sizes.pipeline_parallel - 1

    def _peer(self, stage: int) -> int:
        return self.mesh.global_rank(self.mesh.data_rank, stage, self.mesh.tensor_rank)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """Logits on the last stage; None elsewhere (activations were sent on)."""
        batch, seq = tokens.shape
        if self.first:
            x = model.embed(tokens, self.weights)
        else:
            x = torch.empty(batch, seq, self.cfg.hidden_size, device=self.mesh.device)
            dist.recv(x, src=self._peer(self.mesh.stage - 1))
        for index in self.layers:
            x = model.layer(x, self.weights, index, self.cfg, self.shard)
        if not self.last:
            self.traffic.add("pp", x)
            dist.send(x.contiguous(), dst=self._peer(self.mesh.stage + 1))
            return None
        return model.head(x, self.weights, self.cfg)


def run(args: argparse.Namespace) -> int:
    mesh, backend = layout_mesh.init_job(args.device)
    try:
        return _run(args, mesh, backend)
    finally:
        dist.destroy_process_group()


def _run(args: argparse.Namespace, mesh: layout_mesh.LayoutMesh, backend: str) -> int:
    cfg = model.TinyConfig()
    check_layout(cfg, mesh.sizes, args.batch)
    weights = {k: v.to(mesh.device) for k, v in model.make_weights(cfg, args.seed).items()}
    all_tokens = model.make_tokens(cfg, args.batch, args.seq_len, args.seed).to(mesh.device)
    per_replica = args.batch // mesh.sizes.data_parallel
    tokens = all_tokens[mesh.data_rank * per_replica : (mesh.data_rank + 1) * per_replica]
    runner = StageRunner(mesh, cfg, weights)

    logits = runner.forward(tokens)  # also the warm-up
    traffic_per_forward = dict(runner.traffic.bytes)
    diff = torch.zeros((), device=mesh.device)
    if logits is not None and mesh.tensor_rank == 0:
        reference = model.reference_forward(tokens, weights, cfg)
        diff = (logits - reference).abs().max()
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    max_abs_diff = float(diff)

    dist.barrier()
    start = layout_mesh.now()
    forwards = 0
    keep_going = torch.ones((), device=mesh.device)
    while True:
        runner.forward(tokens)
        forwards += 1
        elapsed = layout_mesh.now() - start
        keep_going.fill_(1.0 if forwards < args.iters or elapsed < args.duration_s else 0.0)
        dist.all_reduce(keep_going, op=dist.ReduceOp.MIN)  # every rank stops after the same forward
        if keep_going.item() == 0.0:
            break
    layout_mesh.synchronize(mesh.device)
    dist.barrier()
    elapsed = layout_mesh.now() - start

    totals = torch.tensor(
        [float(traffic_per_forward.get(kind, 0)) for kind in ("tp", "ep", "pp", "dp")], device=mesh.device
    )
    dist.all_reduce(totals)
    gathered = _gather_logits(mesh, logits, args.save_logits is not None)
    if mesh.rank == 0:
        if args.save_logits:
            _save_atomically(torch.cat(gathered), args.save_logits)
        result = {
            "workload": "tiny-deepseek",
            "backend": backend,
            "world_size": dist.get_world_size(),
            "layout": mesh.sizes.as_dict(),
            "config": cfg.as_dict(),
            "batch": args.batch,
            "seq_len": args.seq_len,
            "seed": args.seed,
            "forwards": forwards,
            "tokens_per_s": args.batch * args.seq_len * forwards / elapsed if elapsed > 0 else 0.0,
            "bytes_per_forward": {kind: int(totals[i]) for i, kind in enumerate(("tp", "ep", "pp", "dp"))},
            "max_abs_diff": max_abs_diff,
            "tolerance": TOLERANCE,
            "matches_reference": max_abs_diff < TOLERANCE,
        }
        print(
            f"tiny-deepseek: {result['tokens_per_s']:.1f} tokens/s over {forwards} forwards; "
            f"max |logits - single-process| = {max_abs_diff:.3g} "
            f"({'OK' if result['matches_reference'] else 'MISMATCH'}, tolerance {TOLERANCE:g}); "
            f"bytes per forward {result['bytes_per_forward']}",
            flush=True,
        )
        layout_mesh.say_line(layout_mesh.RESULT_MARK + json.dumps(result))
    return 0 if max_abs_diff < TOLERANCE else 1


def _gather_logits(mesh: layout_mesh.LayoutMesh, logits: torch.Tensor | None, wanted: bool) -> list[torch.Tensor]:
    """Replica logits in data-rank order, on rank 0 (only when --save-logits asks for them)."""
    if not wanted:
        return []
    mine = (mesh.data_rank, logits.cpu()) if logits is not None and mesh.tensor_rank == 0 else None
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return [t for _, t in sorted(item for item in everyone if item is not None)]


def _save_atomically(tensor: torch.Tensor, path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".logits.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(tensor, tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="meshdeck tiny-deepseek: a sharded DeepSeek-shaped model")
    parser.add_argument("--batch", type=int, default=8, help="global batch (sequences), split over DP")
    parser.add_argument("--seq-len", type=int, default=16)
    parser.add_argument("--iters", type=int, default=3, help="timed forwards (at least)")
    parser.add_argument("--duration-s", type=float, default=0.0, help="keep running forwards this long")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--save-logits", metavar="PATH", help="rank 0 writes all logits here (torch.save)")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.seq_len < 1 or args.iters < 1 or args.duration_s < 0:
        parser.error("--batch, --seq-len and --iters must be >= 1, --duration-s >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
