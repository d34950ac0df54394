"""`-o FILE` never writes through a symlink another user could have planted or changed (services/files.py,
store/owned_paths.py): a link is followed only when it and every folder on the way belong to the user or
root, and a link in a sticky shared folder only when the user or that folder's owner made it — the rule of
the kernel's fs.protected_symlinks, applied by meshdeck itself (the sysctl may be off). A file holding a
secret is written 0600 whatever the mode of the file it replaces, and the message names the file the
bytes went to.

Another user is a uid no process of this machine runs as: files are handed to it with (l)chown, which
needs root, so these tests run as root (CI does) and are skipped elsewhere.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from memory_keyring import MemoryKeyring
from meshdeck.cli import main
from meshdeck.core.errors import InputError
from meshdeck.services.files import atomic_output, open_output, output_target
from meshdeck.store.database import open_database
from meshdeck.store.writer import SampleWriter

OTHER_UID = 54_321  # "alice": another user of the machine
SECRET = "hf_Zq8ExampleSecretValue0123"
PROFILE = f"""\
name: ds32
model: deepseek-ai/DeepSeek-V3.2
hosts: [gpu-a]
gpus_per_node: 8
layout: {{tensor_parallel: 8}}
env:
  HF_TOKEN: {SECRET}
  HF_ENDPOINT: https://hf.example
"""
PLAIN = PROFILE.replace(f"  HF_TOKEN: {SECRET}\n", "")

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="handing files to another uid (chown) needs root")


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def db_with_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    db = str(tmp_path / "m.db")
    source = tmp_path / "ds32.src.yaml"
    source.write_text(PLAIN)
    assert _cli(capsys, "--db", db, "profiles", "import", str(source))[0] == 0
    return db


def _shared_sticky_folder(tmp_path: Path) -> Path:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp
    return shared


def _victims_bashrc(tmp_path: Path) -> Path:
    home = tmp_path / "home" / "victim"
    home.mkdir(parents=True)
    bashrc = home / ".bashrc"
    bashrc.write_text("# the victim's shell start-up\n")
    return bashrc


def _planted_link(folder: Path, name: str, target: Path) -> Path:
    link = folder / name
    link.symlink_to(target)
    os.lchown(link, OTHER_UID, OTHER_UID)
    return link


@as_root
def test_a_link_another_user_planted_in_a_sticky_folder_is_refused_and_its_target_untouched(
    tmp_path: Path, db_with_profile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bashrc = _victims_bashrc(tmp_path)
    link = _planted_link(_shared_sticky_folder(tmp_path), "ds32.yaml", bashrc)
    code, out, err = _cli(capsys, "--db", db_with_profile, "profiles", "export", "ds32", "-o", str(link))
    assert (code, out) == (2, "")
    assert err.startswith(f"meshdeck: error: -o: {link} is a symlink owned by uid {OTHER_UID}")
    assert "does not follow it" in err and err.count("\n") == 1
    assert bashrc.read_text() == "# the victim's shell start-up\n"
    assert os.readlink(link) == str(bashrc)


@as_root
def test_a_dangling_link_another_user_planted_creates_nothing(
    tmp_path: Path, db_with_profile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    wanted = tmp_path / "home" / "victim" / ".ssh-rc"
    wanted.parent.mkdir(parents=True)
    link = _planted_link(_shared_sticky_folder(tmp_path), "ds32.yaml", wanted)
    code, _, err = _cli(capsys, "--db", db_with_profile, "profiles", "export", "ds32", "-o", str(link))
    assert code == 2 and f"{link} is a symlink owned by uid {OTHER_UID}" in err
    assert not wanted.exists()


@as_root
def test_every_output_option_refuses_a_planted_link(
    tmp_path: Path, db_with_profile: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bashrc = _victims_bashrc(tmp_path)
    shared = _shared_sticky_folder(tmp_path)
    history = _planted_link(shared, "history.csv", bashrc)
    with open_database(db_with_profile) as db, SampleWriter(db) as writer:
        writer.submit_rows("gpu-a", [(1, 1_764_482_401.0, "gpu0", "temperature_c", 40.0)])
    code, _, err = _cli(capsys, "--db", db_with_profile, "history", "export", "--host", "gpu-a", "-o", str(history))
    assert code == 2 and err.startswith(f"meshdeck: error: -o: {history} is a symlink owned by uid {OTHER_UID}")
    monkeypatch.chdir(tmp_path)
    plan = _planted_link(shared, "plan.yaml", bashrc)
    argv = ("plan", "--gpu", "H200-SXM-141GB", "--hosts", "gpu-a", "--profile-out", str(plan))
    code, _, err = _cli(capsys, *argv)
    assert code == 2 and err.startswith(f"meshdeck: error: --profile-out: {plan} is a symlink owned by uid {OTHER_UID}")
    console = _planted_link(shared, "console.yaml", bashrc)
    with pytest.raises(InputError, match=f"is a symlink owned by uid {OTHER_UID}"):  # the console's exports
        output_target(str(console), option="export")
    with pytest.raises(InputError, match=f"is a symlink owned by uid {OTHER_UID}"), atomic_output(console) as handle:
        handle.write("overwritten\n")
    assert bashrc.read_text() == "# the victim's shell start-up\n"


@as_root
def test_an_own_link_through_another_users_folder_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "alice"
    theirs.mkdir()
    (theirs / "out.yaml").write_text("")
    os.chown(theirs, OTHER_UID, OTHER_UID)
    theirs.chmod(0o777)
    mine = tmp_path / "out.yaml"
    mine.symlink_to(theirs / "out.yaml")  # the user's own link, but alice can swap what is behind it
    with pytest.raises(InputError) as info:
        output_target(str(mine))
    assert info.value.field == "-o"
    assert f"leads through the folder {theirs}, owned by uid {OTHER_UID}" in info.value.problem


@as_root
def test_a_link_a_user_made_in_a_sticky_folder_someone_else_owns_is_not_followed_by_root(tmp_path: Path) -> None:
    shared = _shared_sticky_folder(tmp_path)
    os.chown(shared, OTHER_UID, OTHER_UID)  # alice's sticky folder
    target = tmp_path / "target.yaml"
    link = shared / "out.yaml"
    link.symlink_to(target)
    os.lchown(link, 54_322, 54_322)  # bob's link in alice's folder: protected_symlinks refuses it to root
    with pytest.raises(InputError, match="is a symlink owned by uid 54322"):
        output_target(str(link))


@as_root
def test_a_pipe_another_user_owns_is_not_written_into(tmp_path: Path) -> None:
    fifo = _shared_sticky_folder(tmp_path) / "ds32.yaml"
    os.mkfifo(fifo)
    os.chown(fifo, OTHER_UID, OTHER_UID)  # alice reads whatever is written there
    with pytest.raises(InputError, match=f"is a pipe owned by uid {OTHER_UID}: meshdeck writes only into pipes"):
        output_target(str(fifo))


def test_a_secret_is_written_0600_whatever_the_mode_and_the_message_names_the_real_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], memory_keyring: MemoryKeyring
) -> None:
    db = str(tmp_path / "m.db")
    source = tmp_path / "ds32.src.yaml"
    source.write_text(PROFILE)
    assert _cli(capsys, "--db", db, "profiles", "import", str(source))[0] == 0
    open_folder = tmp_path / "drop"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    real = open_folder / "ds32.yaml"
    real.write_text("old\n")
    real.chmod(0o666)
    link = tmp_path / "ds32.yaml"
    link.symlink_to(real)
    code, _, err = _cli(capsys, "--db", db, "profiles", "export", "ds32", "-o", str(link))
    assert code == 0, err
    assert SECRET in real.read_text()
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert err == (
        f"meshdeck: env.HF_TOKEN: its secret value from the OS keyring is written to {real} "
        f"(through the symlink {link})\n"
    )


def test_a_profile_without_a_secret_keeps_the_mode_of_the_file_it_replaces(
    tmp_path: Path, db_with_profile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    real = tmp_path / "plain.yaml"
    real.write_text("old\n")
    real.chmod(0o644)
    assert _cli(capsys, "--db", db_with_profile, "profiles", "export", "ds32", "-o", str(real))[0] == 0
    assert stat.S_IMODE(real.stat().st_mode) == 0o644 and real.read_text() == PLAIN


def test_a_folder_swapped_for_a_link_after_the_check_fails_the_write_instead_of_following_it(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    target = output_target(str(folder / "x.yaml"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder.rmdir()
    folder.symlink_to(elsewhere)  # what a race in a shared folder could do between the check and the write
    with pytest.raises(InputError, match="cannot write"), open_output(target) as handle:
        handle.write("text\n")
    assert list(elsewhere.iterdir()) == []


def test_dev_stdout_is_written_through_the_process_own_link(db_with_profile: str) -> None:
    command = [sys.executable, "-m", "meshdeck", "--db", db_with_profile, "profiles", "export", "ds32"]
    done = subprocess.run([*command, "-o", "/dev/stdout"], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == PLAIN
