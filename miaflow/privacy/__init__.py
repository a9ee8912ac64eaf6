"""Auditing a differential-privacy claim: canaries, cheap DP targets, and lower bounds on ε that
an accountant's ε must not fall below (issue #44)."""
