"""Which tensor-parallel degrees a model and GPU allow."""

from __future__ import annotations

from fleetplan.catalogs.schema import GPU, LLM


def tp_problem(llm: LLM, gpu: GPU, tp: int) -> str | None:
    """Why ``tp`` is not a valid tensor-parallel degree for ``llm`` on ``gpu``, or None if it is.

    A TP group must sit inside one scale-up domain (NVLink/xGMI), and the attention heads must
    split evenly: TP divides the query-head count, and either divides the KV-head count or is
    a multiple of it (KV heads are then replicated).
    """
    if tp < 1:
        return "tp must be at least 1"
    if tp > gpu.scaleup_domain_gpus:
        return f"tp {tp} exceeds {gpu.id}'s scale-up domain of {gpu.scaleup_domain_gpus} GPUs"
    if llm.num_attention_heads % tp:
        return f"tp {tp} does not divide {llm.id}'s {llm.num_attention_heads} attention heads"
    if llm.attention != "mla" and llm.num_kv_heads % tp and tp % llm.num_kv_heads:
        return f"tp {tp} neither divides nor is a multiple of {llm.id}'s {llm.num_kv_heads} KV heads"
    return None
