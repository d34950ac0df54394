"""The history view (view.py) and the store's query results shaped for its charts (data.py)."""
