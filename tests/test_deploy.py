"""``fleetplan deploy``: for every shipped example's plan, the launch commands, Kubernetes
manifests and SkyPilot services are parsed back and their counts and flags compared with the
plan file they were made from."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from fleetplan.main import main

PLANS = sorted((Path(__file__).resolve().parent / "data" / "plans").glob("*.json"))
FLAGS = {  # engine -> (TP, batch cap, context length) flags as each engine's documentation names them
    "vllm": ("--tensor-parallel-size", "--max-num-seqs", "--max-model-len"),
    "sglang": ("--tp-size", "--max-running-requests", "--context-length"),
    "trtllm": ("--tp_size", "--max_batch_size", "--max_seq_len"),
}


def deploy(capsys, plan: Path, out: Path, *flags: str) -> None:
    out.mkdir()
    assert main(["deploy", str(plan), "--out", str(out), *flags]) == 0
    capsys.readouterr()


def commands(script: str) -> list[list[str]]:
    """The launch commands of a launch.sh, parsed as a shell would split them, but the commands of
    a multi-node replica's other nodes (vLLM's headless ones)."""
    return [cmd for line in script.splitlines() if line and not line.startswith("#")
            if "--headless" not in (cmd := shlex.split(line))]


def engine_command(container: dict) -> list[str]:
    """A container's engine command: the command itself, or what its ``sh -c`` runs after the
    rendezvous variables of a multi-node replica."""
    cmd = container["command"]
    return shlex.split(cmd[2].split(" exec ", 1)[1]) if cmd[:2] == ["sh", "-c"] else cmd


def flag(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd else None


def decode_rows(d: dict) -> list[dict]:
    """The product rows whose decode replicas a deployment starts: one per product or pooled group."""
    seen, rows = set(), []
    for p in d["products"]:
        unit = p.get("pooled_in") or p["name"]
        if p["gpu"] and unit not in seen:
            seen.add(unit)
            rows.append(p)
    return rows


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.stem)
def test_manifests_start_exactly_the_plans_gpus(capsys, tmp_path, plan):
    d = json.loads(plan.read_text(encoding="utf-8"))
    deploy(capsys, plan, tmp_path / "k", "--engine", "vllm", "--k8s")
    docs = list(yaml.safe_load_all((tmp_path / "k" / "k8s.yaml").read_text(encoding="utf-8")))
    gpus = 0
    for doc in docs:
        if doc["kind"] == "Deployment":  # a replica within one node: one pod of all its GPUs
            [container] = doc["spec"]["template"]["spec"]["containers"]
            pods = 1
        else:  # a replica spanning nodes: a leader and workers, one pod per node
            assert doc["kind"] == "LeaderWorkerSet"
            group = doc["spec"]["leaderWorkerTemplate"]
            [container] = group["leaderTemplate"]["spec"]["containers"]
            pods = group["size"]
        per_pod = next(iter(container["resources"]["limits"].values()))
        command = engine_command(container)
        per_replica = (int(flag(command, "--tensor-parallel-size")) * int(flag(command, "--pipeline-parallel-size") or 1)
                       * int(flag(command, "--data-parallel-size") or 1))
        assert per_pod * pods == per_replica
        gpus += doc["spec"]["replicas"] * per_pod * pods
        # object names are DNS labels: the plan's name when it is one (a pool's "pool:a+b" is not)
        meta = doc["metadata"]
        original = meta["annotations"]["fleetplan/name"]
        assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", meta["name"])
        assert (meta["name"] == original) == bool(re.fullmatch(r"[a-z][-a-z0-9]*", original))
        assert meta["labels"]["fleetplan/gpu"] == meta["annotations"]["fleetplan/gpu"]  # shipped GPU ids are label values
    assert gpus == d["totals"]["all_gpus"]


@pytest.mark.parametrize("engine", sorted(FLAGS))
@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.stem)
def test_launch_commands_carry_the_plans_configuration(capsys, tmp_path, plan, engine):
    d = json.loads(plan.read_text(encoding="utf-8"))
    deploy(capsys, plan, tmp_path / "l", "--engine", engine)
    cmds = commands((tmp_path / "l" / "launch.sh").read_text(encoding="utf-8"))
    tp, batch, context = FLAGS[engine]
    decode = [c for c in cmds if flag(c, batch) is not None]
    rows = [p for p in decode_rows(d) if p["replicas"] or p.get("shared_replicas")]
    # vLLM's tensor-parallel size is per attention-DP rank; SGLang's and TensorRT-LLM's count the stage
    per_stage = (lambda p: p["tp"]) if engine == "vllm" else (lambda p: p["tp"] * (p.get("dp_attention") or 1))
    def expected(p: dict) -> list[tuple[int, int, int]]:
        """A product's decode commands: one, or one per configuration of a mix (sized for its longest request)."""
        if not p.get("configurations"):
            return [(per_stage(p), p["batch"], p["context_tokens"])]
        longest = max(r["input_tokens"] + r["output_tokens"] for r in p["requests"])
        return [(per_stage(c), c["batch"], longest) for c in p["configurations"] if c["replicas"]]

    assert [(int(flag(c, tp)), int(flag(c, batch)), int(flag(c, context))) for c in decode] == [
        row for p in rows for row in expected(p)]
    pools = [c for c in cmds if flag(c, batch) is None]
    assert [int(flag(c, tp)) for c in pools] == [p["prefill"]["tp"] for p in rows if p["prefill"]["gpu"]
                                                 and (p["prefill"]["replicas"] or p.get("pooled_in"))]


def test_skypilot_services_and_precision_flags_of_a_pool_plan(capsys, tmp_path):
    plan = next(p for p in PLANS if p.stem == "seed-chat-70b-pool")
    d = json.loads(plan.read_text(encoding="utf-8"))
    [p] = d["products"]
    deploy(capsys, plan, tmp_path / "s", "--engine", "sglang", "--skypilot")
    decode = yaml.safe_load((tmp_path / "s" / "skypilot-chat-decode.yaml").read_text(encoding="utf-8"))
    prefill = yaml.safe_load((tmp_path / "s" / "skypilot-chat-prefill.yaml").read_text(encoding="utf-8"))
    assert decode["service"]["replicas"] == p["replicas"] and prefill["service"]["replicas"] == p["prefill"]["replicas"]
    assert decode["resources"]["accelerators"] == f"{p['gpu']}:{p['tp']}"
    run = shlex.split(decode["run"])
    assert flag(run, "--quantization") == "fp8" and flag(run, "--kv-cache-dtype") == "auto"  # FP8 weights, bf16 KV
    assert flag(run, "--disaggregation-mode") == "decode" and flag(shlex.split(prefill["run"]), "--disaggregation-mode") == "prefill"


def test_a_plan_from_an_older_version_or_no_directory_is_refused(capsys, tmp_path):
    old = tmp_path / "old.json"
    d = json.loads(PLANS[0].read_text(encoding="utf-8"))
    for p in d["products"]:
        p.pop("context_tokens")
    old.write_text(json.dumps(d), encoding="utf-8")
    assert main(["deploy", str(old), "--engine", "vllm"]) == 2
    assert "lacks context_tokens" in capsys.readouterr().err
    assert main(["deploy", str(PLANS[0]), "--engine", "vllm", "--out", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "--out:" in err and err.count("\n") == 1


def test_a_replica_wider_than_a_node_becomes_a_leader_worker_set():
    from fleetplan.commands.deploy import ReplicaSet, manifest

    wide = ReplicaSet(name="big-decode", model="m", repo="org/m", gpu="gb200", vendor="nvidia", tp=16, batch=64,
                      precision="fp8", kv_precision="bf16", context_tokens=4096, replicas=3, node_gpus=4)
    doc = manifest("sglang", wide)
    assert doc["kind"] == "LeaderWorkerSet" and doc["spec"]["replicas"] == 3
    group = doc["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 4  # 16 GPUs of a replica on nodes of 4
    [container] = group["workerTemplate"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 4}
    command = engine_command(container)
    assert flag(command, "--tp-size") == "16"
    # the four processes meet at the leader: the same command, each with its own rank
    assert (flag(command, "--nnodes"), flag(command, "--node-rank"), flag(command, "--dist-init-addr")) == (
        "4", "$NODE_RANK", "$LEADER_ADDRESS:20000")
    assert container["command"][2].startswith("NODE_RANK=$LWS_WORKER_INDEX; LEADER_ADDRESS=$LWS_LEADER_ADDRESS;")


def _run(env: dict[str, str], command: list[str]) -> list[str]:
    """The arguments a node's shell passes to the engine: ``command`` run with the engine replaced
    by a program that prints its arguments, one per line."""
    import subprocess

    script = command[2].replace(" exec ", " exec printf '%s\\n' ", 1)
    out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def test_each_node_of_a_data_parallel_replica_gets_its_own_ranks():
    from fleetplan.commands.deploy import ReplicaSet, manifest

    wide = ReplicaSet(name="ep", model="m", repo="org/m", gpu="h100-sxm", vendor="nvidia", tp=1, batch=64,
                      precision="fp8", kv_precision="bf16", context_tokens=4096, replicas=2, node_gpus=8, ep=16,
                      dp_attention=16)
    group = manifest("vllm", wide)["spec"]["leaderWorkerTemplate"]
    [leader] = group["leaderTemplate"]["spec"]["containers"]
    [worker] = group["workerTemplate"]["spec"]["containers"]
    env = {"LWS_LEADER_ADDRESS": "ep-0.ep", "PATH": "/usr/bin:/bin"}
    first = _run({**env, "LWS_WORKER_INDEX": "0"}, leader["command"])
    second = _run({**env, "LWS_WORKER_INDEX": "1"}, worker["command"])
    assert (flag(first, "--data-parallel-start-rank"), flag(second, "--data-parallel-start-rank")) == ("0", "8")
    assert flag(first, "--data-parallel-size-local") == "8" and flag(first, "--data-parallel-size") == "16"
    assert flag(second, "--data-parallel-address") == "ep-0.ep" and "--headless" in second and "--headless" not in first
