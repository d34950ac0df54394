"""GPU backends: `nvml` (real hardware through NVML) and `simulated` (deterministic, labelled simulated).

Both give the same two things: an inventory list of GPUs with their links, and one plain record per
GPU per sample in the wire shape of `protocol.SAMPLE["gpus"]`.
"""
