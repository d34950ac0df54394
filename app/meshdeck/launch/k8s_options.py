"""What the operator picks for a Kubernetes manifest (`meshdeck launch PROFILE --k8s-manifest`), checked once.

Every value ends up in a LeaderWorkerSet or a Service that a cluster's API server will judge; we judge it first,
by Kubernetes' own name rules, so a typo is an error naming the option here, not a rejected `kubectl apply`
there. Past `k8s_options()` the values are trusted.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from meshdeck.core.errors import InputError
from meshdeck.core.text import quoted
from meshdeck.launch.vllm_known_flags import VLLM_VERSION

# RFC 1035 label (a Service's name must start with a letter); the LWS names its pods NAME-GROUP-INDEX and we
# name the Service NAME-leader, so NAME leaves room for those suffixes inside a 63-character label.
MAX_NAME_CHARS = 52
_RFC1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_RFC1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_RFC1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# An extended resource: DOMAIN/NAME, as device plugins advertise them (rdma/hca_shared_devices_a, nvidia.com/...).
_RESOURCE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")
DEFAULT_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"  # the release whose flags the plan's argv is checked against
DEFAULT_SHM_SIZE = "15Gi"  # vLLM's LWS guide mounts this much memory at /dev/shm for NCCL


@dataclass(frozen=True)
class K8sOptions:
    """The manifest's settings beyond the profile. None: left out of the manifest."""

    name: str
    namespace: str | None = None
    image: str = DEFAULT_IMAGE
    rdma_resource: str | None = None  # one of it per pod, plus IPC_LOCK for pinned memory
    host_network: bool = False
    shm_size: str = DEFAULT_SHM_SIZE
    model_pvc: str | None = None
    model_host_path: str | None = None
    hf_secret: str | None = None  # a Secret with key HF_TOKEN; the token itself never enters the manifest


def k8s_options(
    *,
    name: str,
    name_field: str = "--k8s-name",
    namespace: str | None = None,
    image: str | None = None,
    rdma_resource: str | None = None,
    host_network: bool = False,
    shm_size: str | None = None,
    model_pvc: str | None = None,
    model_host_path: str | None = None,
    hf_secret: str | None = None,
) -> K8sOptions:
    """The options, each checked by Kubernetes' rule for its kind of value; InputError names the option."""
    if len(name) > MAX_NAME_CHARS or not _RFC1035_LABEL.fullmatch(name):
        raise InputError(
            name_field,
            f"{quoted(name)} is not a Kubernetes name for a LeaderWorkerSet and its Service: lower-case letters, "
            f"digits and '-', starting with a letter, at most {MAX_NAME_CHARS} characters (pass --k8s-name)",
        )
    if namespace is not None:
        _check(namespace, _RFC1123_LABEL, 63, "--k8s-namespace", "an RFC 1123 label (lower-case letters, digits, '-')")
    if image is not None:
        _check(image, _IMAGE, 512, "--k8s-image", "an image reference such as vllm/vllm-openai:v0.33.0")
    if rdma_resource is not None:
        _check(rdma_resource, _RESOURCE_NAME, 253, "--k8s-rdma-resource", "a resource name DOMAIN/NAME")
    if shm_size is not None:
        _check(shm_size, _QUANTITY, 32, "--k8s-shm-size", "a Kubernetes quantity such as 16Gi")
    if model_pvc is not None and model_host_path is not None:
        raise InputError("--k8s-model-pvc", "give the model's volume as a PVC or a host path, not both")
    if model_pvc is not None:
        _check(model_pvc, _RFC1123_SUBDOMAIN, 253, "--k8s-model-pvc", "a PersistentVolumeClaim's name")
    if model_host_path is not None:
        _check_host_path(model_host_path)
    if hf_secret is not None:
        _check(hf_secret, _RFC1123_SUBDOMAIN, 253, "--k8s-hf-secret", "a Secret's name")
    return K8sOptions(
        name=name,
        namespace=namespace,
        image=image or DEFAULT_IMAGE,
        rdma_resource=rdma_resource,
        host_network=host_network,
        shm_size=shm_size or DEFAULT_SHM_SIZE,
        model_pvc=model_pvc,
        model_host_path=model_host_path,
        hf_secret=hf_secret,
    )


def _check(value: str, pattern: re.Pattern[str], limit: int, field: str, what: str) -> None:
    if len(value) > limit or not pattern.fullmatch(value):
        raise InputError(field, f"{quoted(value)} is not {what} (at most {limit} characters)")


def _check_host_path(path: str) -> None:
    clean = path.isprintable() and not any(c.isspace() for c in path)
    if not clean or not path.startswith("/") or posixpath.normpath(path) != path or len(path) > 4096:
        raise InputError("--k8s-model-host-path", f"{quoted(path)} is not a plain absolute path such as /models")
