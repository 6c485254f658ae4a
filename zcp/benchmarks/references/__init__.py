"""Reference sets and evasive variants: isomorphic perturbation and equivalence-preserving rewrites."""
