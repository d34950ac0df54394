"""Reaching agents: SSH, bootstrap, the RPC client, a supervisor thread per host, and one read hub and one
sample pump for all hosts (no Qt)."""
