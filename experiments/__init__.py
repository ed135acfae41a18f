"""The experiment layer: sweeps of configurations (local or on Ray) and the golden hit-rate table CI guards."""
