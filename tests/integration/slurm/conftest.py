"""The real Slurm cluster and the sshd/agent fixtures the Slurm tests use."""

from integration.remote.remote_agent_fixtures import agent_pyz  # noqa: F401  (fixtures)
from slurm_fixtures import slurm_cluster  # noqa: F401  (fixture)
from sshd import ssh_client_key, sshd_factory  # noqa: F401  (fixtures)
