"""Pure domain: model cards, GPU specs, layouts, memory and communication models, the advisor.

Stdlib only. No I/O, no Qt, no database, no SSH: every input arrives as plain values.
"""
