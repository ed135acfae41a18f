"""Replacement policies and prefetchers, one module each, behind one registry."""
