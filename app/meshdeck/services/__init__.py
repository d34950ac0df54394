"""Use-cases that tie remote, store, launch and core together. No Qt: the ui calls these."""
