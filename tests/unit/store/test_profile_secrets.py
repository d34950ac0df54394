"""Secrets never go in the database (DESIGN.md §7): a profile whose env holds a secret-looking value is
stored with a keyring reference in its place, the value itself goes to the OS keyring, a launch of the
stored profile gets the value back, and `export` writes it only to the output the user asked for.
Without a usable keyring such an import is refused, naming the key and what to do instead."""

from __future__ import annotations

from pathlib import Path

import pytest
from memory_keyring import MemoryKeyring
from meshdeck.cli import main
from meshdeck.core.errors import InputError
from meshdeck.launch.profile import load_profile
from meshdeck.services import profiles as service
from meshdeck.store import profiles as store
from meshdeck.store.database import Database

SECRET = "hf_Zq8ExampleSecretValue0123"
SERVICE = "meshdeck-profile-env"
PROFILE = f"""\
# two H200 nodes
name: ds32
model: deepseek-ai/DeepSeek-V3.2
hosts: [gpu-a, gpu-b]   # gpu-a is the head
gpus_per_node: 8
layout: {{tensor_parallel: 8, pipeline_parallel: 2}}
env:
  HF_TOKEN: {SECRET}
  NCCL_SOCKET_IFNAME: eth0
"""


def _database_bytes(db_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in db_path.parent.iterdir() if p.name.startswith(db_path.name))


def test_an_imported_secret_goes_to_the_keyring_and_not_the_database(
    db: Database, db_path: Path, memory_keyring: MemoryKeyring
) -> None:
    stored = service.import_profile(db, PROFILE.encode(), "ds32.yaml")
    assert memory_keyring.passwords == {(SERVICE, "ds32/HF_TOKEN"): SECRET}
    assert SECRET not in stored.version.yaml and SECRET not in str(stored.version.data)
    assert "# two H200 nodes" in stored.version.yaml  # the rest of the text is kept as written
    assert load_profile(stored.version.yaml).env["NCCL_SOCKET_IFNAME"] == "eth0"
    db.close()
    assert SECRET.encode() not in _database_bytes(db_path)


def test_a_stored_profile_launches_with_the_value_from_the_keyring(db: Database, memory_keyring: MemoryKeyring) -> None:
    service.import_profile(db, PROFILE, "ds32.yaml")
    assert service.profile_for_launch(db, "ds32").env == {"HF_TOKEN": SECRET, "NCCL_SOCKET_IFNAME": "eth0"}
    assert SECRET not in str(service.get_profile(db, "ds32").profile.env)  # what the console shows and edits
    del memory_keyring.passwords[(SERVICE, "ds32/HF_TOKEN")]
    with pytest.raises(InputError) as info:
        service.profile_for_launch(db, "ds32")
    assert info.value.field == "profile ds32 v1: env.HF_TOKEN" and "keyring" in info.value.problem


def test_export_gives_the_file_back_with_its_value(db: Database, memory_keyring: MemoryKeyring) -> None:
    service.import_profile(db, PROFILE, "ds32.yaml")
    assert service.export_profile(db, "ds32") == PROFILE  # byte for byte, the value back in place
    canonical = service.export_profile(db, "ds32", canonical=True)
    assert load_profile(canonical) == load_profile(PROFILE)


@pytest.mark.parametrize(
    "value",
    ['"hf_with: colon"', "'it''s #1'", '"ünïcode ✓"', ">-\n    folded\n    value", "'123'", '"true"'],
    ids=["colon", "quote-hash", "unicode", "block", "number-like", "bool-like"],
)
def test_secrets_of_any_yaml_spelling_round_trip(db: Database, memory_keyring: MemoryKeyring, value: str) -> None:
    text = PROFILE.replace(SECRET, value)
    expected = load_profile(text)
    service.import_profile(db, text, "ds32.yaml")
    (stored,) = memory_keyring.passwords.values()
    assert stored == expected.env["HF_TOKEN"]
    assert load_profile(service.export_profile(db, "ds32")) == expected
    assert service.profile_for_launch(db, "ds32") == expected


def test_without_a_keyring_a_secret_import_is_refused_naming_the_key(
    db: Database, db_path: Path, no_keyring: None
) -> None:
    with pytest.raises(InputError) as info:
        service.import_profile(db, PROFILE, "ds32.yaml")
    assert info.value.field == "ds32.yaml: env.HF_TOKEN"
    assert "no usable OS keyring" in info.value.problem and "~/.cache/huggingface/token" in info.value.problem
    assert store.list_profiles(db) == []
    db.close()
    assert SECRET.encode() not in _database_bytes(db_path)


def test_a_profile_without_secrets_needs_no_keyring(db: Database, no_keyring: None) -> None:
    text = PROFILE.replace(f"  HF_TOKEN: {SECRET}\n", "")
    service.import_profile(db, text, "plain.yaml")
    assert service.export_profile(db, "ds32") == text


def test_the_console_save_moves_a_typed_secret_to_the_keyring(db: Database, memory_keyring: MemoryKeyring) -> None:
    plain = service.import_profile(db, PROFILE.replace(f"  HF_TOKEN: {SECRET}\n", ""), "ds32.yaml").profile
    edited = plain.model_copy(update={"env": {**plain.env, "WANDB_API_KEY": "w-123"}})
    saved = service.save_profile(db, edited, "edited in the console")
    assert "w-123" not in saved.version.yaml and "w-123" not in str(saved.version.data)
    assert memory_keyring.passwords == {(SERVICE, "ds32/WANDB_API_KEY"): "w-123"}
    again = service.get_profile(db, "ds32").profile  # what the editor shows: the reference
    assert service.save_profile(db, again).version.version == 2  # saving it back as is changes nothing
    assert service.profile_for_launch(db, "ds32").env["WANDB_API_KEY"] == "w-123"


def test_a_reference_to_another_profiles_secret_is_refused(db: Database, memory_keyring: MemoryKeyring) -> None:
    service.import_profile(db, PROFILE, "ds32.yaml")
    reference = load_profile(service.get_profile(db, "ds32").version.yaml).env["HF_TOKEN"]
    thief = PROFILE.replace("name: ds32", "name: thief").replace(SECRET, f'"{reference}"')
    with pytest.raises(InputError) as info:
        service.import_profile(db, thief, "thief.yaml")
    assert info.value.field == "thief.yaml: env.HF_TOKEN" and "profile ds32" in info.value.problem
    assert [s.name for s in service.list_profiles(db)] == ["ds32"]


def test_duplicate_copies_secrets_and_delete_removes_them(db: Database, memory_keyring: MemoryKeyring) -> None:
    service.import_profile(db, PROFILE, "ds32.yaml")
    service.duplicate_profile(db, "ds32", "ds32-copy")
    assert service.profile_for_launch(db, "ds32-copy").env["HF_TOKEN"] == SECRET
    service.delete_profile(db, "ds32")
    assert memory_keyring.passwords == {(SERVICE, "ds32-copy/HF_TOKEN"): SECRET}


def test_the_cli_export_writes_the_value_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], memory_keyring: MemoryKeyring
) -> None:
    source, db = tmp_path / "ds32.yaml", str(tmp_path / "m.db")
    source.write_text(PROFILE)
    assert main(["--db", db, "profiles", "import", str(source)]) == 0
    capsys.readouterr()
    assert main(["--db", db, "profiles", "show", "ds32"]) == 0
    assert SECRET not in capsys.readouterr().out
    assert main(["--db", db, "profiles", "export", "ds32"]) == 0
    out, err = capsys.readouterr()
    assert out == PROFILE
    assert "env.HF_TOKEN" in err and "keyring" in err and SECRET not in err


def test_show_masks_a_secret_an_older_database_still_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db_path = tmp_path / "m.db"
    from meshdeck.store.database import open_database

    with open_database(db_path) as db:
        store.create_profile(db, "ds32", PROFILE, {"name": "ds32", "env": {"HF_TOKEN": SECRET}})
    assert main(["--db", str(db_path), "profiles", "show", "ds32"]) == 0
    out = capsys.readouterr().out
    assert SECRET not in out and "HF_TOKEN:" in out and "NCCL_SOCKET_IFNAME: eth0" in out
    assert main(["--db", str(db_path), "profiles", "show", "ds32", "--json"]) == 0
    assert SECRET not in capsys.readouterr().out


def _colleagues_file(reference: str, key: str = "HF_TOKEN") -> str:
    """A file naming ds32's own keyring entry, with the colleague's endpoint beside it."""
    return PROFILE.replace(
        f"  HF_TOKEN: {SECRET}\n", f'  {key}: "{reference}"\n  HF_ENDPOINT: https://attacker.example\n'
    )


def test_a_file_naming_the_profiles_own_keyring_entry_is_refused_even_with_replace(
    db: Database, memory_keyring: MemoryKeyring
) -> None:
    service.import_profile(db, PROFILE, "ds32.yaml")
    reference = load_profile(service.get_profile(db, "ds32").version.yaml).env["HF_TOKEN"]
    with pytest.raises(InputError) as info:
        service.import_profile(db, _colleagues_file(reference), "colleague.yaml", replace=True)
    assert info.value.field == "colleague.yaml: env.HF_TOKEN"
    assert "keyring reference" in info.value.problem and "never accepts from a file" in info.value.problem
    assert [v.version for v in service.profile_versions(db, "ds32")] == [1]
    assert "attacker" not in service.export_profile(db, "ds32")
    assert "HF_ENDPOINT" not in service.profile_for_launch(db, "ds32").env


def test_a_reference_is_refused_from_a_file_whatever_its_key_looks_like(
    db: Database, memory_keyring: MemoryKeyring
) -> None:
    text = _colleagues_file("keyring:meshdeck-profile-env/ds32/SSLKEYLOGFILE", key="SSLKEYLOGFILE")
    with pytest.raises(InputError) as info:
        service.import_profile(db, text, "colleague.yaml")
    assert info.value.field == "colleague.yaml: env.SSLKEYLOGFILE"
    assert store.list_profiles(db) == []


def test_the_cli_import_names_the_field_of_a_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], memory_keyring: MemoryKeyring
) -> None:
    db, mine, theirs = str(tmp_path / "m.db"), tmp_path / "ds32.yaml", tmp_path / "colleague.yaml"
    mine.write_text(PROFILE)
    assert main(["--db", db, "profiles", "import", str(mine)]) == 0
    theirs.write_text(_colleagues_file("keyring:meshdeck-profile-env/ds32/HF_TOKEN"))
    capsys.readouterr()
    assert main(["--db", db, "profiles", "import", str(theirs), "--replace"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"meshdeck: error: {theirs}: env.HF_TOKEN: is a keyring reference (to this profile's own")
    assert main(["--db", db, "profiles", "export", "ds32"]) == 0
    assert capsys.readouterr().out == PROFILE


def test_the_console_save_refuses_a_reference_the_stored_profile_does_not_hold(
    db: Database, memory_keyring: MemoryKeyring
) -> None:
    service.import_profile(db, PROFILE.replace(f"  HF_TOKEN: {SECRET}\n", ""), "ds32.yaml")
    memory_keyring.passwords[(SERVICE, "ds32/HF_TOKEN")] = SECRET  # left by an earlier version, say
    plain = service.get_profile(db, "ds32").profile
    pasted = plain.model_copy(update={"env": {**plain.env, "HF_TOKEN": "keyring:meshdeck-profile-env/ds32/HF_TOKEN"}})
    with pytest.raises(InputError) as info:
        service.save_profile(db, pasted)
    assert info.value.field == "profile ds32: env.HF_TOKEN" and "does not hold" in info.value.problem
    assert "HF_TOKEN" not in service.profile_for_launch(db, "ds32").env


def test_show_masks_every_line_naming_a_secret_in_text_that_no_longer_parses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The precise key rule needs a key; a line of broken text is masked whenever it names a secret word."""
    db_path = tmp_path / "m.db"
    from meshdeck.store.database import open_database

    with open_database(db_path) as db:
        store.create_profile(db, "old", "name: old\nenv:\n  HF_TOKEN: hf_abcFILE\n  : [broken\n", {"name": "old"})
    assert main(["--db", str(db_path), "profiles", "show", "old"]) == 0
    out = capsys.readouterr().out
    assert "hf_abcFILE" not in out and "HF_TOKEN: <masked>" in out
