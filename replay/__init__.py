"""Replay: the simulator's decisions executed with real copies and compute, and its error measured."""
