"""`meshdeck launch PROFILE --k8s-manifest`: a LeaderWorkerSet + Service that LWS v0.10.0's CRD accepts, whose
pods run exactly what `launch --dry-run` shows for their node rank. No cluster is contacted (none exists here):
the objects are checked against the pinned CRD's openAPIV3Schema made strict (tests/fixtures/k8s/SOURCES.md)."""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import os
import stat
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from meshdeck.cli import main
from meshdeck.launch.k8s_manifest import expand

CRD = Path(__file__).parents[2] / "fixtures" / "k8s" / "leaderworkerset-crd-v0.10.0.yaml.gz"
CRD_BLOB = "2b376d69063e46bec99d0d815d36948cdc87d128"  # lws v0.10.0's config/crd/bases/…_leaderworkersets.yaml

PROFILE = """\
name: ds32-h200-2n
model: deepseek-ai/DeepSeek-V3.2
engine: vllm
hosts: [gpu-a, gpu-b]
gpus_per_node: 8
layout: {tensor_parallel: 8, pipeline_parallel: 2, data_parallel: 1, expert_parallel: false}
vllm: {max_model_len: 32768, port: 8000, extra_args: ["--served-model-name", "ds$(HOME)'x"]}
env: {NCCL_SOCKET_IFNAME: eth0, VLLM_LOGGING_PREFIX: "$(HOME)$$"}
"""
TP8_PP2 = PROFILE
TP8_DP2_EP = PROFILE.replace("pipeline_parallel: 2, data_parallel: 1, expert_parallel: false",
                             "pipeline_parallel: 1, data_parallel: 2, expert_parallel: true")  # fmt: skip
TP1_DP16_EP = PROFILE.replace("tensor_parallel: 8, pipeline_parallel: 2, data_parallel: 1, expert_parallel: false",
                              "tensor_parallel: 1, pipeline_parallel: 1, data_parallel: 16, expert_parallel: true")  # fmt: skip
TP8_PP3 = PROFILE.replace("[gpu-a, gpu-b]", "[gpu-a, gpu-b, gpu-c]").replace(
    "pipeline_parallel: 2", "pipeline_parallel: 3"
)
ONE_NODE = PROFILE.replace("[gpu-a, gpu-b]", "[gpu-a]").replace("pipeline_parallel: 2", "pipeline_parallel: 1")
PROFILES = {"tp8-pp2": TP8_PP2, "tp8-dp2-ep": TP8_DP2_EP, "tp1-dp16-ep": TP1_DP16_EP, "tp8-pp3": TP8_PP3,
            "one-node": ONE_NODE}  # fmt: skip

# core/v1 fields meshdeck writes outside the CRD's schema (Kubernetes API reference, v1.3x): nothing else.
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
OBJECT_META = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}, "labels": _STRING_MAP},
    "required": ["name"],
    "additionalProperties": False,
}
SERVICE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "v1"},
        "kind": {"const": "Service"},
        "metadata": OBJECT_META,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]},
                "selector": _STRING_MAP,
                "ports": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string"},
                            "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                            "protocol": {"enum": ["TCP", "UDP", "SCTP"]},
                            "targetPort": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                        },
                    },
                },
            },
        },
    },
}


def strict(schema: Any) -> Any:
    """The schema with `additionalProperties: false` wherever it lists properties and allows no others itself
    (as the API server's strict field validation does)."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) if key != "properties" else {k: strict(v) for k, v in value.items()}
           for key, value in schema.items()}  # fmt: skip
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def crd_text() -> bytes:
    return gzip.decompress(CRD.read_bytes())


@cache
def lws_validator() -> jsonschema.Draft7Validator:
    crd = yaml.load(crd_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = strict(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = OBJECT_META  # the CRD leaves ObjectMeta to the API server
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    return jsonschema.Draft7Validator(schema)


def validate(objects: list[dict[str, Any]]) -> None:
    lws, service = objects
    assert (lws["apiVersion"], lws["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    lws_validator().validate(lws)
    jsonschema.Draft7Validator(SERVICE).validate(service)


def manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *extra: str) -> list[dict[str, Any]]:
    profile = tmp_path / "p.yaml"
    profile.write_text(text)
    db = tmp_path / "never-created.db"
    assert main(["--db", str(db), "launch", str(profile), "--k8s-manifest", *extra]) == 0
    assert not db.exists()  # contacts nothing, creates nothing
    return list(yaml.safe_load_all(capsys.readouterr().out))


def dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> dict[str, Any]:
    profile = tmp_path / "p.yaml"
    profile.write_text(text)
    assert main(["--db", str(tmp_path / "never-created.db"), "launch", str(profile), "--dry-run", "--json"]) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def pod_templates(lws: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    template = lws["spec"]["leaderWorkerTemplate"]
    return template.get("leaderTemplate", template["workerTemplate"]), template["workerTemplate"]


def run_in_pod(container: dict[str, Any], pod_env: dict[str, str], tmp_path: Path) -> list[str]:
    """What the container's process is started with: Kubernetes' $(VAR) expansion, then a shell if it is one
    (run for real, with `vllm` a stand-in that prints its argv)."""
    words = [expand(word, pod_env) for word in container["command"]]
    if words[:2] != ["/bin/sh", "-c"]:
        return words
    fake = tmp_path / "bin" / "vllm"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text("#!/bin/sh\nprintf '%s\\0' vllm \"$@\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": f"{fake.parent}:{os.environ['PATH']}", **pod_env}
    out = subprocess.run(words, env=env, capture_output=True, check=True).stdout.decode()
    return out.split("\0")[:-1]


def test_the_pinned_crd_is_lws_v0_10_0s_file_unchanged() -> None:
    blob = hashlib.sha1(b"blob %d\0" % len(crd_text()) + crd_text()).hexdigest()
    assert blob == CRD_BLOB


@pytest.mark.parametrize("name", PROFILES)
def test_the_manifest_is_valid_for_the_pinned_lws_crd(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = manifest(tmp_path, capsys, PROFILES[name], "--k8s-name", "ds32", "--k8s-namespace", "inference",
                       "--k8s-rdma-resource", "rdma/hca_shared_devices_a", "--k8s-host-network",
                       "--k8s-model-pvc", "models", "--k8s-hf-secret", "hf-token")  # fmt: skip
    validate(objects)
    lws, service = objects
    nodes = len(yaml.safe_load(PROFILES[name])["hosts"])
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == nodes
    assert service["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": "ds32", "role": "leader"}
    for template in pod_templates(lws):
        (container,) = template["spec"]["containers"]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": "8", "rdma/hca_shared_devices_a": "1"}
        assert template["spec"]["hostNetwork"] is True


@pytest.mark.parametrize("name", PROFILES)
def test_each_pod_runs_the_dry_runs_argv_and_env_for_its_rank(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = dry_run(tmp_path, capsys, PROFILES[name])
    leader, worker = pod_templates(manifest(tmp_path, capsys, PROFILES[name])[0])
    head = shown["head"]["address"]
    for node in shown["nodes"]:
        rank = node["node_rank"]
        (container,) = (leader if rank == 0 else worker)["spec"]["containers"]
        values = {e["name"]: expand(e["value"], {}) for e in container["env"] if "value" in e}
        pod_ip = [
            e["name"] for e in container["env"] if e.get("valueFrom") == {"fieldRef": {"fieldPath": "status.podIP"}}
        ]
        pod_env = {**values, **dict.fromkeys(pod_ip, node["host"])}  # the dry run: each node by its name
        lws_env = {
            "LWS_LEADER_ADDRESS": head,
            "LWS_WORKER_INDEX": str(rank),
            "LWS_GROUP_SIZE": str(len(shown["nodes"])),
        }
        assert pod_env == node["env"]
        assert run_in_pod(container, {**lws_env, **pod_env}, tmp_path) == node["argv"]


def test_workers_take_the_leader_and_their_rank_from_lws(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    leader, worker = pod_templates(manifest(tmp_path, capsys, TP8_PP2)[0])
    command = leader["spec"]["containers"][0]["command"]
    assert command[command.index("--master-addr") + 1] == "$(VLLM_HOST_IP)"  # the head binds to its pod IP
    assert {"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in leader["spec"][
        "containers"
    ][0]["env"]
    command = worker["spec"]["containers"][0]["command"]
    assert command[command.index("--master-addr") + 1] == "$(LWS_LEADER_ADDRESS)"
    assert command[command.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
    assert "--headless" in command and "--port" not in command
    assert "ds$$(HOME)'x" in command  # the profile's own `$(` is not expanded by Kubernetes
    (shell,) = pod_templates(manifest(tmp_path, capsys, TP1_DP16_EP)[0])[1]["spec"]["containers"]
    assert shell["command"][:2] == ["/bin/sh", "-c"] and "$$((LWS_WORKER_INDEX * 8))" in shell["command"][2]


@pytest.mark.parametrize(
    ("path", "typo"),
    [
        (["spec", "leaderWorkerTemplate"], "sizee"),
        (["spec", "leaderWorkerTemplate", "workerTemplate", "spec", "containers", 0], "imagee"),
        (["spec", "leaderWorkerTemplate", "workerTemplate", "spec", "containers", 0, "resources"], "limitz"),
        (["metadata"], "namespacee"),
    ],
)
def test_the_validator_refuses_an_unknown_field(
    path: list[Any], typo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = manifest(tmp_path, capsys, TP8_PP2)
    validate(objects)
    broken = copy.deepcopy(objects)
    target = broken[0]
    for key in path:
        target = target[key]
    target[typo] = "x"
    with pytest.raises(jsonschema.ValidationError, match=typo):
        validate(broken)
    broken = copy.deepcopy(objects)
    broken[1]["spec"]["portz"] = []
    with pytest.raises(jsonschema.ValidationError, match="portz"):
        validate(broken)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--k8s-name", "DS32"),
        ("--k8s-name", "9lives"),
        ("--k8s-name", "a" * 53),
        ("--k8s-namespace", "Infer_ence"),
        ("--k8s-image", "vllm openai"),
        ("--k8s-rdma-resource", "hca_shared"),
        ("--k8s-shm-size", "lots"),
        ("--k8s-model-pvc", "Models!"),
        ("--k8s-model-host-path", "models/ds"),
        ("--k8s-hf-secret", "hf token"),
    ],
)
def test_a_bad_value_is_refused_naming_its_option(
    option: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(TP8_PP2)
    out = tmp_path / "ds.yaml"
    assert main(["launch", str(profile), "--k8s-manifest", "-o", str(out), option, value]) == 2
    assert capsys.readouterr().err.startswith(f"meshdeck: error: {option}: ")
    assert not out.exists()


def test_a_profile_name_that_is_no_kubernetes_name_asks_for_k8s_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(TP8_PP2.replace("name: ds32-h200-2n", "name: DS32_h200"))
    assert main(["launch", str(profile), "--k8s-manifest"]) == 2
    assert "pass --k8s-name" in capsys.readouterr().err
    assert main(["launch", str(profile), "--k8s-manifest", "--k8s-name", "ds32"]) == 0


def test_a_secret_is_never_written_into_the_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(TP8_PP2.replace("{NCCL_SOCKET_IFNAME: eth0,", "{NCCL_SOCKET_IFNAME: eth0, HF_TOKEN: hf_abc123,"))
    out = tmp_path / "ds.yaml"
    assert main(["launch", str(profile), "--k8s-manifest", "-o", str(out), "--k8s-hf-secret", "hf-token"]) == 2
    captured = capsys.readouterr()
    assert "env.HF_TOKEN" in captured.err and "hf_abc123" not in captured.err + captured.out
    assert not out.exists()
    objects = manifest(tmp_path, capsys, TP8_PP2, "--k8s-hf-secret", "hf-token")
    for template in pod_templates(objects[0]):
        (token,) = [e for e in template["spec"]["containers"][0]["env"] if e["name"] == "HF_TOKEN"]
        assert token == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}}


def test_o_writes_the_file_and_dash_writes_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(TP8_PP2)
    out = tmp_path / "ds.yaml"
    assert main(["--db", str(tmp_path / "x.db"), "launch", str(profile), "--k8s-manifest", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and f"wrote {out}" in captured.err
    validate(list(yaml.safe_load_all(out.read_text())))
    assert main(["--db", str(tmp_path / "x.db"), "launch", str(profile), "--k8s-manifest", "-o", "-"]) == 0
    assert capsys.readouterr().out == out.read_text()
    assert not (tmp_path / "x.db").exists()


def test_model_volume_is_mounted_where_the_argv_reads_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = TP8_PP2.replace("model: deepseek-ai/DeepSeek-V3.2", "model: /models/DeepSeek-V3.2")
    objects = manifest(tmp_path, capsys, text, "--k8s-model-host-path", "/data/models/DeepSeek-V3.2")
    validate(objects)
    spec = pod_templates(objects[0])[1]["spec"]
    assert {"name": "model", "mountPath": "/models/DeepSeek-V3.2", "readOnly": True} in spec["containers"][0][
        "volumeMounts"
    ]
    assert {"name": "model", "hostPath": {"path": "/data/models/DeepSeek-V3.2", "type": "Directory"}} in spec["volumes"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (("engine: vllm", "engine: torch"), "engine"),
        (("port: 8000,", "port: 8000, distributed_backend: ray,"), "vllm.distributed_backend"),
    ],
)
def test_what_the_manifest_cannot_run_is_refused(
    change: tuple[str, str], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(TP8_PP2.replace(*change))
    assert main(["launch", str(profile), "--k8s-manifest"]) == 2
    assert capsys.readouterr().err.startswith(f"meshdeck: error: {field}: ")


@pytest.mark.parametrize("extra", [["--k8s-name", "ds32"], ["-o", "ds.yaml"], ["--k8s-manifest", "--dry-run"]])
def test_options_that_would_be_ignored_are_refused(
    extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(TP8_PP2)
    assert main(["--db", str(tmp_path / "x.db"), "launch", str(profile), "--dry-run", *extra]) == 2
    assert "meshdeck: error: " in capsys.readouterr().err
