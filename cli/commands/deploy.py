"""``fleetplan deploy PLAN.json --engine vllm|sglang|trtllm [--k8s|--skypilot] [--out DIR]``.

Turns each replica set of a plan (a product's decode replicas, its prefill pool, a pooled
group's shared replicas) into the engine's launch command with the planned tensor parallelism,
batch cap, weight and KV-cache precision and context length, and optionally into Kubernetes
manifests (a Deployment per set; a LeaderWorkerSet when one replica spans several nodes) or a
SkyPilot service per set. Replica counts are the plan's: each set's busiest hour.

Engine flags are named as each engine documents them: vLLM ``vllm serve`` engine arguments,
SGLang ``python -m sglang.launch_server`` server arguments, TensorRT-LLM ``trtllm-serve``
options. FP4 weights need a checkpoint already quantized to FP4 (every engine reads the format
from the checkpoint), and TensorRT-LLM reads FP8 weights the same way; the command says so in
a comment.

A replica wider than a node runs one engine process per node, which meet at the replica's
first node: SGLang with ``--nnodes``, ``--node-rank`` and ``--dist-init-addr``; vLLM with
``--nnodes``, ``--node-rank`` and ``--master-addr`` (tensor and pipeline parallelism), or with
``--data-parallel-size-local``, ``--data-parallel-start-rank`` and ``--data-parallel-address``
when attention data-parallel ranks span the nodes, the other nodes ``--headless``. Every command
reads the node's rank and the first node's address from the shell variables ``NODE_RANK`` and
``LEADER_ADDRESS``: the launch script says to set them, a LeaderWorkerSet sets them from its
``LWS_WORKER_INDEX`` and ``LWS_LEADER_ADDRESS``, a SkyPilot service from ``SKYPILOT_NODE_RANK``
and ``SKYPILOT_NODE_IPS``. TensorRT-LLM starts a multi-node replica as one MPI job (``mpirun``
or ``srun`` over the nodes, running ``trtllm-llmapi-launch trtllm-serve``); its commands say so.

Names and values come from catalogs and plan files the user (or a download) wrote, so every
output is written by the rule of its kind (:mod:`fleetplan.rendering.escape`): each command word
single-quoted but the rendezvous variables this module builds, names in comments with control
characters escaped, YAML by the YAML emitter, Kubernetes names and the SkyPilot file names
derived to DNS labels (a hash when changed; the original in the ``fleetplan/name``
annotation), and each file written only directly inside ``--out``.
Owns this command; it computes nothing the plan does not hold."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml
from fleetplan.catalogs.loader import InputError
from fleetplan.rendering.escape import (
    ShellExpansion, dns_label, label_value, printable, shell_comment, shell_join, unique_names,
)
from fleetplan.models.layout import Layout

ENGINE_NAMES = ("vllm", "sglang", "trtllm")
PORT = 8000
# GPUs of one node when the plan does not buy instances: an HGX baseboard holds 8.
NODE_GPUS = 8
# Kubernetes device-plugin resource names per GPU vendor (NVIDIA and AMD device plugins).
GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
# The node label the manifests select on: set it on each node to the catalog id of its GPU (as a
# label value: the id itself when it is a valid one, as every shipped id is; see the manifest).
GPU_LABEL = "fleetplan/gpu"
# Annotations that keep the plan's own names of a set and of its GPU where the manifest had to derive them.
NAME_ANNOTATION, GPU_ANNOTATION = "fleetplan/name", "fleetplan/gpu"
# Each engine's published serving image (pin a release tag in production).
IMAGES = {"vllm": "vllm/vllm-openai:latest", "sglang": "lmsysorg/sglang:latest",
          "trtllm": "nvcr.io/nvidia/tensorrt-llm/release:latest"}
# Where the processes of a multi-node replica meet (SGLang's --dist-init-addr, vLLM's data-parallel RPC).
RENDEZVOUS_PORT = 20000
# Shell variables every multi-node command reads, and what sets them in each target.
NODE_RANK, LEADER = "NODE_RANK", "LEADER_ADDRESS"
LWS_ENV = f"{NODE_RANK}=$LWS_WORKER_INDEX; {LEADER}=$LWS_LEADER_ADDRESS;"
SKYPILOT_ENV = f'{NODE_RANK}=$SKYPILOT_NODE_RANK; {LEADER}=$(echo "$SKYPILOT_NODE_IPS" | head -n1);'
PRE_QUANTIZED = "weights: give a checkpoint already quantized to {precision} (the engine reads it from the checkpoint)"


@dataclass(frozen=True)
class ReplicaSet:
    """One group of identical replicas the plan runs: what a launch command and a manifest need."""

    name: str
    model: str
    repo: str
    gpu: str
    vendor: str
    tp: int
    batch: int | None
    precision: str
    kv_precision: str
    context_tokens: int
    replicas: int
    node_gpus: int
    role: str = "decode"  # "prefill" for a prefill pool; decode sets of a product with a pool are "decode-only"
    pp: int = 1  # pipeline stages
    ep: int = 1  # expert-parallel degree of MoE layers
    dp_attention: int = 1  # attention data-parallel ranks (each of ``tp`` GPUs)

    @property
    def gpus(self) -> int:
        """GPUs of one replica (:attr:`fleetplan.models.layout.Layout.gpus`)."""
        return Layout(self.tp, self.pp, self.ep, self.dp_attention).gpus

    @property
    def nodes(self) -> int:
        """Nodes one replica spans (1 when it fits in a node)."""
        return -(-self.gpus // self.node_gpus)


def _repo(model: Any) -> str:
    """The checkpoint an engine loads for ``model``: its ``hf_repo`` (else its id), refused when an
    engine would read it as a flag."""
    repo = model.hf_repo or model.id
    if str(repo).startswith("-"):
        raise InputError(f"model {printable(model.id)}: hf_repo '{printable(repo)}' begins with '-', which an engine "
                         "reads as a flag; give the checkpoint's repository id (org/name)")
    return repo


def _set(p: dict[str, Any], name: str, part: dict[str, Any], replicas: int, catalog: Any, node: dict[str, int],
         role: str) -> ReplicaSet:
    """A replica set named ``name`` of ``p``'s model on ``part``'s configuration, in ``role``."""
    model, gpu = catalog.models[p["model"]], catalog.gpus[part["gpu"]]
    return ReplicaSet(name=name, model=model.id, repo=_repo(model), gpu=gpu.id, vendor=gpu.vendor,
                      tp=part["tp"], batch=part.get("batch"), precision=part["precision"],
                      kv_precision=p.get("kv_precision") or "bf16", context_tokens=p["context_tokens"],
                      replicas=replicas, node_gpus=node.get(gpu.id) or gpu.node_gpus or NODE_GPUS, role=role,
                      pp=part.get("pp") or 1, ep=part.get("ep") or 1, dp_attention=part.get("dp_attention") or 1)


def _mix_sets(p: dict[str, Any], unit: str, catalog: Any, node: dict[str, int]) -> list[ReplicaSet]:
    """A request mix's decode replica sets, one per configuration (numbered in the plan's order),
    each sized for the longest request of the mix."""
    longest = {**p, "context_tokens": max(r["input_tokens"] + r["output_tokens"] for r in p["requests"])}
    return [_set(longest, f"{unit}-decode-{i}", c, c["replicas"], catalog, node,
                 "decode-only" if c["prefill_mode"] == "pool" else "decode")
            for i, c in enumerate(p["configurations"], start=1) if c["replicas"]]


def replica_sets(d: dict[str, Any], catalog: Any) -> list[ReplicaSet]:
    """Every replica set of plan ``d``: per product (or pooled group, once) its decode replicas
    and its prefill pool; products served only by an API have none."""
    node = {g: u["gpus_per_instance"] for g, u in (d.get("gpu_usage") or {}).items() if u.get("gpus_per_instance")}
    pools = {pool["name"]: pool for pool in d.get("pools") or []}
    out, done = [], set()
    for p in d["products"]:
        unit = p.get("pooled_in") or p["name"]
        if unit in done or not p["gpu"]:
            continue
        done.add(unit)
        pool = pools.get(unit)
        replicas = pool["replicas"] if pool else p["replicas"]
        prefill_replicas = pool["prefill_replicas"] if pool else p["prefill"]["replicas"]
        split = bool(p["prefill"]["gpu"] and prefill_replicas)
        if p.get("configurations"):
            out += _mix_sets(p, unit, catalog, node)
        elif replicas:
            out.append(_set(p, f"{unit}-decode", p, replicas, catalog, node, "decode-only" if split else "decode"))
        if split:
            prefill = {**p["prefill"], "batch": None}
            out.append(_set(p, f"{unit}-prefill", prefill, prefill_replicas, catalog, node, "prefill"))
    return out


def _var(name: str) -> ShellExpansion:
    """A shell variable, expanded where the command runs (:func:`fleetplan.rendering.escape.shell_join`)."""
    return ShellExpansion("$" + name)


def vllm_nodes(r: ReplicaSet, worker: bool) -> list[str]:
    """vLLM's flags for one node of a multi-node replica (nothing for a one-node replica)."""
    if r.nodes == 1:
        return []
    rank, leader = _var(NODE_RANK), _var(LEADER)
    if r.dp_attention > 1:  # data-parallel ranks spread over the nodes, the same number on each
        local = r.dp_attention // r.nodes
        out = ["--data-parallel-size-local", str(local), "--data-parallel-start-rank", ShellExpansion(f"$(({rank} * {local}))"),
               "--data-parallel-address", leader, "--data-parallel-rpc-port", str(RENDEZVOUS_PORT)]
    else:
        out = ["--nnodes", str(r.nodes), "--node-rank", rank, "--master-addr", leader]
    return out + (["--headless"] if worker else [])


def vllm_command(r: ReplicaSet, worker: bool = False) -> list[str]:
    """``vllm serve`` with the set's engine arguments (``worker``: a multi-node replica's other nodes)."""
    cmd = ["vllm", "serve", r.repo, "--tensor-parallel-size", str(r.tp), "--max-model-len", str(r.context_tokens),
           "--port", str(PORT)]
    cmd += ["--pipeline-parallel-size", str(r.pp)] if r.pp > 1 else []
    cmd += ["--data-parallel-size", str(r.dp_attention)] if r.dp_attention > 1 else []
    cmd += ["--enable-expert-parallel"] if r.ep > 1 else []  # experts over tp x data-parallel ranks
    if r.batch:
        cmd += ["--max-num-seqs", str(r.batch)]
    cmd += {"bf16": ["--dtype", "bfloat16"], "fp8": ["--quantization", "fp8"]}.get(r.precision, [])
    return cmd + ["--kv-cache-dtype", "fp8" if r.kv_precision == "fp8" else "auto"] + vllm_nodes(r, worker)


def sglang_command(r: ReplicaSet, worker: bool = False) -> list[str]:
    """``python -m sglang.launch_server`` with the set's server arguments."""
    # SGLang's --tp-size counts every GPU of a pipeline stage; attention DP splits it into ranks
    cmd = ["python", "-m", "sglang.launch_server", "--model-path", r.repo, "--tp-size", str(r.tp * r.dp_attention),
           "--context-length", str(r.context_tokens), "--host", "0.0.0.0", "--port", str(PORT)]
    cmd += ["--pp-size", str(r.pp)] if r.pp > 1 else []
    cmd += ["--dp-size", str(r.dp_attention), "--enable-dp-attention"] if r.dp_attention > 1 else []
    cmd += ["--ep-size", str(r.ep)] if r.ep > 1 else []
    if r.batch:
        cmd += ["--max-running-requests", str(r.batch)]
    cmd += {"bf16": ["--dtype", "bfloat16"], "fp8": ["--quantization", "fp8"]}.get(r.precision, [])
    cmd += {"prefill": ["--disaggregation-mode", "prefill"],
            "decode-only": ["--disaggregation-mode", "decode"]}.get(r.role, [])
    if r.nodes > 1:  # every node runs the same command; its rank tells it apart
        cmd += ["--nnodes", str(r.nodes), "--node-rank", _var(NODE_RANK),
                "--dist-init-addr", ShellExpansion(f"{_var(LEADER)}:{RENDEZVOUS_PORT}")]
    return cmd + ["--kv-cache-dtype", "fp8_e4m3" if r.kv_precision == "fp8" else "auto"]


def trtllm_command(r: ReplicaSet, worker: bool = False) -> list[str]:
    """``trtllm-serve`` (PyTorch backend) with the set's options; a multi-node replica is one MPI
    job started on its first node (``worker`` nodes only join it)."""
    # --tp_size counts every GPU of a pipeline stage (attention DP is an option of those ranks)
    cmd = ["trtllm-serve", r.repo, "--backend", "pytorch", "--tp_size", str(r.tp * r.dp_attention), "--max_seq_len",
           str(r.context_tokens), "--host", "0.0.0.0", "--port", str(PORT)]
    cmd += ["--pp_size", str(r.pp)] if r.pp > 1 else []
    cmd += ["--ep_size", str(r.ep)] if r.ep > 1 else []
    if r.batch:
        cmd += ["--max_batch_size", str(r.batch)]
    cmd += ["--kv_cache_dtype", "fp8" if r.kv_precision == "fp8" else "auto"]
    if r.nodes > 1:
        cmd = ["mpirun", "-np", str(r.gpus), "-npernode", str(r.node_gpus), "--host", _var("HOSTS"),
               "trtllm-llmapi-launch", *cmd]
    return cmd


ENGINES: dict[str, Callable[..., list[str]]] = {
    "vllm": vllm_command, "sglang": sglang_command, "trtllm": trtllm_command,
}


def pre_quantized(engine: str, r: ReplicaSet) -> bool:
    """Whether the set's weights must come pre-quantized (FP4 always; FP8 on TensorRT-LLM)."""
    return r.precision == "fp4" or (engine == "trtllm" and r.precision == "fp8")


def command(engine: str, r: ReplicaSet, worker: bool = False) -> list[str]:
    """The engine's launch command for ``r`` (``worker``: a multi-node replica's other nodes),
    refused when a word holds a control character: none of a checkpoint id or a number has one,
    and a script or terminal would show it raw."""
    cmd = ENGINES[engine](r, worker)
    for word in cmd:
        if printable(word) != word:
            raise InputError(f"deploy: replica set {printable(r.name)}: the launch command would hold "
                             f"'{printable(word)}', with a control character (from the model's hf_repo or the plan "
                             "file); correct it there")
    return cmd


def node_note(engine: str, r: ReplicaSet) -> list[str]:
    """How the nodes of a multi-node replica are started (comment lines of the launch script)."""
    if r.nodes == 1:
        return []
    if engine == "trtllm":
        return [f"one replica spans {r.nodes} nodes of {r.node_gpus} GPUs: run on its first node, with HOSTS its "
                f"{r.nodes} node addresses (comma-separated); the other nodes only accept the MPI job"]
    lines = [f"one replica spans {r.nodes} nodes of {r.node_gpus} GPUs: on each node set {NODE_RANK} (0 to "
             f"{r.nodes - 1}) and {LEADER} (node 0's address), then run"]
    if engine == "vllm":
        lines.append("the first command on node 0 and the second (--headless) on the others")
    return lines


def launch_script(engine: str, sets: list[ReplicaSet]) -> str:
    """One commented launch command per replica set (and a second for the other nodes of a
    vLLM replica that spans several). Comments show names with control characters escaped
    (:func:`fleetplan.rendering.escape.shell_comment`); commands quote every word."""
    lines = ["#!/bin/sh", shell_comment(f"launch commands for {engine}: one per replica set; run each on as many "
                                        "replicas as it says")]
    for r in sets:
        notes = [f"{r.name}: {r.replicas} replicas of {r.gpus} x {r.gpu} ({r.precision}, KV {r.kv_precision})"]
        if engine == "trtllm" and r.dp_attention > 1:
            notes.append("attention data parallelism: set enable_attention_dp: true in --extra_llm_api_options")
        if r.role != "decode" and engine != "sglang":
            notes.append(f"{r.role}: pair the prefill and decode sets with {engine}'s disaggregated-serving setup")
        if pre_quantized(engine, r):
            notes.append(PRE_QUANTIZED.format(precision=str(r.precision).upper()))
        notes += node_note(engine, r)
        lines += ["", *(shell_comment(n) for n in notes), shell_join(command(engine, r))]
        if r.nodes > 1 and engine == "vllm":
            lines.append(shell_join(command(engine, r, worker=True)))
    return "\n".join(lines) + "\n"


def node_command(engine: str, r: ReplicaSet, env: str, worker: bool = False) -> list[str]:
    """The command of one node's process: the launch command itself for a one-node replica; for a
    multi-node one, a shell that sets the rendezvous variables from ``env`` and runs it."""
    cmd = command(engine, r, worker)
    return cmd if r.nodes == 1 else ["sh", "-c", f"{env} exec {shell_join(cmd)}"]


def _container(engine: str, r: ReplicaSet, gpus: int, worker: bool = False) -> dict[str, Any]:
    """The serving container of one pod: the launch command, the port and the GPUs it requests."""
    resource = GPU_RESOURCE.get(r.vendor, GPU_RESOURCE["nvidia"])
    return {"name": "engine", "image": IMAGES[engine], "command": node_command(engine, r, LWS_ENV, worker),
            "ports": [{"containerPort": PORT}], "resources": {"limits": {resource: gpus}}}


def object_names(sets: list[ReplicaSet]) -> list[str]:
    """Each set's Kubernetes object and SkyPilot service name: a DNS label
    (:func:`fleetplan.rendering.escape.dns_label`), different for every set."""
    return unique_names([r.name for r in sets], dns_label)


def _pod(engine: str, r: ReplicaSet, name: str, gpus: int, worker: bool = False) -> dict[str, Any]:
    """A pod template labelled ``app: name`` on nodes of the set's GPU type."""
    return {"metadata": {"labels": {"app": name}},
            "spec": {"nodeSelector": {GPU_LABEL: label_value(r.gpu)}, "containers": [_container(engine, r, gpus, worker)]}}


def manifest(engine: str, r: ReplicaSet, name: str | None = None) -> dict[str, Any]:
    """A Deployment of ``r.replicas`` pods, or a LeaderWorkerSet of ``r.replicas`` groups of
    ``r.nodes`` pods when one replica spans several nodes, named ``name`` (default: the set's
    name as a DNS label); the plan's names of the set and its GPU are kept as annotations."""
    name = name or dns_label(r.name)
    meta = {"name": name, "labels": {"app": name, GPU_LABEL: label_value(r.gpu)},
            "annotations": {NAME_ANNOTATION: r.name, GPU_ANNOTATION: r.gpu}}
    if r.nodes == 1:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
                "spec": {"replicas": r.replicas, "selector": {"matchLabels": {"app": name}},
                         "template": _pod(engine, r, name, r.gpus)}}
    group = {"size": r.nodes, "restartPolicy": "RecreateGroupOnPodRestart",
             "leaderTemplate": _pod(engine, r, name, r.node_gpus),
             "workerTemplate": _pod(engine, r, name, r.node_gpus, True)}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta,
            "spec": {"replicas": r.replicas, "leaderWorkerTemplate": group}}


def skypilot_service(engine: str, r: ReplicaSet, name: str | None = None) -> dict[str, Any]:
    """A SkyPilot service named ``name`` (default: the set's name as a DNS label):
    ``r.replicas`` replicas of ``r.gpus`` GPUs running the launch command."""
    return {"name": name or dns_label(r.name),
            "service": {"readiness_probe": "/v1/models", "replicas": r.replicas},
            "resources": {"accelerators": f"{r.gpu}:{min(r.gpus, r.node_gpus)}", "ports": PORT},
            "num_nodes": r.nodes,
            "run": skypilot_run(engine, r)}


def skypilot_run(engine: str, r: ReplicaSet) -> str:
    """The service's run script: the launch command, on every node of a multi-node replica with
    its rank and the first node's address (vLLM's other nodes headless)."""
    if r.nodes == 1:
        return shell_join(command(engine, r))
    lead, rest = shell_join(command(engine, r)), shell_join(command(engine, r, worker=True))
    pick = lead if lead == rest else f'if [ "${NODE_RANK}" = 0 ]; then {lead}; else {rest}; fi'
    return f"{SKYPILOT_ENV}\n{pick}\n"


def documents(args: argparse.Namespace, sets: list[ReplicaSet]) -> dict[str, str]:
    """File name -> text: the launch script, and the manifests or services asked for (a SkyPilot
    file is named by its service's name, so no set name can make it leave ``--out``)."""
    dump = lambda docs: yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)  # noqa: E731
    names = object_names(sets)
    out = {"launch.sh": launch_script(args.engine, sets)}
    if args.k8s:
        out["k8s.yaml"] = dump([manifest(args.engine, r, name) for r, name in zip(sets, names)])
    if args.skypilot:
        out.update({f"skypilot-{name}.yaml": dump([skypilot_service(args.engine, r, name)])
                    for r, name in zip(sets, names)})
    return out


def cmd_deploy(args: argparse.Namespace) -> int:
    """Write (or print) the launch commands and manifests of a plan file."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.commands.io import catalog_inputs, output_in, write_atomically
    from fleetplan.commands.io import read_plan

    catalog = load_catalog(args.catalog)
    plan = read_plan(args.plan, catalog)
    sets = replica_sets(plan, catalog)
    docs = documents(args, sets)
    if not args.out:
        print("\n---\n".join(f"# {name}\n{text}" for name, text in docs.items()), end="")
        return 0
    out = Path(args.out)
    if not out.is_dir():
        raise InputError(f"--out: {out} is not a directory; create it first")
    paths = {name: output_in(out, name, "--out", [Path(args.plan), *catalog_inputs(args.catalog)]) for name in docs}
    for name, text in docs.items():
        write_atomically(paths[name], text)
    print(printable(f"wrote {', '.join(str(p) for p in paths.values())}: {len(sets)} replica sets, "
                    f"{sum(r.replicas for r in sets):,} replicas"))
    return 0


def register(sub: Any) -> None:
    """Add ``deploy`` to the CLI's subparsers."""
    from fleetplan.commands.flags import add_catalog_flag

    p = sub.add_parser("deploy", help="launch commands and Kubernetes or SkyPilot configs for a plan file")
    p.add_argument("plan", help="a plan JSON file (fleetplan plan SCENARIO.yaml --json --out PLAN.json)")
    p.add_argument("--engine", choices=ENGINE_NAMES, required=True)
    target = p.add_mutually_exclusive_group()
    target.add_argument("--k8s", action="store_true", help="also write Kubernetes manifests (k8s.yaml)")
    target.add_argument("--skypilot", action="store_true", help="also write one SkyPilot service YAML per replica set")
    p.add_argument("--out", help="existing directory to write into (default: print)")
    add_catalog_flag(p)
    p.set_defaults(func=cmd_deploy)
