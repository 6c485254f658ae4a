"""Detection with the Zero-CoT Probe: prompts and metrics, the within-item test, detection runs, reports."""
