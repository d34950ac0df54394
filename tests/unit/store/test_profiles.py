"""Profiles: stored with every edit as a version, exported byte for byte, bad files refused whole."""

from __future__ import annotations

import pytest
from meshdeck.core.errors import InputError
from meshdeck.launch.profile import dump_profile, load_profile
from meshdeck.services import profiles as service
from meshdeck.store import profiles as store
from meshdeck.store.database import Database

PROFILE = """\
# DeepSeek V3.2 on two H200 nodes: TP inside the node, PP across
name: ds32-h200-2n
model: deepseek-ai/DeepSeek-V3.2
engine: vllm
hosts: [gpu-a, gpu-b]        # gpu-a is the head
gpus_per_node: 8
layout: {tensor_parallel: 8, pipeline_parallel: 2}
vllm:
  max_model_len: 32768
  gpu_memory_utilization: 0.92
env:
  NCCL_SOCKET_IFNAME: ens1f0
"""


def _state(db: Database) -> list[tuple[str, list[tuple[int, str]]]]:
    return [
        (s.name, [(v.version, v.yaml) for v in store.profile_versions(db, s.name)]) for s in store.list_profiles(db)
    ]


def test_an_imported_profile_exports_byte_for_byte_comments_included(db: Database) -> None:
    stored = service.import_profile(db, PROFILE.encode(), "ds32.yaml")
    assert (stored.version.name, stored.version.version) == ("ds32-h200-2n", 1)
    assert service.export_profile(db, "ds32-h200-2n") == PROFILE
    assert stored.version.data["layout"]["pipeline_parallel"] == 2


def test_the_canonical_export_round_trips_exactly(db: Database) -> None:
    service.import_profile(db, PROFILE, "ds32.yaml")
    canonical = service.export_profile(db, "ds32-h200-2n", canonical=True)
    assert load_profile(canonical) == load_profile(PROFILE)
    assert "expert_parallel: false" in canonical  # every default spelled out
    service.import_profile(db, canonical, "canonical.yaml", replace=True)
    assert service.export_profile(db, "ds32-h200-2n", canonical=True) == canonical


def test_the_canonical_export_leaves_out_the_other_engines_defaults_but_not_its_settings() -> None:
    canonical = dump_profile(load_profile(PROFILE))
    assert "torch:" not in canonical and "vllm:" in canonical  # a vLLM profile carries no unused torch block
    torch_profile = PROFILE.replace("engine: vllm", "engine: torch").replace(
        "  gpu_memory_utilization: 0.92\n", "  gpu_memory_utilization: 0.92\ntorch: {script: /opt/train.py}\n"
    )
    kept = dump_profile(load_profile(torch_profile))
    assert "script: /opt/train.py" in kept and "max_model_len: 32768" in kept  # set by hand: never dropped
    assert load_profile(kept) == load_profile(torch_profile)
    bare_text = torch_profile.replace("vllm:\n  max_model_len: 32768\n  gpu_memory_utilization: 0.92\n", "")
    bare = dump_profile(load_profile(bare_text))
    assert "vllm:" not in bare and load_profile(bare) == load_profile(bare_text)


def test_every_edit_is_kept_as_a_version(db: Database) -> None:
    service.import_profile(db, PROFILE, "ds32.yaml")
    edited = PROFILE.replace("max_model_len: 32768", "max_model_len: 65536")
    assert service.import_profile(db, edited, "ds32.yaml", replace=True, note="longer context").version.version == 2
    assert service.import_profile(db, edited, "ds32.yaml", replace=True).version.version == 2  # unchanged: no new one
    versions = service.profile_versions(db, "ds32-h200-2n")
    assert [(v.version, v.note) for v in versions] == [(1, "imported from ds32.yaml"), (2, "longer context")]
    assert service.get_profile(db, "ds32-h200-2n", 1).profile.vllm.max_model_len == 32768
    assert service.get_profile(db, "ds32-h200-2n").profile.vllm.max_model_len == 65536
    with pytest.raises(InputError, match="versions 1 to 2, not 7"):
        service.get_profile(db, "ds32-h200-2n", 7)


def test_importing_an_existing_name_without_replace_is_refused(db: Database) -> None:
    service.import_profile(db, PROFILE, "ds32.yaml")
    with pytest.raises(InputError, match="already exists; pass --replace") as info:
        service.import_profile(db, PROFILE.replace("0.92", "0.9"), "other.yaml")
    assert info.value.field == "other.yaml: name"
    assert len(service.profile_versions(db, "ds32-h200-2n")) == 1


def test_a_saved_profile_from_the_editor_becomes_the_next_version(db: Database) -> None:
    first = service.import_profile(db, PROFILE, "ds32.yaml").profile
    changed = first.model_copy(update={"env": {"NCCL_SOCKET_IFNAME": "ib0"}})
    saved = service.save_profile(db, changed, note="use IPoIB")
    assert saved.version.version == 2
    assert service.get_profile(db, "ds32-h200-2n").profile.env == {"NCCL_SOCKET_IFNAME": "ib0"}


def test_duplicate_renames_inside_the_yaml_and_delete_removes_all_versions(db: Database) -> None:
    service.import_profile(db, PROFILE, "ds32.yaml")
    copy = service.duplicate_profile(db, "ds32-h200-2n", "ds32-h200-2n-fp8")
    assert copy.profile.name == "ds32-h200-2n-fp8"
    assert load_profile(service.export_profile(db, "ds32-h200-2n-fp8")).name == "ds32-h200-2n-fp8"
    assert [s.name for s in service.list_profiles(db)] == ["ds32-h200-2n", "ds32-h200-2n-fp8"]
    assert service.delete_profile(db, "ds32-h200-2n") == 1
    with pytest.raises(InputError, match=r"no profile named 'ds32-h200-2n' \(known: ds32-h200-2n-fp8\)"):
        service.export_profile(db, "ds32-h200-2n")
    with pytest.raises(InputError, match=r"profile\.name: a profile named 'ds32-h200-2n-fp8' already exists"):
        service.duplicate_profile(db, "ds32-h200-2n-fp8", "ds32-h200-2n-fp8")
    with pytest.raises(InputError, match="duplicate: name"):
        service.duplicate_profile(db, "ds32-h200-2n-fp8", "-bad name")


BILLION_LAUGHS = 'a: &a ["lol","lol"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b]\n'


@pytest.mark.parametrize(
    ("text", "field", "problem"),
    [
        (PROFILE.replace("gpus_per_node: 8", 'gpus_per_node: "8"'), "bad.yaml: gpus_per_node", "integer"),
        (PROFILE + "tensor_paralel: 8\n", "bad.yaml: tensor_paralel", "unknown key"),
        (
            PROFILE.replace("max_model_len: 32768", "max_model_len: 32768\n  max_modle_len: 1"),
            "bad.yaml: vllm.max_modle_len",
            "unknown key",
        ),
        (
            PROFILE.replace("pipeline_parallel: 2", "pipeline_parallel: 4"),
            "bad.yaml: profile",
            "layout: tensor_parallel",
        ),
        (PROFILE.replace("hosts: [gpu-a, gpu-b]", "hosts: [gpu-a, gpu-b, gpu-c]"), "bad.yaml: profile", "3 host(s)"),
        (BILLION_LAUGHS, "bad.yaml", "anchors (&name) are not allowed"),
        ("name: x\nmodel: " + "[" * 600 + "]" * 600 + "\n", "bad.yaml", "nested deeper than 16 levels"),
        ("name: " + "x" * 300_000, "bad.yaml", "larger than"),
        (b"name: \xff\xfe\n", "bad.yaml", "not UTF-8"),
        ("- just\n- a list\n", "bad.yaml", "must be a mapping"),
    ],
    ids=[
        "wrong-type",
        "unknown-key",
        "unknown-nested-key",
        "tp-pp-dp-vs-hosts",
        "hosts-vs-layout",
        "yaml-bomb",
        "deep-nesting",
        "oversized",
        "not-utf8",
        "not-a-mapping",
    ],
)
def test_a_bad_profile_is_refused_naming_the_field_and_nothing_is_stored(
    db: Database, text: str | bytes, field: str, problem: str
) -> None:
    service.import_profile(db, PROFILE, "ds32.yaml")
    before = _state(db)
    for replace in (False, True):
        with pytest.raises(InputError) as info:
            service.import_profile(db, text, "bad.yaml", replace=replace)
        assert info.value.field == field
        assert problem in info.value.problem
    assert _state(db) == before


def test_the_store_refuses_a_mapping_whose_name_differs(db: Database) -> None:
    with pytest.raises(InputError, match=r"profile\.name"):
        store.create_profile(db, "a", "name: b\n", {"name": "b"})
    assert store.list_profiles(db) == []
