"""The simulator: model and hardware presets, the hit-rate engine and the discrete-event engine."""
