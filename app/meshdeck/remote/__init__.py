"""Reaching agents: SSH, bootstrap, the RPC client and a supervisor thread per host, one read hub and one sample pump for all (no Qt)."""
