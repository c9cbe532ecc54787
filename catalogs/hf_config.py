"""Turn a local Hugging Face ``config.json`` into an LLM catalog entry (no network).

Parameter counts are computed from the architecture: embeddings (and an untied output head),
attention projections (GQA or MLA), dense MLPs (gated: 3 matrices), and for MoE layers the
routed experts, shared experts and router. Active parameters count only the experts a token
is routed to. Norm weights and biases are ignored (well under 0.1%). Every size read is checked
against its range in :mod:`fleetplan.catalogs.fields`, and so are the computed counts.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.loader import InputError


def _get(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


def _whole(cfg: dict[str, Any], valid: F.Range, *names: str, default: Any = None) -> int:
    """The first of ``names`` present in ``cfg`` (else ``default``) as a whole number in ``valid``;
    a field that is missing without a default, or out of range, raises one line naming it."""
    v = _get(cfg, *names, default=default)
    if v is None:
        raise InputError(f"config.json: missing field {names[0]!r}")
    name = next((n for n in names if cfg.get(n) is not None), names[0])
    try:
        return valid.check_int(v, f"config.json: {name}")
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _attention(cfg: dict[str, Any], hidden: int, heads: int, kv_heads: int, head_dim: int
               ) -> tuple[int, int, int | None, int | None]:
    """One layer's attention parameters, the head dimension, and the MLA latent rank and rotary
    head dimension (None for grouped-query attention)."""
    kv_lora = _whole(cfg, F.WIDTH, "kv_lora_rank") if _get(cfg, "kv_lora_rank") else None
    rope_dim = _whole(cfg, F.WIDTH, "qk_rope_head_dim") if kv_lora else None
    if not (kv_lora and rope_dim):
        return (hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden, head_dim,
                kv_lora, rope_dim)
    q_lora = _whole(cfg, F.WIDTH, "q_lora_rank") if _get(cfg, "q_lora_rank") else None
    nope = _whole(cfg, F.WIDTH, "qk_nope_head_dim", default=head_dim)
    v_dim = _whole(cfg, F.WIDTH, "v_head_dim", default=head_dim)
    qk = nope + rope_dim
    q = hidden * heads * qk if not q_lora else hidden * q_lora + q_lora * heads * qk
    attn = q + hidden * (kv_lora + rope_dim) + kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden
    return attn, nope, kv_lora, rope_dim


def _mlp(cfg: dict[str, Any], layers: int, hidden: int, inter: int) -> tuple[int, int, dict[str, Any] | None]:
    """The MLP parameters of all layers, in total and active per token, and the ``moe`` entry
    (None for a dense model)."""
    dense_mlp = 3 * hidden * inter
    if not _get(cfg, "n_routed_experts", "num_local_experts", "num_experts"):
        return layers * dense_mlp, layers * dense_mlp, None
    n_experts = _whole(cfg, F.EXPERTS, "n_routed_experts", "num_local_experts", "num_experts")
    k = _whole(cfg, F.EXPERTS, "num_experts_per_tok", "experts_per_token", "top_k")
    moe_inter = _whole(cfg, F.WIDTH, "moe_intermediate_size", default=inter)
    shared = _whole(cfg, F.SHARED_EXPERTS, "n_shared_experts", "num_shared_experts", default=0)
    first_dense = _whole(cfg, F.LAYER_COUNT, "first_k_dense_replace", default=0)
    step = _whole(cfg, F.LAYER_COUNT, "interleave_moe_layer_step", "moe_layer_freq", default=1) or 1
    moe_layers = len([i for i in range(first_dense, layers) if (i - first_dense) % step == step - 1 or step == 1])
    expert = 3 * hidden * moe_inter
    shared_p = shared * 3 * hidden * _whole(cfg, F.WIDTH, "shared_expert_intermediate_size", default=moe_inter)
    router = hidden * n_experts
    mlp_total = (layers - moe_layers) * dense_mlp + moe_layers * (n_experts * expert + shared_p + router)
    mlp_active = (layers - moe_layers) * dense_mlp + moe_layers * (k * expert + shared_p + router)
    return mlp_total, mlp_active, {
        "num_experts": n_experts, "experts_per_token": k, "num_shared_experts": shared,
        "num_moe_layers": moe_layers, "moe_intermediate_size": moe_inter,
    }


def _window(cfg: dict[str, Any]) -> tuple[int | None, int | None]:
    """The sliding attention window in tokens and how many layers attend globally (None without a window)."""
    window = _whole(cfg, F.CONTEXT_TOKENS, "sliding_window") if _get(cfg, "sliding_window") else None
    layer_types = _get(cfg, "layer_types")
    if window and isinstance(layer_types, list):
        return window, sum(1 for t in layer_types if "sliding" not in str(t))
    if window and _get(cfg, "use_sliding_window", default=True) is False:
        return None, None
    return window, (0 if window else None)


def entry_from_hf_config(cfg: dict[str, Any], model_id: str, source: str, as_of: dt.date | None = None) -> dict[str, Any]:
    """A ``models`` catalog entry (plain dict, validated by the loader) from a parsed config.json."""
    if "text_config" in cfg and isinstance(cfg["text_config"], dict):
        cfg = {**cfg, **cfg["text_config"]}
    layers = _whole(cfg, F.LAYERS, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _whole(cfg, F.WIDTH, "hidden_size", "n_embd", "d_model")
    heads = _whole(cfg, F.HEADS, "num_attention_heads", "n_head")
    kv_heads = _whole(cfg, F.HEADS, "num_key_value_heads", "num_kv_heads", default=heads)
    head_dim = _whole(cfg, F.WIDTH, "head_dim", default=max(1, hidden // heads))
    vocab = _whole(cfg, F.VOCAB, "vocab_size", default=0)
    tied = bool(_get(cfg, "tie_word_embeddings", default=False))
    inter = _whole(cfg, F.WIDTH, "intermediate_size", "ffn_dim", default=4 * hidden)

    attn, head_dim, kv_lora, rope_dim = _attention(cfg, hidden, heads, kv_heads, head_dim)
    attention = "mla" if kv_lora else "gqa"
    mlp_total, mlp_active, moe = _mlp(cfg, layers, hidden, inter)
    embed = vocab * hidden * (1 if tied else 2)
    total = embed + layers * attn + mlp_total
    active = embed + layers * attn + mlp_active

    for what, n in (("total", total), ("active", active)):
        if not F.PARAMS.contains(float(n)):
            raise InputError(f"config.json: the architecture gives {float(n):.3g} {what} parameters; a model must "
                             f"have {F.PARAMS.describe()} ({F.PARAMS.reason})")
    window, n_global = _window(cfg)
    context = _whole(cfg, F.CONTEXT_TOKENS, "max_position_embeddings") if _get(cfg, "max_position_embeddings") else None
    return {
        "id": model_id,
        "name": str(_get(cfg, "_name_or_path", default=model_id)),
        "hf_repo": _get(cfg, "_name_or_path"),
        "num_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": heads if attention == "mla" else kv_heads,
        "head_dim": head_dim,
        "attention": attention,
        "sliding_window_tokens": window,
        "num_global_layers": n_global,
        "kv_lora_rank": kv_lora,
        "qk_rope_head_dim": rope_dim,
        "moe": moe,
        "total_params": float(total),
        "active_params": float(active),
        "max_context_tokens": context,
        "source": source,
        "as_of": (as_of or dt.date.today()).isoformat(),
        "notes": "imported from config.json; parameter counts computed from the architecture",
    }
