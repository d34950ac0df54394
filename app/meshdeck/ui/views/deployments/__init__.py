"""The deployments view (view.py): the list and live state, with its detail panels (panels.py), the log tab
(log.py) and what the view says in words (status.py)."""
