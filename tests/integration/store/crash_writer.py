"""Child process for the kill -9 test: resumes each host after its last committed seq, ingests as fast
as it can in small commits, and prints every acknowledgement as a JSON line the moment it is durable."""

from __future__ import annotations

import json
import sys
import time

from meshdeck.services.synthetic_samples import sample_batch, wire_sample
from meshdeck.store.database import open_database
from meshdeck.store.ingest import CommitAck
from meshdeck.store.writer import SampleWriter, WriterSettings

HOSTS = ("gpu-a", "gpu-b", "gpu-c")


def first_sample_time() -> float:
    """Now, to the second: the samples must be recent, or the writer's first retention pass (at most 60 s
    after it starts, whatever retention_every_s says) deletes them as older than the raw tier keeps."""
    return float(int(time.time()))


def sample_time(seq: int, t0: float) -> float:
    return t0 + seq


def main(path: str, t0: float) -> None:
    db = open_database(path)

    def acknowledge(ack: CommitAck) -> None:
        lines = [json.dumps({"host": r.host, "first": r.first_seq, "last": r.last_seq}) for r in ack.ranges]
        sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()

    settings = WriterSettings(commit_interval_s=0.01, max_batch_rows=4000, retention_every_s=3600)
    writer = SampleWriter(db, settings=settings, on_commit=acknowledge).start()
    next_seq = {host: (writer.committed_seq(host) or 0) + 1 for host in HOSTS}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:  # until killed
        for host in HOSTS:
            seq = next_seq[host]
            writer.submit_samples(
                host, sample_batch([wire_sample(seq + i, sample_time(seq + i, t0), gpus=4) for i in range(5)])
            )
            next_seq[host] = seq + 5
        time.sleep(0.005)  # ~140k rows/s offered: faster than 1 Hz fleets, yet the writer thread gets the GIL


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
