"""How often the writer commits at fleet size: by its interval, not by a fixed cap on staged rows.

Samples are keyed (series, time), so each commit rewrites a leaf page per series however few rows each
got: committing N series every second instead of every interval made disk writes grow with the square
of the fleet (issue 14: 278 hosts, a commit every ~1.7 s, 620 MB/s written)."""

from __future__ import annotations

from meshdeck.services.synthetic_samples import host_name, sample_batch, wire_sample
from meshdeck.store.database import Database
from meshdeck.store.writer import SampleWriter, WriterSettings, batch_rows_for

HOUR_START = 1_764_482_400.0
HOSTS = 40  # x 96 series: 30 s of their samples are 115,200 rows, more than the 100,000 the cap was


def test_a_fleet_at_1_hz_commits_once_per_interval_however_many_rows_that_is(db: Database) -> None:
    seconds = [sample_batch([wire_sample(seq, HOUR_START + seq, gpus=8)]) for seq in range(1, 32)]
    settings = WriterSettings(commit_interval_s=30.0, retention_every_s=1e9)
    with SampleWriter(db, settings=settings) as writer:
        for index in range(HOSTS):
            writer.submit_samples(host_name(index), seconds[0])
        assert writer.flush(60)  # the fleet's series are known from here on
        commits = writer.stats().commits
        for batch in seconds[1:]:
            for index in range(HOSTS):
                writer.submit_samples(host_name(index), batch)
        assert writer.flush(120)
        stats = writer.stats()
    assert stats.rows == 31 * HOSTS * 96
    assert stats.commits - commits == 1  # one interval's samples, one commit (the fixed cap made it 2)


def test_the_row_cap_follows_the_series_within_its_bounds() -> None:
    settings = WriterSettings()
    assert batch_rows_for(278 * 112, 30.0, settings) == 278 * 112 * 45  # 1.5 intervals of a 278-host fleet
    assert batch_rows_for(10, 2.0, settings) == settings.min_batch_rows
    assert batch_rows_for(10**6, 30.0, settings) == settings.max_staged_rows
    assert batch_rows_for(10**6, 30.0, WriterSettings(max_batch_rows=5000)) == 5000
