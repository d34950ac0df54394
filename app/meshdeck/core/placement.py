"""Where each vLLM rank runs, and which link class each parallel group's traffic crosses.

vLLM numbers ranks TP-fastest: rank = dp × (PP × TP) + pp × TP + tp, and fills GPUs of a node in
order, so TP groups are consecutive GPUs (inside one node when TP divides the GPUs per node) and
pipeline stages step across nodes. A cluster may run several independent vLLM instances (each its
own `vllm serve`, e.g. one per node); an instance uses whole nodes, or a slice of one node.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from meshdeck.core.cluster import SCALE_UP_LINKS, ClusterSpec, LinkClass, slowest


@dataclass(frozen=True)
class RankPlacement:
    rank: int
    instance: int
    node: int
    gpu: int
    data_parallel_rank: int
    pipeline_stage: int
    tensor_rank: int

    def as_dict(self) -> dict[str, int]:
        return {
            "rank": self.rank,
            "instance": self.instance,
            "node": self.node,
            "gpu": self.gpu,
            "dp": self.data_parallel_rank,
            "pp": self.pipeline_stage,
            "tp": self.tensor_rank,
        }


@dataclass(frozen=True)
class Placement:
    """An instance of `gpus_per_instance` GPUs, repeated `instances` times over the cluster."""

    gpus_per_instance: int
    instances: int
    gpus_per_node: int
    nodes_per_instance: int = field(init=False)
    instances_per_node: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes_per_instance", max(1, self.gpus_per_instance // self.gpus_per_node))
        object.__setattr__(self, "instances_per_node", max(1, self.gpus_per_node // self.gpus_per_instance))

    @property
    def nodes_used(self) -> int:
        if self.gpus_per_instance >= self.gpus_per_node:
            return self.instances * self.nodes_per_instance
        return -(-self.instances // self.instances_per_node)

    @property
    def gpus_used(self) -> int:
        return self.instances * self.gpus_per_instance

    def locate(self, instance: int, rank: int) -> tuple[int, int]:
        """(node, gpu) of a rank of an instance."""
        if self.gpus_per_instance <= self.gpus_per_node:
            node = instance // self.instances_per_node
            gpu = (instance % self.instances_per_node) * self.gpus_per_instance + rank
            return node, gpu
        return instance * self.nodes_per_instance + rank // self.gpus_per_node, rank % self.gpus_per_node


def placement_for(cluster: ClusterSpec, gpus_per_instance: int) -> Placement | None:
    """Pack as many instances of this size as the cluster holds (whole nodes, or slices of a node)."""
    gpn = cluster.gpus_per_node
    if gpus_per_instance <= gpn:
        if gpn % gpus_per_instance:
            return None
        return Placement(gpus_per_instance, cluster.nodes * (gpn // gpus_per_instance), gpn)
    if gpus_per_instance % gpn:
        return None
    nodes_each = gpus_per_instance // gpn
    if nodes_each > cluster.nodes:
        return None
    return Placement(gpus_per_instance, cluster.nodes // nodes_each, gpn)


def rank_of(tp: int, pp: int, dp: int, tensor_parallel: int, pipeline_parallel: int) -> int:
    return dp * (pipeline_parallel * tensor_parallel) + pp * tensor_parallel + tp


def rank_map(
    placement: Placement, tensor_parallel: int, pipeline_parallel: int, data_parallel: int
) -> tuple[RankPlacement, ...]:
    out: list[RankPlacement] = []
    for instance in range(placement.instances):
        for dp in range(data_parallel):
            for pp in range(pipeline_parallel):
                for tp in range(tensor_parallel):
                    rank = rank_of(tp, pp, dp, tensor_parallel, pipeline_parallel)
                    node, gpu = placement.locate(instance, rank)
                    out.append(RankPlacement(rank, instance, node, gpu, dp, pp, tp))
    return tuple(out)


def _link(cluster: ClusterSpec, a: tuple[int, int], b: tuple[int, int]) -> LinkClass:
    if a[0] != b[0]:
        return LinkClass.NETWORK
    return cluster.intra_link(a[1], b[1])


def group_link(cluster: ClusterSpec, placement: Placement, ranks: list[int]) -> LinkClass:
    """Slowest link any pair of the group's GPUs (in instance 0) crosses.

    Ranks are listed in increasing order and fill nodes in order, so the group spans nodes exactly
    when its first and last rank do; only a detected topology needs the pairs inside a node.
    """
    if len(ranks) < 2:
        return LinkClass.LOCAL
    first, last = placement.locate(0, ranks[0]), placement.locate(0, ranks[-1])
    if first[0] != last[0]:
        return LinkClass.NETWORK
    if cluster.topology is None:
        return cluster.intra_link(first[1], last[1])
    where = [placement.locate(0, r) for r in ranks]
    return slowest([_link(cluster, a, b) for i, a in enumerate(where) for b in where[i + 1 :]])


def pipeline_inside_nvlink_node(
    cluster: ClusterSpec, placement: Placement, tensor_parallel: int, pipeline_parallel: int
) -> bool:
    """True when some stage of a replica hands off to the next on the same node over NVLink (or Infinity Fabric).

    Replica 0's PP − 1 hand-offs decide: the other replicas repeat its pattern when TP divides the node.
    """
    tp, pp = tensor_parallel, pipeline_parallel
    for stage in range(pp - 1):
        here = placement.locate(0, rank_of(0, stage, 0, tp, pp))
        there = placement.locate(0, rank_of(0, stage + 1, 0, tp, pp))
        if here[0] == there[0] and cluster.intra_link(here[1], there[1]) in SCALE_UP_LINKS:
            return True
    return False


@dataclass(frozen=True)
class GroupLinks:
    tensor: LinkClass
    expert: LinkClass  # the TP×DP group of one stage (MoE dispatch/combine)
    pipeline: LinkClass
    tensor_crosses_socket: bool


def group_links(
    cluster: ClusterSpec, placement: Placement, tensor_parallel: int, pipeline_parallel: int, data_parallel: int
) -> GroupLinks:
    """Slowest link each kind of group crosses, over every group of the instance."""
    tp, pp, dp = tensor_parallel, pipeline_parallel, data_parallel
    if cluster.topology is not None:  # one node (a topology describes one): check the GPU pairs
        tensor_ranks = list(range(tp))
        expert_ranks = [rank_of(t, 0, d, tp, pp) for d in range(dp) for t in range(tp)]
        pipeline = slowest(
            [
                _link(
                    cluster,
                    placement.locate(0, rank_of(0, s, 0, tp, pp)),
                    placement.locate(0, rank_of(0, s + 1, 0, tp, pp)),
                )
                for s in range(pp - 1)
            ]
        )
        gpus = [placement.locate(0, r) for r in tensor_ranks]
        crosses_socket = tp > 1 and any(
            a[0] == b[0] and cluster.topology.crosses_cpu_socket(a[1], b[1])
            for i, a in enumerate(gpus)
            for b in gpus[i + 1 :]
        )
        return GroupLinks(
            tensor=group_link(cluster, placement, tensor_ranks),
            expert=group_link(cluster, placement, expert_ranks) if tp * dp > 1 else LinkClass.LOCAL,
            pipeline=pipeline,
            tensor_crosses_socket=crosses_socket,
        )
    intra = cluster.intra_node_link_class
    gpn = placement.gpus_per_node
    multi_node = placement.gpus_per_instance > gpn
    # TP blocks are aligned to multiples of TP: one straddles a node boundary unless TP divides the node.
    tensor_net = multi_node and tp > 1 and (tp > gpn or gpn % tp != 0)
    # the EP group of stage s spans ranks s·TP … (DP−1)·PP·TP + s·TP + TP − 1
    span = (dp - 1) * pp * tp + tp - 1
    expert_net = multi_node and tp * dp > 1 and any((s * tp) // gpn != (s * tp + span) // gpn for s in range(pp))
    # stage s hands over to s + 1 between TP blocks j and j + 1 (j = d·PP + s, s < PP − 1)
    if not multi_node or pp == 1:
        pipe_net = False
    elif tp % gpn == 0:
        pipe_net = True  # every TP block starts a node
    elif gpn % tp == 0:
        pipe_net = (gpn // tp) % pp != 0  # a node ends every gpn/TP blocks, a replica's stages every PP blocks
    else:
        pipe_net = any((j * tp) // gpn != ((j + 1) * tp) // gpn for j in range(dp * pp) if j % pp != pp - 1)
    return GroupLinks(
        tensor=LinkClass.NETWORK if tensor_net else (intra if tp > 1 else LinkClass.LOCAL),
        expert=LinkClass.NETWORK if expert_net else (intra if tp * dp > 1 else LinkClass.LOCAL),
        pipeline=LinkClass.NETWORK if pipe_net else (intra if pp > 1 else LinkClass.LOCAL),
        tensor_crosses_socket=False,
    )
