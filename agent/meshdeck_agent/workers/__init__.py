"""The workers the launcher asks for: their supervisor (supervisor.py), each one's record and files on disk
(state.py), reading their rotating logs (logs.py) and tailing them for the lines that matter (tail.py)."""
