"""Reaching agents: SSH, bootstrap, the RPC client and one supervisor thread per host (no Qt)."""
