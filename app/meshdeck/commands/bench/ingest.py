"""`meshdeck bench ingest`: how fast the store takes samples, against plain sqlite3 in the same run.

    meshdeck bench ingest --rows 1000000 --json
    -> {"store_rows_per_s": ..., "raw_sqlite_rows_per_s": ..., "ratio": ..., ...}

The data is fabricated (8-GPU hosts, 12 metrics per GPU, 1 Hz; marked simulated); see
`meshdeck.services.ingest_benchmark` for exactly what each side does. The scratch databases go in a
temporary folder (beside the `--db` file when one is given, to measure that disk); the database
itself is never touched, and the scratch files are deleted.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from meshdeck.commands import Subparsers
from meshdeck.commands.bench._arguments import positive_int
from meshdeck.core.errors import InputError
from meshdeck.services.ingest_benchmark import run_ingest_benchmark


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("ingest", help="store ingest rate vs plain sqlite3 executemany (same schema)")
    parser.add_argument(
        "--rows", type=positive_int, default=1_000_000, help="sample rows per round (default 1,000,000)"
    )
    parser.add_argument("--hosts", type=positive_int, default=8, help="8-GPU hosts the rows come from (default 8)")
    parser.add_argument("--batch-rows", type=positive_int, default=100_000, help="rows per commit (default 100,000)")
    parser.add_argument("--repeat", type=positive_int, default=3, help="rounds; medians are reported (default 3)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    directory = None
    if args.db:
        directory = Path(args.db).expanduser().parent
        if not directory.is_dir():
            raise InputError("--db", f"folder {directory} does not exist")
    result = run_ingest_benchmark(
        args.rows, hosts=args.hosts, batch_rows=args.batch_rows, repeat=args.repeat, directory=directory
    )
    document = result.as_dict()
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    print(
        f"{document['rows']:,} rows from {args.hosts} simulated 8-GPU hosts ({document['series']} series), "
        f"{args.batch_rows:,} rows per commit, median of {args.repeat}"
    )
    print(f"  store (SampleWriter)      {document['store_rows_per_s']:>12,} rows/s")
    print(f"  plain sqlite3.executemany {document['raw_sqlite_rows_per_s']:>12,} rows/s")
    print(f"  ratio                     {document['ratio']:>12}")
    print(
        f"  sqlite3 with the writer's key-order sort and cache {document['raw_sqlite_tuned_rows_per_s']:,} rows/s "
        f"(store: {document['ratio_vs_tuned']} of it)"
    )
    return 0
