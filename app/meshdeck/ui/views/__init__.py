"""One view per area of the console window."""
