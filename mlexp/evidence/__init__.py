"""How the book checks itself: gluing numbers into the page, figure style,
provenance, seed runs and their statistics, the seed section with its
reproduction rule, and the evidence page.

A reader of the model code can skip this subpackage whole. Nothing in it
produces a run's numbers, so the library's hash in a run's fingerprint
leaves it out (:mod:`mlexp.evidence.provenance`).
"""
