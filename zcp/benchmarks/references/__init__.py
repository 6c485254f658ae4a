"""Reference sets and evasive variants: isomorphic perturbation and equivalence-preserving rewrites.

The built-in reference builders register themselves when this package is imported (`builders`), so any import of
the package or of one of its modules (`zcp.benchmarks.references.registry`) finds them. A new builder is one module
calling `register_reference_builder` plus one conf/reference/*.yaml (docs/extending.md).
"""

from zcp.benchmarks.references import builders as _builders  # noqa: F401  (registers the built-in builders)
