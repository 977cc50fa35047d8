"""Depth policies: how many tokens to draft at each step (gamma), and when to stop early.

A policy is asked `gamma()` before each step, `keep_drafting(q_row)` after each drafted token
(q_row: the draft's distribution [vocab] that token was sampled from), and `update(event)` after
each step. Only the fixed policy lives here; the lessons add adaptive ones.
"""
from __future__ import annotations


class FixedDepth:
    """Always draft gamma tokens (Leviathan et al. 2023; the default of most engines)."""
    name = "fixed"

    def __init__(self, gamma: int):
        self.gamma_value = gamma

    def gamma(self) -> int:
        return self.gamma_value

    def keep_drafting(self, q_row) -> bool:
        return True

    def update(self, event) -> None:
        pass
