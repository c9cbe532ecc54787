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


def gap_split(parts_usd: dict[str, float]) -> str:
    """Where a gap lies (``gap_breakdown_usd`` of a plan), in one clause: the lower bound, the
    products planned alone and what sharing whole instances and idle instance GPUs add."""
    return (f"lower bound ${parts_usd['lower_bound']:,.0f} per month; each product planned alone "
            f"${parts_usd['products_alone']:,.0f}; sharing whole instances (GPU types chosen together, spot "
            f"replicas and API shares on idle GPUs) +${parts_usd['sharing_instances']:,.0f}; idle instance GPUs "
            f"+${parts_usd['idle_instance_gpus']:,.0f} (no lower bound prices whole instances)")
