"""CLI subcommands, one module each. A module here exposes `register(subparsers)`.

`meshdeck.cli` discovers them, so adding a command never edits a shared file.
"""
