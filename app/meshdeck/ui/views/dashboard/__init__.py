"""The live dashboard (view.py) and the chart definitions it shares with the history view (charts.py)."""
