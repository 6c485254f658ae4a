"""Shared contracts of the three jobs: the item schema, file I/O and run directories, answers, tracking."""
