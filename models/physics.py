"""Physical parameters of the ``default`` preset beyond the first-order roofline, in one place.

Every number the ``default`` preset uses for communication, fixed and per-sequence overheads,
kernel efficiencies, the paged KV cache, the engines' prefill scheduling and the sequence cap
lives in :data:`DEFAULT_PHYSICS`, with the reason for its value next to it. The values marked
*fitted* were fitted once, all together, to 1,022 of the 1,025 rows of
``../shared/reference/measurements/silicon-train.csv`` and ``inferencemax-train.csv`` that the
planner would run (59 configuration groups; robust least squares on the relative error of TPOT
and on log TTFT, script ``benchmarks/fit_physics.py``), and judged by leaving out configuration
groups, TP degrees, GPUs and engines (``--cv``); no value is per model, only the engines'
scheduling figures and one engine release's prefix-cache share are per engine, and only the
bandwidth efficiency is per AMD family. The 3 rows left out of the fit report a TPOT shorter
than reading their step's bytes at the datasheet bandwidth (two gpt-oss-120b rows at batch 512
and a Qwen3-32B row): those runs did not hold the batch they name. `fleetplan calibrate` fits a scale on top of
these values from the user's own measurements.

Units are SI base units with the unit in the field name (seconds, bytes, bytes/s).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FamilyPhysics:
    """Per-GPU-family figures: how close decode kernels get to the datasheet, and fixed costs.

    ``bandwidth_efficiency``: share of datasheet HBM bandwidth that decode kernels (weight
    GEMV/GEMM and paged attention) sustain over a whole step.
    ``step_overhead_s``: fixed time per decode step outside the layers (scheduling, input
    preparation, sampling, launching the captured graph).
    ``layer_overhead_s``: fixed time per transformer layer per step (ramp-up and tail of the
    dozen kernels a layer launches; it does not shrink with tensor parallelism, so it weighs
    more as each GPU's share of the weights gets smaller).
    ``collective_latency_s``: fixed cost of one collective (launch, synchronisation); a small
    all-reduce over NVLink is one-shot (every GPU reads its peers' buffers at once, or NVLink
    SHARP multimem), so it costs about this whatever the TP degree.
    ``hop_latency_s``: added per ring step of a collective (zero where small all-reduces are
    one-shot; PCIe and xGMI rings keep a per-step cost).
    """

    family: str
    bandwidth_efficiency: float
    step_overhead_s: float
    layer_overhead_s: float
    collective_latency_s: float
    hop_latency_s: float


@dataclass(frozen=True)
class EnginePhysics:
    """How a serving engine schedules prefill under continuous batching.

    ``prefill_before_first_token``: share of the prompts of the requests admitted with a
    request (a closed-loop benchmark at concurrency B admits them in waves) that the engine
    prefills before that request's first token. The rest is prefilled in chunks inside the
    request's decode steps, so it lands in its time per output token. A prefill-first
    scheduler (SGLang) holds a larger share than one that mixes chunks into decode batches. It is
    the share where prefill takes little of a request's cycle; ``Physics.busy_share_exponent``
    lowers it as prefill takes more.
    ``chunk_tokens``: prompt tokens prefilled per engine step (chunked-prefill budget:
    vLLM ``max_num_batched_tokens``, SGLang ``chunked_prefill_size``, TensorRT-LLM
    ``max_num_tokens``; 8,192 is the default of all three on H100-class GPUs).
    ``admission_latency_s``: the engine's own time from a request's arrival to its admission and
    from its first token to the client (its HTTP server, tokeniser and scheduler); None: the
    physics' :attr:`Physics.admission_latency_s`.
    ``kv_page_tokens``: tokens per page of the engine's paged KV cache; its attention kernels
    read each sequence's cache in whole pages and pay a fixed cost per page
    (:attr:`Physics.kv_page_overhead`, :func:`fleetplan.models.roofline.kv_page_factor`).
    """

    engine: str
    prefill_before_first_token: float
    chunk_tokens: int
    admission_latency_s: float | None = None
    kv_page_tokens: int = 16


def release_matches(version: str, release: str) -> bool:
    """Whether engine ``version`` is ``release`` or a release it starts (``0.12`` matches ``0.12.0``)."""
    return bool(version) and (version == release or version.startswith(release + "."))


@dataclass(frozen=True)
class Physics:
    """Everything the ``default`` preset adds to the roofline, with engine-level defaults.

    ``sequence_overhead_s``: host seconds per running sequence per decode step.
    ``kv_page_overhead``: fixed cost of one KV page an attention kernel reads, in tokens' worth of
    reading: a page of P tokens costs (P + this) tokens' bytes at the KV bandwidth
    (:func:`fleetplan.models.roofline.kv_page_factor`).
    ``bf16_work_share``: share of a decode step's or a prompt's compute work that runs at the bf16
    rate whatever the weights' precision (FP8 and FP4 tensor cores speed up the weight GEMMs
    only; :func:`fleetplan.models.roofline.usable_flop_rate`).
    ``expert_parallel_busiest``: with expert parallelism the step waits for the GPU holding the
    most touched experts (:func:`fleetplan.models.moe.busiest_expert_share`).
    ``prefill_communication``: the tokens a step or a prefill processes are all-reduced.
    ``busy_share_exponent``: how fast the share of a benchmark's other prompts ahead of a
    request falls as prefill takes more of the engine's time (see
    :func:`fleetplan.models.interference.share_before_first_token`); 0 keeps each engine's share.
    ``benchmark_prefix_cache``: (engine, release, share of each prompt served from the prefix
    cache) of measured benchmark runs; ``benchmark_speculation``: (engine, release, model id
    prefix, drafted tokens per step, accepted tokens per step) of runs that decode speculatively;
    ``benchmark_release_shares``: (engine, release, share) of releases whose scheduler prefilled
    another share of a benchmark's other prompts before a request's first token than the
    engine's :attr:`EnginePhysics.prefill_before_first_token`; ``benchmark_kv_cache``: (engine,
    weight precisions, KV-cache precision) an engine's runs of quantised checkpoints hold their
    cache at; ``whole_context_admission``: engines that admit a request only with cache room for
    its whole context; ``kv_cache_of_free_memory``: (engine, share) of engines whose cache takes
    that share of the memory the weights leave free, not a share of the whole memory. All six
    describe how measurements were taken, for ``validate``; the planner uses none of them.

    Closed-loop TTFT (``validate`` only): ``length_drift_cycles``: the cycles of drift over which a
    benchmark harness that draws lengths from a range spreads a wave's arrivals (see
    :func:`fleetplan.models.interference.wave_share`); ``attention_dp_balance_steps``: (engine,
    steps) of engines that hold a new request until every attention data-parallel rank has one to
    prefill, or that many decode steps have passed; ``first_token_steps``: decode steps of the
    running batch a request waits between its arrival and its first token besides those that carry
    its prefill (the step running when it arrives, the step that returns the first token).
    """

    families: tuple[FamilyPhysics, ...]
    fallback: FamilyPhysics
    comm_bandwidth_efficiency: float
    activation_bytes: float
    allreduces_per_layer: int
    kv_block_tokens: int
    max_num_seqs: int
    engines: tuple[EnginePhysics, ...] = ()
    engine_fallback: EnginePhysics = EnginePhysics("any", 0.5, 8192)
    kv_bandwidth_efficiency: float = 1.0
    moe_small_group_tokens: float = 0.0
    weight_only_fp4_dequant_factor: float = 1.0
    weight_only_fp4_layer_s: float = 0.0
    kv_page_overhead: float = 0.0
    bf16_work_share: float = 0.0
    expert_parallel_busiest: bool = False
    admission_latency_s: float = 0.0
    sequence_overhead_s: float = 0.0
    prefill_communication: bool = False
    busy_share_exponent: float = 0.0
    benchmark_prefix_cache: tuple[tuple[str, str, float], ...] = ()
    benchmark_speculation: tuple[tuple[str, str, str, int, float], ...] = ()
    benchmark_release_shares: tuple[tuple[str, str, float], ...] = ()
    benchmark_kv_cache: tuple[tuple[str, tuple[str, ...], str], ...] = ()
    whole_context_admission: tuple[str, ...] = ()
    kv_cache_of_free_memory: tuple[tuple[str, float], ...] = ()
    length_drift_cycles: float = 1.0
    attention_dp_balance_steps: tuple[tuple[str, float], ...] = ()
    first_token_steps: float = 0.0

    def balance_steps(self, engine: str | None) -> float:
        """Decode steps ``engine`` (normalised) holds a new request at most so that every attention
        data-parallel rank gets one to prefill: its :attr:`attention_dp_balance_steps` entry, else 0."""
        for name, steps in self.attention_dp_balance_steps:
            if name == engine:
                return steps
        return 0.0

    def benchmark_kv_cache_precision(self, engine: str | None, precision: str) -> str | None:
        """KV-cache precision ``engine`` (normalised) allocates in benchmark runs of ``precision``
        weights: the :attr:`benchmark_kv_cache` entry that matches, else None (the row's own)."""
        for name, weights, kv in self.benchmark_kv_cache:
            if name == engine and precision in weights:
                return kv
        return None

    def kv_free_share(self, engine: str | None) -> float | None:
        """Share of the memory the weights leave free that ``engine`` (normalised) gives its cache
        (:attr:`kv_cache_of_free_memory`), or None where its budget is a share of the whole memory."""
        return next((share for name, share in self.kv_cache_of_free_memory if name == engine), None)

    def benchmark_hit_rate(self, engine: str | None, version: str) -> float:
        """Share of a closed-loop benchmark's prompt tokens served from the prefix cache in runs
        of ``engine`` (normalised) at ``version``: the :attr:`benchmark_prefix_cache` entry whose
        engine matches and whose version is ``version`` or a release it starts (``0.12`` matches
        ``0.12.0``), 0 for every other run."""
        for name, release, rate in self.benchmark_prefix_cache:
            if name == engine and release_matches(version, release):
                return rate
        return 0.0

    def benchmark_speculative(self, engine: str | None, version: str, model: str) -> tuple[int, float]:
        """(draft tokens per step, accepted tokens per step) of benchmark runs of ``model`` with
        ``engine`` (normalised) at ``version``: the :attr:`benchmark_speculation` entry (engine,
        release, model family prefix, draft tokens, accepted tokens) that matches, else (0, 1.0),
        plain decoding."""
        for name, release, family, draft, accepted in self.benchmark_speculation:
            if name == engine and release_matches(version, release) and model.startswith(family):
                return draft, accepted
        return 0, 1.0

    def prefill_before_first_token(self, engine: str | None, version: str = "") -> float:
        """Share of a closed-loop benchmark's other prompts that ``engine`` (normalised) at
        ``version`` prefills before a request's first token: the :attr:`benchmark_release_shares`
        entry whose engine matches and whose version is ``version`` or a release it starts, else
        the engine's own share (the fallback's for None or an unknown engine)."""
        for name, release, share in self.benchmark_release_shares:
            if name == engine and release_matches(version, release):
                return share
        return self.engine(engine).prefill_before_first_token

    def family(self, name: str) -> FamilyPhysics:
        """The figures of GPU family ``name``, or the generic fallback for an unknown family."""
        for f in self.families:
            if f.family == name:
                return f
        return self.fallback

    def engine(self, name: str | None) -> EnginePhysics:
        """The scheduling figures of engine ``name`` (normalised), or the fallback for None or
        an engine not listed (the planner, which does not know the engine, gets the fallback)."""
        for e in self.engines:
            if e.engine == name:
                return e
        return self.engine_fallback


# Fitted NVIDIA figures (hopper, blackwell; ampere shares them): see the module docstring.
# Bandwidth efficiency reached 0.90, the bound the fit allows (streaming kernels reach 85-90%
# of datasheet bandwidth in microbenchmarks); the per-layer cost of 59.4 us (kernel ramp and tail
# of a layer's dozen kernels, norms, rotary embedding, routing) and the host's work per sequence
# (``sequence_overhead_s``; the fixed part per step fitted to zero) explain why small per-GPU
# shards run far below the roofline; a one-shot all-reduce costs 2.45 us of latency whatever the
# TP degree (no per-hop cost; near the fit's lower bound of 2 us, an NVLink round trip and a
# kernel's launch), its bytes at the link's effective bandwidth on top.
_NVIDIA = (0.90, 0.0, 59.4e-6, 2.45e-6, 0.0)

DEFAULT_PHYSICS = Physics(
    families=(
        FamilyPhysics("ampere", *_NVIDIA),
        FamilyPhysics("hopper", *_NVIDIA),
        FamilyPhysics("blackwell", *_NVIDIA),
        # Not fitted (no measured rows): Ada (L4, L40S) has GDDR and no NVLink, so its
        # collectives run as rings over PCIe with a per-step cost (TP > 1 is outside its
        # scale-up domain anyway); overheads as for the other NVIDIA parts.
        FamilyPhysics("ada", 0.80, 0.38e-3, 64e-6, 15e-6, 5.0e-6),
        # AMD CDNA3 (MI300X, MI325X) and CDNA4 (MI355X): the bandwidth efficiency fitted per family
        # on inferencemax-train.csv (MI300X: DeepSeek-R1 FP8 with SGLang at TP 8, 15 rows, 0.586;
        # MI355X: the same and gpt-oss-120b MXFP4 with ATOM at TP 1, 29 rows, 0.90, the bound);
        # the fixed costs per step and per layer are NVIDIA's (fitted with their own per-layer cost,
        # MI300X took 181 us and MI355X 0, each standing in for its engine and model, and with
        # MI355X left out MoE TPOT within 1.5x fell from 90.3% to 87.2%). Not fitted (no
        # measurement isolates them): RCCL all-reduce over xGMI has a higher fixed latency and
        # each peer link is only 64 GB/s one way, hence a per-hop latency.
        FamilyPhysics("cdna3", 0.586, 0.0, 59.4e-6, 15e-6, 5.0e-6),
        FamilyPhysics("cdna4", 0.90, 0.0, 59.4e-6, 15e-6, 5.0e-6),
    ),
    # Unknown families (user catalogs) get conservative mid-range fixed costs, and the bandwidth
    # efficiency of an average measured GPU: the mean over the five GPUs the fit's rows measure,
    # each counted once (B200, H100, H200 and MI355X at 0.90, MI300X at 0.586: 0.837). A family's
    # efficiency does not follow its vendor: CDNA4 reaches 0.90 where CDNA3 reaches 0.586, so
    # MI355X held out and predicted with CDNA3's figure is off by 52.2% TPOT MAPE, with this mean
    # by 27.7% (33.5% with the 0.75 this replaces; `benchmarks/fit_physics.py --cv`, GPU held out).
    fallback=FamilyPhysics("other", 0.837, 0.8e-3, 64e-6, 12e-6, 4.0e-6),
    # Fitted (all 780 rows above the bandwidth floor, see the module docstring): the all-reduces of
    # a step that carries prompt tokens move 1-50 MB per call, where NCCL reaches about half of the
    # one-direction link bandwidth (70% only for messages of hundreds of MB), and they share the
    # GPUs' memory and SMs with the step's GEMMs: 0.398 of the scale-up bandwidth.
    comm_bandwidth_efficiency=0.398,
    # Activations exchanged by tensor-parallel all-reduces are bf16 whatever the weights.
    activation_bytes=2.0,
    # Megatron-style tensor parallelism: one all-reduce after attention, one after the MLP.
    allreduces_per_layer=2,
    # vLLM's default KV block is 16 tokens (SGLang pages of 1, TensorRT-LLM 32-64): every
    # sequence's cache is rounded up to whole blocks.
    kv_block_tokens=16,
    # Engines cap concurrent sequences per instance (vLLM max_num_seqs, TensorRT-LLM
    # max_batch_size, SGLang max_running_requests); 1024 is the largest default among them.
    max_num_seqs=1024,
    # Fitted, per engine: the share of a wave's other prompts prefilled before a request's first
    # token (the rest lands in its time per output token), and the engine's fixed latency per
    # request (its HTTP server, tokeniser, scheduler and detokeniser). The three engines' current
    # releases hold about the same share (SGLang 0.137, TensorRT-LLM 0.118, vLLM 0.107); SGLang
    # has the longest fixed latency (123 ms; 178 ms before InferenceMAX's SGLang runs waited for the
    # scheduler's poll, 223 ms before the decode steps without prefill were
    # apart, ``first_token_steps``: small-batch, short-prompt SGLang TTFTs are 260-610 ms where the
    # prefill is 19-35 ms), TensorRT-LLM 70 ms (87) and vLLM 21 ms (33; its 1,024-token TTFTs at
    # batch 4 are 30-137 ms). One latency shared by the three engines (81 ms) left vLLM's short
    # TTFTs 1.5-3x over and SGLang's under; per engine, dense TTFT within 1.5x held out by
    # configuration group rose from 56% to 60-61%. SGLang 0.5.1 held far more of a wave before a
    # first token (``benchmark_release_shares`` below).
    # AMD's ATOM (gpt-oss-120b on one MI355X, 14 rows of inferencemax-train.csv) prefills almost
    # none of a wave before a request's first token (0, the bound) and answers in 15 ms (39).
    # KV page sizes in tokens, each engine's default: SGLang's ``page_size`` 1 (its radix cache
    # indexes single tokens), vLLM's ``block_size`` 16, ATOM (derived from vLLM) 16, TensorRT-LLM's
    # ``tokens_per_block`` 32.
    engines=(
        EnginePhysics("atom", 0.0, 8192, 0.0148, 16),
        EnginePhysics("sglang", 0.137, 8192, 0.123, 1),
        EnginePhysics("trtllm", 0.118, 8192, 0.0695, 32),
        EnginePhysics("vllm", 0.107, 8192, 0.0207, 16),
    ),
    # An unknown engine (and the planner, which plans no particular one) gets the engines' mean
    # share; an unknown engine their mean latency (57.0 ms), the planner ``admission_latency_s``
    # below; its KV pages are vLLM's 16 tokens, the most common default.
    engine_fallback=EnginePhysics("any", 0.0905, 8192, 0.0570, 16),
    # Fitted, at the bound the fit allows (1 / 0.90: the datasheet bandwidth): paged attention
    # streams the KV cache at full bandwidth, faster than the weight GEMMs at small batch.
    kv_bandwidth_efficiency=1.11,
    # Fitted: a grouped GEMM whose experts each get few tokens does not stream an expert's weights
    # at full rate; reading a touched expert costs (1 + 0.610 / tokens per touched expert) times
    # its bytes (about 1.6x at one token per expert, nothing once experts get dozens). It was
    # 0.40 while the speculative DeepSeek runs (below) were read as plain steps and pulled it down.
    moe_small_group_tokens=0.610,
    # Fitted on gpt-oss-120b (MXFP4 weights) on H100/H200, which have no FP4 tensor cores (6
    # configuration groups, 118 rows): unpacking the weights to bf16 costs a fixed 38.6 us per layer
    # per step (the MoE kernels' dequantising passes and their launches), not a slower read of
    # the bytes: fitted alone, a read 1.46x slower left gpt-oss on Hopper 1.2-1.7x under at small
    # batches, where a step reads few experts; with the fixed time the read factor fits to 1 (no
    # slowdown) and MoE TPOT MAPE held out by configuration group falls from 23.1% to 20.2%.
    weight_only_fp4_dequant_factor=1.0,
    weight_only_fp4_layer_s=38.6e-6,
    # Fitted: the attention kernels read each sequence's KV cache in whole pages of its engine
    # (``EnginePhysics.kv_page_tokens``) and pay a fixed cost per page, worth 0.349 tokens of
    # reading (the page table lookup, a page's partial tiles, the split-K reduction over pages):
    # SGLang's one-token pages pay 35% on their KV read, vLLM's 16-token blocks 2.2%, TensorRT-LLM's
    # 32-token blocks 1.1% (0.377 before the bf16 work share was fitted). Fitted with every other value (all 1,022 rows), held out four ways
    # (fit_physics.py --cv --iterations 12, against the same run without it) the worst dense TPOT
    # MAPE fell from 14.5% to 13.9%, by configuration group from 11.3% to 10.8%, and the worst MoE
    # from 17.9% to 17.8%.
    kv_page_overhead=0.349,
    # Fitted: FP8 and FP4 tensor cores double or quadruple the weight GEMMs' rate, but not the rest
    # of a step's or a prompt's compute: attention's matrix products (FlashAttention takes bf16
    # queries, keys and values in the engines' default kernels), norms, rotary embedding, the
    # activations' quantisation and the MoE router run at the bf16 rate. That share s of the work
    # makes FP8 reach 1 / (s + (1 - s) / 2) of its datasheet rate's advantage, FP4 1 / (s + (1 - s)
    # / 4) (Amdahl's law, ``roofline.usable_flop_rate``). One figure for every GPU, engine and model:
    # a held-out GPU or engine keeps it. Without it the prefill efficiency was a compromise between
    # the BF16 rows (Llama-3.1-8B and Qwen3-32B on H100, the prefill-heavy 128-512-token outputs,
    # which wanted it higher) and the FP8 and FP4 rows (which wanted it lower), and a fold that left
    # out H100 or an engine moved it and the busy-share exponent far from the full fit.
    bf16_work_share=0.118,
    # Time from a request's arrival to its first token beyond its prefill and chunk steps that the
    # planner, which names no engine, pays (HTTP, tokenisation, scheduling, detokenisation): the
    # mean of the four engines' fixed latencies as fitted without the decode steps without prefill
    # (``first_token_steps``), which are inside it, since the planner's colocated TTFT has no such
    # steps of its own. An engine the physics does not know pays the mean of today's four (the
    # fallback's figure) and the steps.
    admission_latency_s=0.0955,
    # Fitted: host work per running sequence per decode step (input preparation, sampling,
    # detokenisation, the scheduler's bookkeeping): 12.5 us, which no GPU parallelism shortens, so
    # TP 8 at batch 128 and more runs well below its roofline.
    sequence_overhead_s=12.5e-6,
    # The prompt tokens a decode step prefills are all-reduced with its decode tokens (one message
    # of batch + prefill tokens per all-reduce), and a prefill's service time pays its own.
    prefill_communication=True,
    # Fitted: the share of a closed-loop benchmark's other prompts ahead of a request falls as
    # (1 - rho)^gamma with the share rho of the cycle its engine spends prefilling (where prefill
    # is most of the cycle, a wave's first tokens spread over it). Fitted alone with one fixed
    # latency for all engines gamma was 0.46; with each engine's own latency the fit left it
    # nothing (0.01, then 0) while SGLang 0.5.1's runs pulled SGLang's share up to 0.26; with that
    # release's own share it is 0.383, 0.218 fitted with inferencemax-train.csv too, 0.292 with
    # the KV pages' cost (``kv_page_overhead``) and 0.336 with the bf16 work share.
    busy_share_exponent=0.336,
    # Fitted on the 20 vLLM 0.12.0 rows of silicon-train (Llama-3.1-8B FP8 on H200 at TP 1, 2, 4;
    # Qwen3-32B FP8 on H100 at TP 2): at 100 output tokens they go through their prompts faster
    # than the GPUs' peak FLOPs allow (Llama-3.1-8B at TP 1, batch 112, 1,000-token prompts: a
    # cycle of 1.19 s holds 112 prefills, 1.8 PFLOP, 0.9 s at 100% of an H200's FP8 rate, and 100
    # decode steps), and both their TPOT and TTFT stay 2-3x below a full prefill's. Those runs served
    # most of each prompt from vLLM's prefix cache (on by default; the benchmark's prompts repeat).
    # The other vLLM releases measured (0.11.2, 0.15.1, 0.18.0 and the unversioned Llama-3.1-70B
    # runs) and every SGLang and TensorRT-LLM run pay their whole prefill. A measurement file can
    # give each row's share in its own ``prefix_cache_hit_rate`` column instead.
    benchmark_prefix_cache=(("vllm", "0.12", 0.806),),
    # DeepSeek-V3/R1 runs of TensorRT-LLM 1.2.0rc6.post3 decode speculatively with the models'
    # multi-token-prediction (MTP) layer. The same configurations measured with 1.2.0rc6.post2 run
    # 1.3-2.3x slower per token, most at small batch (FP8, 8 B200, batch 4, 1,024/8,192 tokens:
    # 10.1 ms against 4.4 ms) and least at batch 128 (27.0 against 20.5 ms), where the steps turn
    # compute-bound, as speculative decoding predicts (verifying a drafted token costs little
    # while a step reads weights and nearly doubles a compute-bound one). One drafted token (the MTP
    # layer run once) fits 1.82 accepted tokens per step (1.92 on silicon-train.csv alone), what
    # DeepSeek-V3's report gives for its MTP (85-90% of second tokens accepted; arXiv 2412.19437,
    # sec. 5.4.3); two or three drafted
    # tokens fit 2.19 and 2.41 with a slightly worse fit. MoE TPOT MAPE held out by configuration
    # group falls from 20.2% to 14.4%. A measurement file can give each row's own
    # ``draft_tokens`` and ``accepted_tokens_per_step`` instead.
    benchmark_speculation=(("trtllm", "1.2.0rc6.post3", "deepseek", 1, 1.82),),
    # SGLang 0.5.1 (Qwen3-32B BF16 on 4 H100s, 1,024-4,096-token prompts, 128-512 output tokens, 27
    # rows: the only 0.5.1 runs of silicon-train) prefilled most of a wave before a request's first
    # token: fitted 0.623 of the other prompts, 4.5 times the 0.137 of SGLang 0.5.6 and 0.5.9.
    # With SGLang's one share its TPOT was over-predicted on every row (0.76-0.95x) and its TTFT
    # under-predicted (1.3-1.8x at batch 64 and 128), the two errors pointing the same way; and the
    # 0.5.1 rows pulled SGLang's share to 0.26, under-predicting 0.5.6's TPOT at 100 output tokens
    # (1.5-1.7x) and over-predicting its TTFT (2x). Fitted with this rule, held out by configuration
    # group: dense TPOT MAPE 11.4% -> 11.1% (within 1.5x 96.6% -> 97.4%), dense TTFT within 1.5x
    # 61.4% -> 63.6% (all rows 62.5% -> 65.1%), the 0.5.1 rows held out at SGLang's share.
    benchmark_release_shares=(("sglang", "0.5.1", 0.623),),
    # TensorRT-LLM's quantised checkpoints (FP8, NVFP4) carry an FP8 KV-cache recipe, so its runs
    # hold twice the sequences of a BF16 cache in the memory left by the weights: read so for the
    # running batch of a benchmark whose concurrency the cache cannot hold (validate), not for the
    # bytes a step reads (a step reading FP8 KV was tried and made TPOT worse held out). With the
    # whole-context admission below it changes the running batch of TensorRT-LLM's rows that the
    # cache cannot all hold (Llama-3.1-70B FP4 on one B200 at concurrency 128 with 8,192-token
    # prompts: 88 running, not 46; measured TPOT 62.6 ms and TTFT 22.8 s, a queue, predicted 59.0 ms
    # and 31.1 s, 35.5 ms and 69 s before). Held out four ways (fit_physics.py --cv), the worst
    # figures: dense TPOT MAPE 15.2% -> 15.1%, within 1.5x 96.3% -> 96.7%, TTFT within 1.5x 57.9%
    # -> 58.9%; MoE 18.5% -> 18.3%, 90.3% -> 91.1%, 41.3% -> 41.3%. FP8 without whole-context
    # admission ran two 1,024/8,192-token rows at a batch their measured TPOT is below the
    # bandwidth floor of (they queued: 67 s TTFT) and made dense TPOT MAPE held out by engine worse
    # (15.6%).
    benchmark_kv_cache=(("trtllm", ("fp8", "fp4"), "fp8"),),
    # TensorRT-LLM's default capacity scheduler (GUARANTEED_NO_EVICT) admits a request only with
    # cache blocks for its whole context, prompt and every output token; vLLM and SGLang allocate
    # blocks as a sequence grows (and preempt when they run out), so their running sequences hold
    # their prompt and half their output on average.
    whole_context_admission=("trtllm",),
    # TensorRT-LLM gives its KV cache KvCacheConfig.free_gpu_memory_fraction, default 0.9, of the GPU
    # memory free once the weights are loaded (nvidia.github.io/TensorRT-LLM examples/kvcacheconfig
    # and llm-api reference KvCacheConfig, read 2026-12-07); vLLM's gpu_memory_utilization (0.9) and
    # SGLang's mem_fraction_static are shares of the whole memory. For DeepSeek-V3 FP8 on 4 B200
    # (671 GB of weights in 769 GB) that is 88 GB of cache, not the 20 GB of 0.9 x 769 GB - 671 GB.
    kv_cache_of_free_memory=(("trtllm", 0.9),),
    # Closed-loop TTFT by benchmark harness (validate only; catalogs/data/benchmark_harnesses.yaml
    # says how each harness's clients arrive), fitted with the TTFT-only fit
    # (``fit_physics.py --ttft-only``: these with the engines' fixed latencies and the first-token
    # steps below, every other value held) on both files.
    # The cycles of drift over which InferenceMAX's length range (0.8-1.0 of the stated lengths)
    # spreads a wave's arrivals: 0.924 (0.750 before InferenceMAX's SGLang poll interval, 0.628 before the
    # first-token steps, 0.530 before the bf16
    # work share, 0.474 before the KV pages' cost was fitted). Five cycles (what its median request
    # has run, every wave
    # spread past its prefill) left InferenceMAX's TTFT within 1.5x in sample lower (58.2% against
    # 62.4%, latencies refitted with a harness factor): the fit keeps part of each wave, which
    # SGLang's DeepSeek-R1 runs on B200 show (TTFT 145 -> 583 ms from 4 to 64 clients at
    # 1,024/1,024 tokens) while its MI355X runs do not (104 -> 116 ms).
    length_drift_cycles=0.924,
    # TensorRT-LLM's attention data-parallel runs of gpt-oss-120b on B200 (DP 2 and 4, 20 rows of
    # inferencemax-train.csv; InferenceMAX sets attention_dp_config enable_balance with
    # timeout_iters 60): their TTFT is 70-160 ms above the same runs without attention DP at any
    # concurrency (101-180 ms against 30-45 ms at 1,024-token prompts), the balancer holding a new
    # context request until every rank has one or, fitted, 12.1 decode steps pass (11.9 before
    # InferenceMAX's SGLang poll, 10.0 before the first-token steps).
    attention_dp_balance_steps=(("trtllm", 12.1),),
    # A closed-loop request also waits whole decode steps of the running batch that carry none of its
    # prefill: the step running when it arrives and the step whose output returns its first token
    # (an engine that overlaps scheduling with the GPU emits a step's tokens one step later). Fitted
    # with the TTFT-only fit: 2.21 steps, with the engines' fixed latencies refitted beside it
    # (SGLang 223 -> 123 ms, TensorRT-LLM 87 -> 70 ms, vLLM 33 -> 21 ms, ATOM 39 -> 15 ms, with
    # InferenceMAX's SGLang runs waiting for the scheduler's poll, ``recv_interval_steps`` of the
    # harness catalog's server recipes). A step
    # is 3-5 ms for gpt-oss-120b on vLLM and 15-40 ms for DeepSeek on SGLang, so what was an
    # engine's constant scales with the model it runs: held out four ways (TTFT-only fit, the
    # TPOT side unchanged) the worst TTFT within 1.5x moved dense 57.7% -> 58.1%, MoE 44.1% -> 47.6%
    # (SGLang held out 20.7% -> 27.5%). Validate only: the planner's colocated TTFT counts its
    # own steps and the fallback latency.
    first_token_steps=2.21,
    # Not fitted (a rule, no parameter): with expert parallelism a GPU holds E / ep whole experts and
    # reads only the touched ones, so a step waits for the GPU that holds the most
    # (``moe.busiest_expert_share``: 1.69x the mean for gpt-oss-120b at EP 8 and batch 8, 1.13x at EP 2,
    # nothing once every expert is touched). Its rows, the 45 EP rows of both files, in sample
    # (median measured / predicted before -> after): gpt-oss-120b with TensorRT-LLM on H200 at TP 4 /
    # EP 2 1.32 -> 1.30 and TP 8 / EP 8 1.16 -> 1.06, on B200 with attention-DP at EP 2 1.25 -> 1.25
    # and EP 4 1.65 -> 1.63 (their slowness is mostly elsewhere); DeepSeek-R1 FP4 on 4 B200 at EP 4
    # with SGLang 1.04 -> 1.00, with TensorRT-LLM 0.94 -> 0.88. Held out four ways
    # (fit_physics.py --cv --iterations 12), the worst MoE figures moved 18.1% / 92.4% / 41.3% ->
    # 17.9% / 92.9% / 41.4% (TPOT MAPE / within 1.5x / TTFT within 1.5x), dense 15.1% / 96.7% / 58.9%
    # -> 15.1% / 96.7% / 58.5%; the other values were not refitted with it (a refit moves them by
    # under 5% and MoE in sample from 14.3% to 14.2%).
    expert_parallel_busiest=True,
)


# Queueing allowance on time to first token when a product sets no ``max_ttft_ms``: the plan keeps
# every queue a request waits in (a prefill pool's replicas, a colocated replica's decode steps)
# at a utilisation where the modelled TTFT is at most this multiple of its zero-load value. For
# the M/D/1 queue of :mod:`fleetplan.models.ttft` a multiple of 3 is a utilisation of 0.8, the
# usual ceiling for latency-sensitive serving at peak: above it the wait grows steeply (5.5x the
# service time at 0.9, 10.5x at 0.95, unbounded at 1), so a few percent more demand than forecast
# would multiply TTFT, while below it each extra replica buys little latency (2x at 0.67).
DEFAULT_TTFT_QUEUE_MULTIPLE: float = 3.0

# A modelled TTFT above this is called out in the plan's explanation even when it meets every
# target: interactive users abandon requests that show nothing for about ten seconds.
TTFT_WARNING_S: float = 10.0
