"""torch.distributed programs shipped to the servers: collective benchmarks and a tiny DeepSeek.

They run on servers where only torch is installed, so nothing here imports the rest of meshdeck.
"""
