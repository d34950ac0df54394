"""`meshdeck profiles list|show|import|export|duplicate|delete`: deployment profiles kept in the database.

    meshdeck profiles import ds32-h200-2n.yaml [--replace] [--note "raise max_model_len"]
    meshdeck profiles list [--json]
    meshdeck profiles show ds32-h200-2n [--version 3] [--versions] [--json]
    meshdeck profiles export ds32-h200-2n [--version 3] [--canonical] [-o FILE]
    meshdeck profiles duplicate ds32-h200-2n ds32-h200-2n-fp8
    meshdeck profiles delete ds32-h200-2n

A file that fails validation (wrong types, unknown keys, a layout that does not match its hosts,
anchors/aliases) is refused with `meshdeck: error: FILE: field: problem` and exit status 2; nothing
is stored. `export` writes the text exactly as imported unless `--canonical` asks for the normalised
form; `-o FILE` writes a regular file atomically and a pipe or device directly (services/files.py), a
file holding a secret 0600, and follows only the user's own symlinks.

Secret env values (HF_TOKEN, ...) are kept in the OS keyring, not the database: `show` prints the
keyring reference in their place, `export` writes the value itself (and says so on stderr). What is
printed from the database is escaped, so no stored text can rewrite the terminal.
"""

from __future__ import annotations

import argparse
import json
import sys

from meshdeck.commands import Subparsers
from meshdeck.core.errors import InputError
from meshdeck.core.secret_env import masked_env
from meshdeck.core.text import printable, printable_lines
from meshdeck.launch.profile import MAX_PROFILE_BYTES
from meshdeck.launch.profile_secrets import masked_profile_text
from meshdeck.services import profiles as profile_service
from meshdeck.services.files import STDOUT, open_output, output_target
from meshdeck.services.history import utc_stamp
from meshdeck.store.database import open_database


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("profiles", help="list, show, import, export and delete deployment profiles")
    commands = parser.add_subparsers(dest="profiles_command", metavar="ACTION", required=True)

    listing = commands.add_parser("list", help="every stored profile with its current version")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=_list)

    show = commands.add_parser("show", help="print a profile's YAML (or its versions)")
    show.add_argument("name")
    show.add_argument("--version", type=int, metavar="N", help="a past version (default: the current one)")
    show.add_argument("--versions", action="store_true", help="list every version with its note")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=_show)

    imported = commands.add_parser("import", help="validate a profile YAML file and store it ('-' reads stdin)")
    imported.add_argument("file")
    imported.add_argument("--replace", action="store_true", help="store as the next version of an existing profile")
    imported.add_argument("--note", default="", help="why this version (kept with it)")
    imported.set_defaults(func=_import)

    export = commands.add_parser("export", help="write a profile's YAML to stdout or a file")
    export.add_argument("name")
    export.add_argument("--version", type=int, metavar="N", help="a past version (default: the current one)")
    export.add_argument(
        "--canonical", action="store_true", help="normalised YAML, every default of its engine spelled out"
    )
    export.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write to FILE (a regular file atomically; a pipe or device directly; - for stdout)",
    )
    export.set_defaults(func=_export)

    duplicate = commands.add_parser("duplicate", help="copy a profile under a new name")
    duplicate.add_argument("name")
    duplicate.add_argument("new_name")
    duplicate.set_defaults(func=_duplicate)

    delete = commands.add_parser("delete", help="delete a profile and its versions (deployment records keep a copy)")
    delete.add_argument("name")
    delete.set_defaults(func=_delete)


def _list(args: argparse.Namespace) -> int:
    with open_database(args.db) as db:
        summaries = profile_service.list_profiles(db)
    if args.json:
        rows = [
            {
                "name": s.name,
                "version": s.current_version,
                "versions": s.versions,
                "created_at": s.created_at,
                "updated_at": s.updated_at,
                "engine": s.data.get("engine"),
                "model": s.data.get("model"),
                "hosts": s.data.get("hosts"),
                "layout": s.data.get("layout"),
            }
            for s in summaries
        ]
        print(json.dumps(rows, indent=2))
        return 0
    if not summaries:
        print("no profiles yet; add one with `meshdeck profiles import FILE`")
        return 0
    print(f"{'NAME':<28} {'VER':>4} {'ENGINE':<6} {'LAYOUT':<18} {'HOSTS':<24} UPDATED")
    for s in summaries:
        shape = profile_service.layout_label(s.data)
        hosts = ",".join(str(host) for host in s.data.get("hosts") or [])
        row = f"{s.name:<28} {s.current_version:>4} {s.data.get('engine', ''):<6} {shape:<18} {hosts:<24}"
        print(printable(f"{row} {utc_stamp(s.updated_at)}"))
    return 0


def _show(args: argparse.Namespace) -> int:
    with open_database(args.db) as db:
        if args.versions:
            versions = profile_service.profile_versions(db, args.name)
            if args.json:
                print(
                    json.dumps([{"version": v.version, "note": v.note, "created_at": v.created_at} for v in versions])
                )
            else:
                for v in versions:
                    print(printable(f"v{v.version:<4} {utc_stamp(v.created_at)}  {v.note}"))
            return 0
        version = profile_service.profile_version(db, args.name, args.version)
    if args.json:
        data = dict(version.data)
        if isinstance(data.get("env"), dict):  # a secret an older meshdeck stored is still not shown
            data["env"] = dict(masked_env((str(k), v) for k, v in data["env"].items()))
        print(json.dumps({"name": version.name, "version": version.version, "profile": data}, indent=2))
    else:
        text = printable_lines(masked_profile_text(version.yaml, f"profile {version.name}"))
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _read_profile_file(name: str) -> bytes:
    if name == "-":
        data = sys.stdin.buffer.read(MAX_PROFILE_BYTES + 1)
        if len(data) > MAX_PROFILE_BYTES:
            raise InputError("stdin", f"is larger than the {MAX_PROFILE_BYTES}-byte limit for a profile")
        return data
    return profile_service.read_profile_file(name)


def _import(args: argparse.Namespace) -> int:
    data = _read_profile_file(args.file)
    source = "stdin" if args.file == "-" else args.file
    with open_database(args.db) as db:
        stored = profile_service.import_profile(db, data, source, replace=args.replace, note=args.note)
    print(f"stored profile {stored.version.name} v{stored.version.version}")
    return 0


def _export(args: argparse.Namespace) -> int:
    target = output_target(args.output or STDOUT, option="-o")
    with open_database(args.db) as db:
        exported = profile_service.exported_profile(db, args.name, args.version, canonical=args.canonical)
    with open_output(target, private=exported.holds_secret) as handle:  # a file holding a secret: 0600
        handle.write(exported.text)
    for key in exported.from_keyring:
        where = printable(target.destination)  # the file the bytes went to, not only the link named
        print(f"meshdeck: env.{key}: its secret value from the OS keyring is written to {where}", file=sys.stderr)
    return 0


def _duplicate(args: argparse.Namespace) -> int:
    with open_database(args.db) as db:
        stored = profile_service.duplicate_profile(db, args.name, args.new_name)
    print(f"stored profile {stored.version.name} v{stored.version.version} (copy of {args.name})")
    return 0


def _delete(args: argparse.Namespace) -> int:
    with open_database(args.db) as db:
        versions = profile_service.delete_profile(db, args.name)
    print(f"deleted profile {args.name} ({versions} version{'s' if versions != 1 else ''})")
    return 0
