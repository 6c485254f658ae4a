"""Validating detectors on ground truth: false-positive rates with real originals, power, ablations."""
