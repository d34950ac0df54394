"""Plan + hosts + engine settings -> per-node argv and env for vLLM and torchrun (pure), and profiles."""
