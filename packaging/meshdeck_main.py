"""Entry point of the packaged (PyInstaller) console.

A frozen app has no Python interpreter to run `python -m meshdeck_agent ...` with, yet the agent
re-executes itself that way (daemon, per-worker keepers, the simulated vLLM) and the console starts
local agents that way (`--demo`). So this executable also answers `-m meshdeck_agent ...`: it runs
the agent's own CLI. Anything else is the `meshdeck` CLI (the window for --demo and friends).
"""

import sys


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["-I"]:  # `python -I -m ...`: isolation flags mean nothing inside a frozen app
        argv = argv[1:]
    if argv[:2] == ["-m", "meshdeck_agent"]:
        from meshdeck_agent.__main__ import main as agent_main

        sys.argv = [sys.argv[0], *argv[2:]]
        return int(agent_main() or 0)
    from meshdeck.cli import main as console_main

    return int(console_main(argv) or 0)


if __name__ == "__main__":
    sys.exit(main())
