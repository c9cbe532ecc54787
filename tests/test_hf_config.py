"""Importing a model from a local config.json: parameter counts and KV bytes match hand values."""

from __future__ import annotations

import json

import pytest

from fleetplan.catalogs import load_catalog
from fleetplan.catalogs.hf_config import entry_from_hf_config
from fleetplan.catalogs.schema import LLM
from fleetplan.main import main
from fleetplan.models.memory import kv_bytes_per_token

LLAMA_70B = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672,
    "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8, "vocab_size": 128256,
    "tie_word_embeddings": False, "max_position_embeddings": 131072,
}
MIXTRAL = {
    "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
}
DEEPSEEK_V3 = {
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_attention_heads": 128,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "vocab_size": 129280, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
}


def test_llama_70b_from_config():
    llm = LLM.model_validate(entry_from_hf_config(LLAMA_70B, "my-llama", source="test"))
    # embeddings 2 x 128256 x 8192 + 80 x (attention 151.0M + MLP 704.6M) = 70.55B
    assert llm.total_params == pytest.approx(70.55e9, rel=2e-3)
    assert llm.active_params == llm.total_params
    assert kv_bytes_per_token(llm, "bf16") == 327_680


def test_mixtral_moe_from_config():
    llm = LLM.model_validate(entry_from_hf_config(MIXTRAL, "my-mixtral", source="test"))
    assert llm.total_params == pytest.approx(46.7e9, rel=5e-3)
    assert llm.active_params == pytest.approx(12.9e9, rel=1e-2)
    assert llm.moe is not None and llm.moe.num_experts == 8 and llm.moe.num_moe_layers == 32


def test_deepseek_mla_from_config():
    llm = LLM.model_validate(entry_from_hf_config(DEEPSEEK_V3, "my-ds", source="test"))
    assert llm.attention == "mla"
    assert kv_bytes_per_token(llm, "bf16") == 70_272
    assert llm.total_params == pytest.approx(671e9, rel=1e-2)
    assert llm.active_params == pytest.approx(37e9, rel=3e-2)
    assert llm.moe is not None and llm.moe.num_moe_layers == 58


def test_add_model_cli_round_trip(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA_70B))
    out = tmp_path / "mine.yaml"
    assert main(["catalog", "add-model", str(cfg), "--id", "my-llama", "--out", str(out)]) == 0
    assert "my-llama" in load_catalog([out]).models
    code = main(["estimate", "--model", "my-llama", "--gpu", "h100-sxm", "--tp", "2", "--batch", "64", "--precision",
                 "fp8", "--input-tokens", "2000", "--output-tokens", "400", "--preset", "seed", "--json",
                 "--catalog", str(out)])
    assert code == 0
    d = json.loads(capsys.readouterr().out.splitlines()[-1] if False else capsys.readouterr().out.split("\n", 1)[1])
    assert d["memory_time_ms"] == pytest.approx(25.8, abs=0.1)


def test_add_model_bad_json_exit_2(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text("{not json")
    assert main(["catalog", "add-model", str(cfg), "--id", "x", "--out", str(tmp_path / "o.yaml")]) == 2
    assert "malformed JSON" in capsys.readouterr().err
    assert not (tmp_path / "o.yaml").exists()
