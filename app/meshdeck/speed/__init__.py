"""Speed models that live outside `core`: the adapter to NVIDIA's aiconfigurator-core measured kernel tables.

`core` defines what a speed model answers (core/serving.py) and the roofline that stands in where no tables
reach (core/roofline_speed.py); this package asks the library (numpy, pandas, a Rust engine) and turns its
answers into those records. It imports nothing from the ui, store, remote or services.
"""
