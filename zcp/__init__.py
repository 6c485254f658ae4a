"""zcp: simulate evasive benchmark contamination and detect it with the Zero-CoT Probe."""

__version__ = "0.1.0"
