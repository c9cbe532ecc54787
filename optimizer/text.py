"""Number formatting shared by explanations and tables.

Owns wording of numbers only; no computation of what they mean."""

from __future__ import annotations


def pct(x: float | None) -> str:
    """A share as a percentage with one decimal; a share above zero never shows as 0% (tiny
    shares read "<0.1%") and a share below one never shows as 100% (">99.9%")."""
    if x is None:
        return "-"
    if x <= 0:
        return "0%"
    if x >= 1:
        return "100%"
    if x < 0.001:
        return "<0.1%"
    if x > 0.999:
        return ">99.9%"
    return f"{x:.1%}"


def format_ms(seconds: float) -> str:
    """Milliseconds for a message: whole above 10 ms, two significant digits below (never "0")."""
    ms = seconds * 1e3
    return f"{ms:,.0f}" if ms >= 10 else f"{ms:.2g}"
