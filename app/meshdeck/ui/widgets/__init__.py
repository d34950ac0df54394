"""Custom widgets of the console (memory bars, rank map)."""
