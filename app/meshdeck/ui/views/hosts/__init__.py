"""The hosts view (view.py) and its dialogs: adding a host, deciding about a host key (dialogs.py)."""
