"""The planner view (view.py), its inputs form (form.py) and saving the chosen layout as profiles (save.py)."""
