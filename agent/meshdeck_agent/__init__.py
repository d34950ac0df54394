"""meshdeck-agent: the daemon on each GPU server (inventory, live metrics, worker supervision).

Runs on the server's stdlib (Python >= 3.9) plus nvidia-ml-py and prometheus_client, which the
zipapp vendors. Imports nothing from the meshdeck app.
"""

__version__ = "0.2.0"
