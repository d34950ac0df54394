"""Simulation for `--simulate`: a whole simulated server (machine.py, traffic.py) and the vLLM stand-in the
agent runs in place of `vllm serve` — chosen from the worker's own argv (engine.py), with the startup numbers
vLLM would measure (memory.py), its plan and GPU load (spec.py), its request load (load.py) and the server
process itself (vllm.py, run as `meshdeck-agent simvllm`)."""
