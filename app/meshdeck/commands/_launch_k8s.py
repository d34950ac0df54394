"""`meshdeck launch PROFILE --k8s-manifest [-o FILE] [--k8s-* ...]`: a LeaderWorkerSet + Service, run nowhere.

Writes the YAML for `kubectl apply -f` (launch/k8s_manifest.py says what is in it) to stdout, or with `-o FILE`
atomically (services/files.py). Like `--dry-run` it contacts nothing: a stored profile is only read, no
database is created, no host is asked. The plan's warnings go to stderr.
"""

from __future__ import annotations

import argparse

from meshdeck.commands._launch_artifact import write_artifact
from meshdeck.core.errors import InputError
from meshdeck.launch.k8s_manifest import build_manifest
from meshdeck.launch.k8s_options import K8sOptions, k8s_options
from meshdeck.launch.profile import Profile

# dest -> option, for "needs --k8s-manifest" (and the parser's own order)
_K8S_ONLY = {
    "output": "-o",
    "k8s_name": "--k8s-name",
    "k8s_namespace": "--k8s-namespace",
    "k8s_image": "--k8s-image",
    "k8s_rdma_resource": "--k8s-rdma-resource",
    "k8s_host_network": "--k8s-host-network",
    "k8s_shm_size": "--k8s-shm-size",
    "k8s_model_pvc": "--k8s-model-pvc",
    "k8s_model_host_path": "--k8s-model-host-path",
    "k8s_hf_secret": "--k8s-hf-secret",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Kubernetes (write a LeaderWorkerSet manifest; start nothing)")
    group.add_argument(
        "--k8s-manifest", action="store_true", help="write a LeaderWorkerSet + Service for kubectl apply"
    )
    group.add_argument("-o", "--output", metavar="FILE", help="write the manifest to FILE (default, or -: stdout)")
    group.add_argument("--k8s-name", metavar="NAME", help="the LeaderWorkerSet's name (default: the profile's)")
    group.add_argument("--k8s-namespace", metavar="NS", help="the namespace (default: kubectl's current)")
    group.add_argument("--k8s-image", metavar="IMAGE", help="container image (default: vllm/vllm-openai:v<release>)")
    group.add_argument(
        "--k8s-rdma-resource", metavar="RES", help="RDMA device resource, e.g. rdma/hca_shared_devices_a"
    )
    group.add_argument("--k8s-host-network", action="store_true", help="pods use their node's network")
    group.add_argument("--k8s-shm-size", metavar="QTY", help="memory-backed /dev/shm size (default 15Gi)")
    group.add_argument("--k8s-model-pvc", metavar="PVC", help="mount the model from this PersistentVolumeClaim")
    group.add_argument("--k8s-model-host-path", metavar="PATH", help="mount the model from this path on the node")
    group.add_argument("--k8s-hf-secret", metavar="SECRET", help="HF_TOKEN from this Secret's key HF_TOKEN")


def refuse_without_manifest(args: argparse.Namespace, *, output_too: bool = True) -> None:
    """A --k8s-* option (or -o, unless another writer takes it) without --k8s-manifest would be ignored
    silently: refuse it, naming it."""
    for dest, option in _K8S_ONLY.items():
        if getattr(args, dest) not in (None, False) and (output_too or dest != "output"):
            raise InputError(option, "is for --k8s-manifest or --slurm-script only" if dest == "output"
                             else "is for --k8s-manifest only")  # fmt: skip


def options_from(args: argparse.Namespace, profile: Profile) -> K8sOptions:
    return k8s_options(
        name=args.k8s_name if args.k8s_name is not None else profile.name,
        name_field="--k8s-name" if args.k8s_name is not None else "name (the profile's; pass --k8s-name)",
        namespace=args.k8s_namespace,
        image=args.k8s_image,
        rdma_resource=args.k8s_rdma_resource,
        host_network=args.k8s_host_network,
        shm_size=args.k8s_shm_size,
        model_pvc=args.k8s_model_pvc,
        model_host_path=args.k8s_model_host_path,
        hf_secret=args.k8s_hf_secret,
    )


def write_manifest(args: argparse.Namespace, profile: Profile) -> int:
    def build() -> tuple[str, tuple[str, ...]]:
        manifest = build_manifest(profile, options_from(args, profile))
        return manifest.to_yaml(), manifest.warnings

    return write_artifact(args, "--k8s-manifest", ["slurm_script"], build, "apply it with kubectl apply -f")
