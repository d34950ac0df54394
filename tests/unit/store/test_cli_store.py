"""`meshdeck profiles ...`, `meshdeck history ...` and `meshdeck bench ingest` through the real CLI, on --db."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from meshdeck.cli import main
from meshdeck.store.database import open_database
from meshdeck.store.writer import SampleWriter

PROFILE = """\
name: tiny-torch  # two CPU ranks on one machine
model: tiny
engine: torch
hosts: [local]
gpus_per_node: 2
layout: {data_parallel: 2}
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_profiles_import_list_show_export_delete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "m.db")
    source = tmp_path / "tiny.yaml"
    source.write_text(PROFILE)
    assert _run(capsys, "--db", db, "profiles", "import", str(source))[:2] == (0, "stored profile tiny-torch v1\n")
    code, out, _ = _run(capsys, "--db", db, "profiles", "list")
    assert code == 0 and "tiny-torch" in out
    assert out.split()[out.split().index("tiny-torch") + 3] == "TP1·DP2"  # the planner's notation, not "1x1x2"
    code, out, _ = _run(capsys, "--db", db, "profiles", "list", "--json")
    assert json.loads(out)[0]["layout"]["data_parallel"] == 2
    assert _run(capsys, "--db", db, "profiles", "show", "tiny-torch")[1] == PROFILE
    exported = tmp_path / "out.yaml"
    assert _run(capsys, "--db", db, "profiles", "export", "tiny-torch", "-o", str(exported))[0] == 0
    assert exported.read_text() == PROFILE
    source.write_text(
        PROFILE.replace("gpus_per_node: 2", "gpus_per_node: 4").replace("data_parallel: 2", "data_parallel: 4")
    )
    assert _run(capsys, "--db", db, "profiles", "import", str(source), "--replace", "--note", "4 ranks")[0] == 0
    code, out, _ = _run(capsys, "--db", db, "profiles", "show", "tiny-torch", "--versions")
    assert "v1" in out and "v2" in out and "4 ranks" in out
    assert _run(capsys, "--db", db, "profiles", "duplicate", "tiny-torch", "tiny-copy")[0] == 0
    assert (
        _run(capsys, "--db", db, "profiles", "delete", "tiny-torch")[1] == "deleted profile tiny-torch (2 versions)\n"
    )
    code, _, err = _run(capsys, "--db", db, "profiles", "show", "tiny-torch")
    assert code == 2 and err == "meshdeck: error: profile: no profile named 'tiny-torch' (known: tiny-copy)\n"


def test_a_bad_profile_file_is_one_error_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(PROFILE.replace("gpus_per_node: 2", "gpus_per_node: two"))
    code, out, err = _run(capsys, "--db", str(tmp_path / "m.db"), "profiles", "import", str(bad))
    assert code == 2 and out == ""
    assert err.startswith(f"meshdeck: error: {bad}: gpus_per_node: ") and err.count("\n") == 1
    assert _run(capsys, "--db", str(tmp_path / "m.db"), "profiles", "list")[1].startswith("no profiles yet")


def test_a_corrupt_database_is_one_error_line_and_left_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.db"
    path.write_bytes(b"not a database at all\n" * 10)
    code, _, err = _run(capsys, "--db", str(path), "history", "hosts")
    assert code == 2 and "is not an SQLite database" in err
    assert path.read_bytes() == b"not a database at all\n" * 10


def test_history_export_and_retention(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.db"
    with open_database(path) as db, SampleWriter(db) as writer:
        writer.submit_rows("gpu-a", [(s, 1_764_482_400.0 + s, "gpu0", "temperature_c", 40.0 + s) for s in range(1, 11)])
    code, out, _ = _run(capsys, "--db", str(path), "history", "hosts")
    assert code == 0 and "gpu-a" in out
    target = tmp_path / "gpu-a.csv"
    code, _, err = _run(
        capsys,
        "--db",
        str(path),
        "history",
        "export",
        "--host",
        "gpu-a",
        "--since",
        "2025-11-30T06:00:05Z",
        "-o",
        str(target),
    )
    assert code == 0 and "wrote 6 points" in err
    assert target.read_text().splitlines()[1].endswith(",gpu-a,gpu0,temperature_c,°C,45.0")
    code, out, _ = _run(capsys, "--db", str(path), "history", "export", "--host", "gpu-a", "--format", "json")
    assert len(json.loads(out)) == 10
    code, out, _ = _run(capsys, "--db", str(path), "history", "retention", "--raw-days", "3", "--hour-days", "forever")
    assert out.splitlines()[:3] == ["raw  3 days", "1m   90 days", "1h   forever"]
    assert out.splitlines()[3].startswith("raw size budget none; raw tier now ") and "(10 rows)" in out
    code, _, err = _run(capsys, "--db", str(path), "history", "retention", "--raw-days", "200")
    assert code == 2 and "retention.raw_days" in err


def test_history_retention_sets_a_raw_size_budget_and_names_the_option_when_it_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.db"
    code, out, _ = _run(capsys, "--db", str(path), "history", "retention", "--raw-max-size", "50GB")
    assert code == 0 and out.splitlines()[3].startswith("raw size budget 46.6GiB; raw tier now 0B (0 rows)")
    code, out, _ = _run(capsys, "--db", str(path), "history", "retention", "--raw-days", "3", "--json")
    assert json.loads(out)["raw_max_bytes"] == 50 * 10**9 and json.loads(out)["raw_days"] == 3
    for bad, problem in (("lots", "is not a size"), ("10KB", "below the minimum")):
        code, _, err = _run(capsys, "--db", str(path), "history", "retention", "--raw-max-size", bad)
        assert code == 2 and err.startswith("meshdeck: error: --raw-max-size: ") and problem in err
    code, out, _ = _run(capsys, "--db", str(path), "history", "retention", "--raw-max-size", "none", "--json")
    assert json.loads(out)["raw_max_bytes"] is None and json.loads(out)["raw_days"] == 3


def test_history_hosts_shows_raw_rows_size_and_bytes_per_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.db"
    rows = [(s, 1_764_482_400.0 + s, f"gpu{g}", "power_w", 300.5 + s) for s in range(1, 601) for g in range(4)]
    with open_database(path) as db, SampleWriter(db) as writer:
        writer.submit_rows("gpu-a", rows)
    code, out, _ = _run(capsys, "--db", str(path), "history", "hosts")
    header, line = out.splitlines()
    assert code == 0 and header.split()[6:10] == ["RAW", "ROWS", "RAW", "SIZE"]
    fields = line.split()
    assert fields[0] == "gpu-a" and fields[5] == "2400"
    assert 4 * 10 < float(fields[7]) < 4 * 40  # 4 rows a sample, 10 to 40 bytes a row


def test_a_raw_export_of_a_link_series_says_to_export_its_minutes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.db"
    with open_database(path) as db, SampleWriter(db) as writer:
        writer.submit_rows(
            "gpu-a", [(s, 1_764_482_400.0 + s, "gpu0/nvlink3", "nvlink_tx_bytes_per_s", 1e9) for s in range(1, 90)]
        )
    base = ("--db", str(path), "history", "export", "--host", "gpu-a", "--device", "gpu0/nvlink3")
    code, _, err = _run(capsys, *base)
    assert code == 2 and err.startswith("meshdeck: error: --tier: ") and "use --tier 1m" in err
    code, out, _ = _run(capsys, *base, "--tier", "1m")
    assert code == 0 and [line.split(",")[-1] for line in out.splitlines()[1:]] == ["59", "30"]


@pytest.mark.slow
def test_bench_ingest_prints_the_documented_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "--db", str(tmp_path / "m.db"), "bench", "ingest", "--rows", "20000", "--repeat", "1", "--json"
    )
    result = json.loads(out)
    assert code == 0
    assert result["rows"] >= 20000 and result["series"] == 768
    assert result["store_rows_per_s"] > 0 and result["raw_sqlite_rows_per_s"] > 0
    assert result["ratio"] == pytest.approx(result["store_rows_per_s"] / result["raw_sqlite_rows_per_s"], rel=0.01)
    assert list(tmp_path.iterdir()) == []  # scratch databases removed, --db itself never created
