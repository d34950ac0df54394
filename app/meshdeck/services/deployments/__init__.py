"""Deployments: the registry that launches, adopts, lists, stops and reads the logs of them (registry.py),
with its parts — what a deployment is (model.py, state.py), how it is launched and waited for (targets.py,
hosts.py, launch_steps.py, waits.py), found on the agents (found.py), watched (watch.py, events.py),
recorded (records.py), and run on this machine's own agents (local.py). No Qt."""
