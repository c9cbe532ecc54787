"""Bounded work on any input: nested YAML aliases, values quoted back in errors, traces, sweep
grids, request histograms, simulated replicas and scheduler addresses are refused with one
line (exit 2) before they can take unbounded time or memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fleetplan.catalogs.files import MAX_ALIASED_NODES, InputError, bounded_repr, check_aliases, parse_yaml, short, \
    short_repr

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# A subprocess that does not end within this long has hung: the bounded errors take about a second.
HUNG_S = 60


def laughs(levels: int = 9, indent: str = "") -> str:
    """A "billion laughs": each of ``levels`` anchors is a list of nine aliases of the one before,
    so the last stands for 9**(levels + 1) strings written out."""
    lines = [f'{indent}x0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"{indent}x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``fleetplan ARGS`` in a fresh process, killed (failing the test) if it hangs."""
    return subprocess.run([sys.executable, "-m", "fleetplan.main", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=HUNG_S)


def assert_one_line(r: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit 2, one line on stderr holding every fragment, no traceback."""
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("fleetplan: error: "), r.stderr[-2000:]
    for f in fragments:
        assert f in r.stderr, r.stderr


# ---------------------------------------------------------------- YAML aliases
def test_a_billion_laughs_in_a_scenario_field_is_refused_at_its_line(tmp_path):
    """The expansion is counted before any value is built: a field set to the last anchor (whose
    error message used to render its billions of strings) stops at the anchors' lines."""
    (tmp_path / "s.yaml").write_text(laughs() + "preset: seed\nproducts:\n  - name: chat\n    model: llama-3.1-70b\n"
                                     "    peak_qps: *a9\n    input_tokens: 2000\n    output_tokens: 400\n")
    r = run_cli(["plan", "s.yaml"], tmp_path)
    assert_one_line(r, "s.yaml: line ", f"aliases repeat more than {MAX_ALIASED_NODES:,} nodes")


def test_a_billion_laughs_in_a_catalog_is_refused(tmp_path):
    (tmp_path / "c.yaml").write_text("gpus:\n  - id: x\n    memory_bytes:\n" + laughs(indent="      "))
    r = run_cli(["plan", str(EXAMPLES / "seed-chat-70b.yaml"), "--catalog", "c.yaml"], tmp_path)
    assert_one_line(r, "c.yaml", "aliases repeat more than")


def test_a_billion_laughs_in_a_calibration_profile_is_refused(tmp_path):
    (tmp_path / "p.yaml").write_text(laughs() + "factors: *a9\n")
    r = run_cli(["plan", str(EXAMPLES / "seed-chat-70b.yaml"), "--calibration", "p.yaml"], tmp_path)
    assert_one_line(r, "p.yaml", "aliases repeat more than")


def test_aliases_within_the_limit_still_build_their_values():
    """Reuse is allowed: a merged block and a list of aliases read as the values written out."""
    doc = parse_yaml("base: &b {x: 1, y: [1, 2]}\nother:\n  <<: *b\n  z: 3\nl: [*b, *b]\n", "m.yaml")
    assert doc["other"] == {"x": 1, "y": [1, 2], "z": 3} and doc["l"] == [{"x": 1, "y": [1, 2]}] * 2


def test_the_alias_count_is_exact_at_the_limit():
    """A list of ``n`` aliases of a 3-node list repeats ``3 n`` nodes: allowed at the limit, refused
    one reference past it."""
    import yaml

    from fleetplan.catalogs.files import StrictLoader

    def composed(n: int) -> yaml.Node:
        return yaml.compose("a: &a [1, 2]\nb: [" + ", ".join(["*a"] * n) + "]\n", Loader=StrictLoader)

    check_aliases(composed(10), limit=30)  # ten repeats of [1, 2]: the list and its two items
    with pytest.raises(yaml.constructor.ConstructorError, match="more than 29 nodes"):
        check_aliases(composed(10), limit=29)


def test_more_extra_catalog_files_than_the_limit_are_refused_before_any_is_read(tmp_path):
    """A scenario listing one catalog 2,000 times read it 2,000 times, outside the deadline."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.catalogs.files import MAX_CATALOG_FILES

    (tmp_path / "c.yaml").write_text("prices: []\n")
    assert load_catalog([tmp_path / "c.yaml"] * MAX_CATALOG_FILES).files[-1] == str(tmp_path / "c.yaml")
    with pytest.raises(InputError, match="^catalog: 33 extra catalog files .* at most 32") as err:
        load_catalog([tmp_path / "missing.yaml"] * (MAX_CATALOG_FILES + 1))
    from fleetplan.commands.io import error_text

    assert error_text(err.value).startswith("--catalog: 33 extra catalog files")  # the command names its flag


def test_an_alias_inside_its_own_anchor_is_refused():
    with pytest.raises(InputError, match="cyc.yaml: line 1: aliases refer to a value that contains them"):
        parse_yaml("a: &a [1, *a]\n", "cyc.yaml")


# ---------------------------------------------------------------- values quoted back
def _nested(levels: int) -> list:
    x: list = ["lol"] * 9
    for _ in range(levels):
        x = [x] * 9
    return x


def test_a_huge_value_is_cut_before_it_is_rendered():
    """9**10 strings would take minutes to render; the echo stops at its limit."""
    value = _nested(9)
    assert short_repr(value, 40) == "[[[[[[[[[['lol', 'lol', 'lol', 'lol', '…"
    assert short(value, 20) == "[[[[[[[[[['lol', 'l…"
    assert short(10**5000) == "<a whole number of about 5,000 digits>"
    assert short_repr("y" * 10**6, 8) == "'yyyyyy…"


@pytest.mark.parametrize("value", [[1, "a", None], (1,), (), {}, {"k": [1.5, (2, 3)]}, "x", True, 2.5, [[]]])
def test_a_short_value_is_rendered_as_repr(value):
    assert bounded_repr(value, 1000) == repr(value)


def test_a_list_that_holds_itself_is_rendered_to_a_bounded_depth():
    r: list = []
    r.append(r)
    assert short(r, 80) == "[" * 20 + "…" + "]" * 20


# ---------------------------------------------------------------- sweep grids
OPEN = str(EXAMPLES / "seed-chat-70b-open.yaml")


@pytest.mark.parametrize("argv, words", [
    (["--set", "products.chat.peak_qps=0:1e308:1e-308"], "more than 1e+15 points; a sweep runs at most 10,000 "
                                                         "(--max-points allows at most 1,000,000"),
    (["--set", "products.chat.peak_qps=1:100000:1"], "100,000 points; a sweep runs at most 10,000 "
                                                     "(give --max-points 100000 to run them"),
    (["--set", "products.chat.peak_qps=1:100:1", "--set", "options.gpu_hour_usd.h100-sxm=1:2:0.01"],
     "--set: 10,100 points; a sweep runs at most 10,000"),
    (["--set", "products.chat.peak_qps=uniform(1,2)", "--samples", "20000"], "--samples: 20,000 points"),
    (["--set", "products.chat.peak_qps=1:3:1", "--max-points", "2"], "3 points; a sweep runs at most 2 "),
])
def test_a_sweep_past_its_point_limit_is_refused_before_planning(capsys, tmp_path, argv, words):
    from fleetplan.main import main

    code = main(["sweep", OPEN, *argv, "--out", str(tmp_path / "s")])
    _, err = capsys.readouterr()
    assert code == 2 and words in err and err.count("\n") == 1, err
    assert not (tmp_path / "s").exists()


def test_the_point_limit_is_exact():
    from fleetplan.optimizer.decisions.sweep import DEFAULT_MAX_POINTS, grid_points, parse_axis

    assert len(parse_axis(f"a.x=1:{DEFAULT_MAX_POINTS}:1").values) == DEFAULT_MAX_POINTS
    with pytest.raises(InputError, match="10,001 points"):
        parse_axis(f"a.x=1:{DEFAULT_MAX_POINTS + 1}:1")
    assert len(parse_axis("a.x=1:20000:1", max_points=20_000).values) == 20_000
    assert len(grid_points([parse_axis("a.x=1:100:1"), parse_axis("b.y=1:100:1")])) == DEFAULT_MAX_POINTS


def test_a_sweep_says_how_many_points_it_plans(capsys, tmp_path):
    from fleetplan.main import main

    assert main(["sweep", OPEN, "--set", "products.chat.peak_qps=100,200", "--out", str(tmp_path / "s"),
                 "--jobs", "1"]) == 0
    assert "fleetplan: sweep: 2 points to plan" in capsys.readouterr().err


# ---------------------------------------------------------------- traces
def _trace(tmp_path: Path, rows: str) -> Path:
    path = tmp_path / "t.csv"
    path.write_text("timestamp,input_tokens,output_tokens\n" + rows)
    return path


@pytest.mark.parametrize("rows, words", [
    # a span of 10^13 s asked for a per-minute array of 1.2 TiB
    ("0,100,10\n10000000000000,100,10\n", "line 3: column 'timestamp' must be seconds from -1e+11 to 1e+11"),
    ("1e300,100,10\n", "line 2: column 'timestamp' must be seconds from -1e+11"),
    ("0,100,10\n5,100,10\n100000000,100,10\n", "the requests span 1,157 days (line 2 to line 4); a trace may span at "
                                               "most 366 days"),
    ("0,100,10\n10,1e300,10\n", "line 3: column 'input_tokens' must be a whole number of tokens from 0 to 1e+07"),
    ("0,100,20000000\n", "line 2: column 'output_tokens' must be a whole number of tokens from 0 to 1e+07"),
])
def test_a_trace_out_of_bounds_is_refused_naming_the_line(tmp_path, rows, words):
    from fleetplan.optimizer.traffic.trace import product_fields

    with pytest.raises(InputError, match="t.csv: ") as err:
        product_fields(_trace(tmp_path, rows))
    assert words in str(err.value)


def test_a_trace_of_a_year_is_read(tmp_path):
    """The span limit keeps a year: two requests in every minute of the first hour set the peak."""
    from fleetplan.optimizer.traffic.trace import MAX_TRACE_SPAN_S, product_fields

    busy = "".join(f"{m * 60},100,10\n{m * 60 + 1},100,10\n" for m in range(60))
    d = product_fields(_trace(tmp_path, f"{busy}{MAX_TRACE_SPAN_S:.0f},100,10\n"))
    assert d["peak_qps"] == pytest.approx(2 / 60) and len(d["profile"]) == 168


def test_a_trace_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path):
    from fleetplan.optimizer.traffic.trace import MAX_TRACE_BYTES, read_trace

    path = _trace(tmp_path, "0,100,10\n")
    with path.open("r+b") as f:
        f.truncate(MAX_TRACE_BYTES + 1)  # sparse: nothing is written
    with pytest.raises(InputError, match="t.csv: 1.0 GiB; a trace file may hold at most 1 GiB"):
        read_trace(path)


def test_a_trace_with_more_requests_than_the_limit_is_refused(tmp_path, monkeypatch):
    from fleetplan.optimizer.traffic import trace

    monkeypatch.setattr(trace, "MAX_TRACE_REQUESTS", 2)
    with pytest.raises(InputError, match="3 requests; a trace may hold at most 2"):
        trace.read_trace(_trace(tmp_path, "0,100,10\n1,100,10\n2,100,10\n"))


# ---------------------------------------------------------------- scheduler addresses
class _Peer:
    """A TCP server on 127.0.0.1 in a thread: accepts connections, sends ``greeting`` (if any) and
    holds each connection open until stopped."""

    def __init__(self, greeting: bytes = b"") -> None:
        import socket
        import threading

        self.greeting = greeting
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.address = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            if self.greeting:
                conn.sendall(self.greeting)
            self.held.append(conn)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        for c in self.held:
            c.close()
        self.sock.close()


@pytest.fixture
def short_handshake(monkeypatch):
    """The handshake wait cut to half a second, so a silent peer fails fast."""
    from fleetplan.commands import cluster

    monkeypatch.setattr(cluster, "HANDSHAKE_TIMEOUT_S", 0.5)


@pytest.mark.parametrize("greeting, words", [
    (b"", "did not answer as a Dask scheduler within 0.5 s"),  # accepts and never speaks
    (b"SSH-2.0-OpenSSH_9.6\r\n", "answered, but not as a Dask scheduler (it began b'SSH-2.0-')"),
    (b"\x3a\x00\x00\x00", "fell silent without answering as a Dask scheduler"),
])
def test_a_peer_that_is_no_dask_scheduler_is_refused_with_one_line(capsys, tmp_path, short_handshake, greeting, words):
    from fleetplan.main import main

    peer = _Peer(greeting)
    try:
        code = main(["sweep", OPEN, "--set", "products.chat.peak_qps=1,2", "--out", str(tmp_path / "s"),
                     "--scheduler", peer.address])
    finally:
        peer.close()
    err = capsys.readouterr().err
    assert code == 2 and f"--scheduler {peer.address}: {words}" in err and err.count("\n") == 1, err
    assert not (tmp_path / "s").exists()


def test_an_http_server_given_as_scheduler_is_refused(capsys, tmp_path, short_handshake):
    """An HTTP server waits for a request: it never opens with a handshake (distributed's client,
    speaking first, read its reply's "HTTP/1.1" as a message length of 3.5 exabytes)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from fleetplan.main import main

    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    address = f"tcp://127.0.0.1:{server.server_address[1]}"
    try:
        code = main(["plan", str(EXAMPLES / "seed-chat-70b.yaml"), str(EXAMPLES / "rag-20k.yaml"), "--out",
                     str(tmp_path / "out"), "--scheduler", address])
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert code == 2 and f"--scheduler {address}: did not answer as a Dask scheduler" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_dask_scheduler_over_tcp_passes_the_handshake_check():
    from distributed import LocalCluster

    from fleetplan.commands.cluster import check_reachable

    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        check_reachable(cluster.scheduler_address)  # raises if the handshake is not recognised


# ---------------------------------------------------------------- request histograms
def _histogram(tmp_path: Path, buckets: int) -> Path:
    path = tmp_path / "h.csv"
    path.write_text("input_tokens,output_tokens,count\n" + "".join(f"{100 + i},50,1\n" for i in range(buckets)))
    return path


def test_a_histogram_past_the_bucket_limit_is_refused_before_planning(tmp_path):
    """5,000 buckets planned for minutes before the solver's deadline began; the limit is exact."""
    from fleetplan.optimizer.traffic.histogram import MAX_REQUEST_BUCKETS, read_histogram

    assert len(read_histogram(_histogram(tmp_path, MAX_REQUEST_BUCKETS), "products[chat].requests")) == 256
    with pytest.raises(InputError, match=r"h.csv: 257 buckets; a request mix may have at most 256 .*"
                                         r"\(products\[chat\].requests\)"):
        read_histogram(_histogram(tmp_path, MAX_REQUEST_BUCKETS + 1), "products[chat].requests")


def test_an_inline_mix_past_the_bucket_limit_is_refused_by_name():
    from fleetplan.optimizer.traffic.scenario import ScenarioError, parse_scenario

    def scenario(n: int) -> dict:
        return {"products": [{"name": "chat", "model": "llama-3.1-70b", "peak_qps": 3, "requests": [
            {"input_tokens": 100 + i, "output_tokens": 50, "share": 1 / n} for i in range(n)]}]}

    assert len(parse_scenario(scenario(256), "s.yaml").products[0].requests) == 256
    with pytest.raises(ScenarioError, match=r"^s.yaml.products\[chat\].requests: 257 buckets; a mix may have at most "):
        parse_scenario(scenario(257), "s.yaml")


# ---------------------------------------------------------------- simulated replicas
PLANS = Path(__file__).resolve().parent / "data" / "plans"


@pytest.mark.parametrize("plan, field, count, words", [
    # 10^12 is beyond any plan: the plan file's check refuses it before simulate sees it
    ("seed-chat-70b.json", "replicas", 10**12, "products[chat].replicas: must be a whole number from 0 to 1e+06"),
    ("seed-chat-70b-pool.json", "prefill", 10**12, "products[chat].prefill.replicas: must be a whole number"),
    # a valid plan, but more replicas than one product's simulation models
    ("seed-chat-70b.json", "replicas", 20_000, "products[chat] runs 20,000 replicas in hour 0; simulate models each "
                                               "replica and takes at most 10,000"),
    ("seed-chat-70b-pool.json", "prefill", 20_000, "products[chat] runs 20,000 replicas in hour 0"),
])
def test_a_plan_with_more_replicas_than_can_be_simulated_is_refused(capsys, tmp_path, plan, field, count, words):
    """10^12 replicas asked for terabytes before the first simulated event."""
    import json

    from fleetplan.main import main

    d = json.loads((PLANS / plan).read_text())
    if field == "prefill":
        d["products"][0]["prefill"]["replicas"] = count
    else:
        d["products"][0]["replicas"] = count
    (tmp_path / "p.json").write_text(json.dumps(d))
    code = main(["simulate", str(tmp_path / "p.json"), "--requests", "100"])
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1, err


def test_the_replica_limit_is_exact():
    from fleetplan.optimizer.simulation.simulate_plan import MAX_SIMULATED_REPLICAS, HourLoad, _check_size

    _check_size({"name": "chat"}, HourLoad(0, MAX_SIMULATED_REPLICAS, MAX_SIMULATED_REPLICAS, 1.0, 0.0))
    with pytest.raises(InputError, match="10,001 replicas"):
        _check_size({"name": "chat"}, HourLoad(0, MAX_SIMULATED_REPLICAS + 1, 0, 1.0, 0.0))
    with pytest.raises(InputError, match="10,001 replicas"):
        _check_size({"name": "chat"}, HourLoad(0, 1, MAX_SIMULATED_REPLICAS + 1, 1.0, 0.0))


# ---------------------------------------------------------------- documentation
def test_the_docs_state_the_limits_the_code_applies():
    """Each limit the documentation states is the constant the code checks."""
    from fleetplan.commands.cluster import HANDSHAKE_TIMEOUT_S
    from fleetplan.optimizer.traffic.histogram import MAX_REQUEST_BUCKETS
    from fleetplan.optimizer.simulation.simulate_plan import MAX_SIMULATED_REPLICAS
    from fleetplan.optimizer.decisions.sweep import DEFAULT_MAX_POINTS, MAX_POINTS
    from fleetplan.optimizer.traffic.trace import MAX_TIMESTAMP_S, MAX_TRACE_BYTES, MAX_TRACE_REQUESTS, MAX_TRACE_SPAN_S

    root = Path(__file__).resolve().parent.parent
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    text = " ".join(" ".join(p.read_text(encoding="utf-8") for p in pages).split())
    from fleetplan.catalogs.files import MAX_CATALOG_FILES

    for claim in (f"may repeat at most {MAX_ALIASED_NODES:,} nodes", f"at most {MAX_CATALOG_FILES} extra catalog files", f"at most {MAX_REQUEST_BUCKETS} buckets",
                  f"at most {MAX_TRACE_BYTES // 2**30} GiB and {MAX_TRACE_REQUESTS:,} requests",
                  f"within {MAX_TIMESTAMP_S:.0e}".replace("e+", "e") + " s of second 0",
                  f"spanning at most {MAX_TRACE_SPAN_S / 86_400:.0f} days",
                  f"at most {DEFAULT_MAX_POINTS:,} points unless `--max-points`", f"up to {MAX_POINTS:,}",
                  f"at most {MAX_SIMULATED_REPLICAS:,} replicas of one product", f"Dask handshake within {HANDSHAKE_TIMEOUT_S:g} s"):
        assert claim in text, claim
