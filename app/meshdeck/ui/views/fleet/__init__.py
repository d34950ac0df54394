"""The fleet view: every GPU of every host at once."""
