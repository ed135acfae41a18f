"""Traces: the file format, importers from serving engines, the synthetic generator, statistics."""
