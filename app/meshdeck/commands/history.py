"""`meshdeck history hosts|export|retention`: the metric history in the database.

    meshdeck history hosts [--json]
    meshdeck history export --host gpu-a [--metric memory_used_bytes] [--device gpu3]
                            [--since 2h | 2025-11-30T06:00Z | 1764482400] [--until now]
                            [--format csv|json] [--tier raw|1m|1h] [-o FILE]
    meshdeck history retention [--raw-days 7] [--minute-days 90] [--hour-days forever] [--raw-max-size 50GB]

    meshdeck history hosts|export --source prometheus --prometheus-url http://prometheus:9090
                            [--prometheus-host-label host] [--step 1] ...

`export` streams every point in the range (raw samples by default; `--tier 1m|1h` gives min, mean,
max and count per bucket). Times are Unix seconds, ISO 8601 (UTC unless an offset is given), `now`,
or an age such as `2h` / `7d`. With `-o FILE` a file appears complete or not at all; a pipe or a device
such as /dev/null is written through, `-o -` is stdout (services/files.py).

`--source prometheus` reads the same series from the operator's Prometheus, which scrapes every
agent's exporter (`meshdeck-agent serve --prometheus`), through its HTTP API (services/prometheus_history.py):
hosts are named by one label of the scrape config (`host` unless `--prometheus-host-label` says
another), `export` writes the same columns, raw rows one per `--step` seconds.

`--raw-max-size` bounds the raw tier (`none` lifts the bound): once over it, the writer deletes the
oldest raw samples first and keeps the rollups. `retention` and `hosts` show what the raw tier takes.
Per-link NVLink series are kept as 1-minute rollups: export them with `--tier 1m` (or `1h`).
"""

from __future__ import annotations

import argparse
import json
import sys

from meshdeck.commands import Subparsers
from meshdeck.core.errors import InputError
from meshdeck.core.text import printable
from meshdeck.services import history as history_service
from meshdeck.services import prometheus_history
from meshdeck.services.files import STDOUT, open_output, output_target
from meshdeck.services.history import utc_stamp
from meshdeck.services.sizes import format_size, parse_size
from meshdeck.store.database import open_database
from meshdeck.store.retention import RetentionPolicy, load_policy, save_policy


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("history", help="metric history: hosts recorded, export, retention")
    commands = parser.add_subparsers(dest="history_command", metavar="ACTION", required=True)

    hosts = commands.add_parser("hosts", help="hosts with recorded history")
    hosts.add_argument("--json", action="store_true", help="print JSON")
    _add_source_options(hosts)
    hosts.set_defaults(func=_hosts)

    export = commands.add_parser("export", help="write a host's samples as CSV or JSON")
    export.add_argument("--host", required=True, help="the host's name")
    export.add_argument("--metric", help="one metric, e.g. memory_used_bytes (default: all)")
    export.add_argument("--device", help="one device, e.g. gpu3, host, nic:mlx5_0/1 (default: all)")
    export.add_argument("--since", help="start: Unix seconds, ISO 8601, 'now' or an age like 2h (default: all)")
    export.add_argument("--until", help="end (exclusive), same forms (default: now)")
    export.add_argument("--format", default="csv", choices=history_service.EXPORT_FORMATS)
    export.add_argument("--tier", default="raw", choices=("raw", "1m", "1h"), help="resolution (default raw)")
    export.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write to FILE (a regular file atomically; a pipe or device directly; - for stdout)",
    )
    _add_source_options(export)
    export.add_argument(
        "--step", type=float, default=1.0, metavar="S", help="prometheus, raw tier: seconds between rows (default 1)"
    )
    export.set_defaults(func=_export)

    retention = commands.add_parser("retention", help="show or set how long each resolution is kept")
    for flag, tier in (
        ("--raw-days", "raw samples"),
        ("--minute-days", "1-minute rollups"),
        ("--hour-days", "1-hour rollups"),
    ):
        retention.add_argument(flag, metavar="DAYS", help=f"days to keep {tier}, or 'forever'")
    retention.add_argument(
        "--raw-max-size",
        metavar="SIZE",
        help="the raw tier's size budget, e.g. 50GB, 500MiB, or 'none'; the oldest raw samples go first",
    )
    retention.add_argument("--json", action="store_true", help="print JSON")
    retention.set_defaults(func=_retention)


def _add_source_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        default="sqlite",
        choices=prometheus_history.SOURCES,
        help="this console's database (default) or a Prometheus server that scrapes the agents' exporters",
    )
    parser.add_argument(
        "--prometheus-url",
        metavar="URL",
        help="with --source prometheus: e.g. http://localhost:9090 (http://USER:PASSWORD@host:9090 for basic auth)",
    )
    parser.add_argument(
        "--prometheus-host-label",
        default=prometheus_history.DEFAULT_HOST_LABEL,
        metavar="LABEL",
        help="the scrape config's label that names each host (default: host)",
    )
    parser.add_argument(
        "--prometheus-timeout",
        type=float,
        default=prometheus_history.DEFAULT_TIMEOUT_S,
        metavar="S",
        help="seconds one request to Prometheus may take, connect to last byte (default 15)",
    )


SHOWN_HOST_CHARS = 200  # a host name from Prometheus, as `history hosts` prints it


def _prometheus(args: argparse.Namespace) -> prometheus_history.PrometheusSource:
    if not args.prometheus_url:
        raise InputError("--prometheus-url", "required with --source prometheus (e.g. http://localhost:9090)")
    return prometheus_history.PrometheusSource(
        args.prometheus_url, host_label=args.prometheus_host_label, timeout_s=args.prometheus_timeout
    )


def _prometheus_hosts(args: argparse.Namespace) -> int:
    source = _prometheus(args)
    names = prometheus_history.prometheus_hosts(source)
    if args.json:
        print(json.dumps([{"host": name} for name in names], indent=2))
    elif not names:
        print(f"Prometheus at {source.url} has scraped no meshdeck agent in the last 7 days")
    else:  # the server's label values: escaped (no ESC, no newline reaches the terminal) and cut short
        print("\n".join(printable(name, SHOWN_HOST_CHARS) for name in names))
    return 0


def _hosts(args: argparse.Namespace) -> int:
    if args.source == "prometheus":
        return _prometheus_hosts(args)
    with open_database(args.db) as db:
        rows = history_service.history_hosts(db)
    if args.json:
        print(json.dumps([row.__dict__ for row in rows], indent=2))
        return 0
    if not rows:
        print("no history recorded yet")
        return 0
    print(
        f"{'HOST':<24} {'SERIES':>7} {'SAMPLES':>10} {'LOST':>6} {'LAST SEQ':>10} {'RAW ROWS':>12} {'RAW SIZE':>9} "
        f"{'B/SAMPLE':>8}  LAST SAMPLE"
    )
    for row in rows:
        print(
            f"{row.host:<24} {row.series:>7} {row.samples:>10} {row.dropped:>6} {row.last_seq:>10} {row.raw_rows:>12} "
            f"{format_size(row.raw_bytes):>9} {row.bytes_per_sample:>8.0f}  {utc_stamp(row.last_ts)}"
        )
    return 0


def _export(args: argparse.Namespace) -> int:
    since = None if args.since is None else history_service.parse_time(args.since, field="--since")
    until = None if args.until is None else history_service.parse_time(args.until, field="--until")
    options = {
        "host": args.host,
        "metric": args.metric,
        "device": args.device,
        "since": since,
        "until": until,
        "fmt": args.format,
        "tier": args.tier,
    }
    target = output_target(args.output or STDOUT, option="-o")
    if args.source == "prometheus":
        source = _prometheus(args)
        with open_output(target) as handle:
            count = prometheus_history.export_history(source, handle, step_s=args.step, **options)
    else:
        with open_database(args.db) as db, open_output(target) as handle:
            count = history_service.export_history(db, handle, **options)
    if target.path is not None:
        print(f"wrote {count} points to {printable(target.destination)}", file=sys.stderr)
    return 0


def _days(text: str | None, flag: str, current: float | None) -> float | None:
    if text is None:
        return current
    if text.strip().lower() in ("forever", "none", "never"):
        return None
    try:
        return float(text)
    except ValueError:
        raise InputError(flag, f"{text!r} is not a number of days or 'forever'") from None


def _retention(args: argparse.Namespace) -> int:
    changes = (args.raw_days, args.minute_days, args.hour_days, args.raw_max_size)
    with open_database(args.db) as db:
        policy = load_policy(db)
        if any(change is not None for change in changes):
            budget = policy.raw_max_bytes
            if args.raw_max_size is not None:
                budget = parse_size(args.raw_max_size, field="--raw-max-size")
            try:
                policy = RetentionPolicy(
                    raw_days=_days(args.raw_days, "--raw-days", policy.raw_days),
                    minute_days=_days(args.minute_days, "--minute-days", policy.minute_days),
                    hour_days=_days(args.hour_days, "--hour-days", policy.hour_days),
                    raw_max_bytes=budget,
                )
            except InputError as error:
                if error.field == "retention.raw_max_bytes":
                    raise InputError("--raw-max-size", error.problem) from None
                raise
            save_policy(db, policy)
        size = history_service.raw_tier(db)
    if args.json:
        print(json.dumps({**policy.__dict__, "raw_tier_bytes": size.bytes, "raw_tier_rows": size.rows}))
    else:
        for name, days in (("raw", policy.raw_days), ("1m", policy.minute_days), ("1h", policy.hour_days)):
            print(f"{name:<4} {'forever' if days is None else f'{days:g} days'}")
        budget_text = "none" if policy.raw_max_bytes is None else format_size(policy.raw_max_bytes)
        print(f"raw size budget {budget_text}; raw tier now {format_size(size.bytes)} ({size.rows} rows)")
    return 0
