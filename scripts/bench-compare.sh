#!/usr/bin/env bash
# Harness side by side with the floor (shared/bench/refagent, a bare Rust loop on the same
# driver contract) in ONE run, interleaved, against one mock-llm. Run it on a quiet machine:
#
#   bash scripts/bench-compare.sh                 # build (release) + measure, REPS=5
#   REPS=7 SKIP_BUILD=1 bash scripts/bench-compare.sh
#
# What it measures (every number is a median over REPS repetitions, with min–max; each
# repetition runs harness and the floor back to back, the order swapped every repetition,
# each in a fresh state directory):
#   W1   CPU ms per turn: `--workload w1 --turns $W1_TURNS` (one session, sequential turns;
#        two model requests per turn: a `lookup` call and the answer). The driver's own
#        getrusage over the turn loop (setup excluded), as both drivers report it.
#   W2   turns/s and peak RSS: `--workload w2 --sessions $W2_SESSIONS --session-turns
#        $W2_TURNS` (concurrent sessions in one process); peak RSS is the driver's VmHWM.
#   W3   cold start ms: `--workload w3`, wall clock from spawning the process to its exit
#        (runtime start, agent setup, one turn of two requests, the result file), measured
#        here for both the same way.
#   CLI  a CLI turn: ms per process, one process per turn, $CLI_TURNS turns in one session:
#          harness: `harness run --workspace WS --session cli --model openai:mock
#                    '/tool read_file {"path": "lookup_result.txt"}'`
#                   in a workspace made by `harness init` plus `[memory] mode = "off"`
#                   (automatic extraction would add a third model request per turn, outside
#                   the two-requests contract), OPENAI_BASE_URL = the mock. mock-llm answers
#                   the `/tool` line with that tool call, harness reads the file (the
#                   workload's lookup record) and the mock answers `done N`: two requests.
#          floor:   `refagent --workload turn --session cli --message 'Turn n: ...'
#                    --state-dir DIR --base-url URL --out FILE` (load the JSONL session,
#                   a `lookup` call and the answer, append, exit): two requests.
#        Reported: wall ms per process (median over the turns of a repetition) and CPU ms
#        per process (getrusage(RUSAGE_CHILDREN) delta over the repetition / turns).
#   REQ  the turn-1 request of a fresh `harness init` workspace, recorded by a proxy in
#        front of the mock: total bytes, system prompt bytes, and bytes per tool schema.
# Ratios are harness / floor of the medians (for W2 turns/s, harness / floor: higher is
# better; for everything else lower is better). Issue 23's targets: W1 ≤ 2×, W2 ≥ 0.5 at
# ≤ 45 MB, W3 ≤ 10 ms, CLI ≤ 3×, turn-1 request ≤ 8 KB.
#
# Environment: REPS (5), W1_TURNS (50), W2_SESSIONS (200), W2_TURNS (5), CLI_TURNS (20),
# SKIP_BUILD (0), CARGO_TARGET_DIR (the build's target, default ./target), BIN_DIR (where the
# harness binaries are taken from, default $CARGO_TARGET_DIR/release; a debug directory only
# checks that the script works, its numbers mean nothing),
# REFAGENT_DIR (default ../shared/bench/refagent or /work/shared/bench/refagent),
# REFAGENT_TARGET (its own target dir, default $CARGO_TARGET_DIR/refagent),
# BENCH_WORKLOAD_DIR (the workload inputs, default $REFAGENT_DIR/../workload),
# OUT (the result JSON, default $CARGO_TARGET_DIR/bench-compare.json).
# Needs python3 (standard library only). Stops only the processes it started.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
if [ -z "${REFAGENT_DIR:-}" ]; then
    for candidate in "$ROOT/../shared/bench/refagent" /work/shared/bench/refagent; do
        if [ -f "$candidate/Cargo.toml" ]; then REFAGENT_DIR="$candidate"; break; fi
    done
fi
if [ -z "${REFAGENT_DIR:-}" ] || [ ! -f "$REFAGENT_DIR/Cargo.toml" ]; then
    echo "bench-compare: no refagent source (set REFAGENT_DIR to shared/bench/refagent)" >&2
    exit 1
fi
REFAGENT_TARGET="${REFAGENT_TARGET:-$TARGET/refagent}"
export BENCH_WORKLOAD_DIR="${BENCH_WORKLOAD_DIR:-$(cd "$REFAGENT_DIR/../workload" && pwd)}"

if [ "${SKIP_BUILD:-0}" != "1" ]; then
    (cd "$ROOT" && cargo build --release -p harness-bench -p harness-cli \
        --bin bench-driver --bin mock-llm --bin harness)
    # Its own target directory: refagent is not part of the workspace.
    cargo build --release --manifest-path "$REFAGENT_DIR/Cargo.toml" --target-dir "$REFAGENT_TARGET"
fi

BIN_DIR="${BIN_DIR:-$TARGET/release}"
export BENCH_HARNESS_DRIVER="$BIN_DIR/bench-driver"
export BENCH_HARNESS_CLI="$BIN_DIR/harness"
export BENCH_MOCK="$BIN_DIR/mock-llm"
export BENCH_REFAGENT="$REFAGENT_TARGET/release/refagent"
for bin in "$BENCH_HARNESS_DRIVER" "$BENCH_HARNESS_CLI" "$BENCH_MOCK" "$BENCH_REFAGENT"; do
    [ -x "$bin" ] || { echo "bench-compare: missing $bin (run without SKIP_BUILD=1)" >&2; exit 1; }
done
export BENCH_OUT="${OUT:-$TARGET/bench-compare.json}"
export REPS="${REPS:-5}" W1_TURNS="${W1_TURNS:-50}" W2_SESSIONS="${W2_SESSIONS:-200}"
export W2_TURNS="${W2_TURNS:-5}" CLI_TURNS="${CLI_TURNS:-20}"

exec python3 - <<'PY'
import http.server, json, os, resource, shutil, signal, statistics, subprocess, sys, tempfile
import threading, time, urllib.request

env = os.environ
DRIVER, CLI, MOCK, REF = env["BENCH_HARNESS_DRIVER"], env["BENCH_HARNESS_CLI"], env["BENCH_MOCK"], env["BENCH_REFAGENT"]
WORKLOAD = env["BENCH_WORKLOAD_DIR"]
REPS, W1_TURNS = int(env["REPS"]), int(env["W1_TURNS"])
W2_SESSIONS, W2_TURNS, CLI_TURNS = int(env["W2_SESSIONS"]), int(env["W2_TURNS"]), int(env["CLI_TURNS"])
scratch = tempfile.mkdtemp(prefix="bench-compare-")
started = []  # the processes this script started (only these are stopped)


def stop_started():
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


def start_mock():
    proc = subprocess.Popen([MOCK, "--port", "0", "--threads", "1"], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    started.append(proc)
    line = proc.stdout.readline().strip()
    if "listening on " not in line:
        raise SystemExit(f"mock-llm did not start: {line!r}")
    # Whatever else it prints is drained, so that it never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return line.split("listening on ", 1)[1]


def fresh(name):
    path = tempfile.mkdtemp(prefix=name + "-", dir=scratch)
    return path


def driver(peer, workload, extra):
    """Runs one driver process; returns (result JSON, wall ms spawn -> exit)."""
    state, out = fresh(f"{peer}-{workload}"), os.path.join(scratch, f"{peer}-{workload}.json")
    binary = DRIVER if peer == "harness" else REF
    argv = [binary, "--workload", workload, "--base-url", BASE, "--state-dir", state, "--out", out, *extra]
    t0 = time.perf_counter()
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    wall = (time.perf_counter() - t0) * 1e3
    if run.returncode != 0:
        raise SystemExit(f"{peer} {workload} failed ({run.returncode}): {run.stderr[-2000:]}")
    with open(out) as f:
        result = json.load(f)
    shutil.rmtree(state, ignore_errors=True)
    return result, wall


def children_cpu_ms():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1e3


def harness_workspace():
    ws = os.path.join(fresh("harness-ws"), "ws")  # `harness init` creates it
    init = subprocess.run([CLI, "init", ws], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if init.returncode != 0:
        raise SystemExit(f"harness init failed: {init.stderr}")
    return ws


def harness_env():
    out = {k: v for k, v in env.items() if not k.startswith(("HARNESS_", "OPENAI_", "ANTHROPIC_", "OTEL_"))}
    out.update({"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": BASE})
    return out


def cli_turns(peer):
    """CLI_TURNS processes, one turn each, in one session: (median wall ms, CPU ms per process)."""
    walls = []
    if peer == "harness":
        ws = harness_workspace()
        with open(os.path.join(ws, "harness.toml"), "a") as f:
            f.write('\n[memory]\nmode = "off"\n')
        shutil.copy(os.path.join(WORKLOAD, "lookup_result.txt"), os.path.join(ws, "lookup_result.txt"))
        henv = harness_env()
        message = '/tool read_file {"path": "lookup_result.txt"}'
        argv = lambda n: [CLI, "run", "--workspace", ws, "--session", "cli", "--model", "openai:mock", message]
    else:
        ws = fresh("refagent-cli")
        henv = dict(env)
        out = os.path.join(scratch, "refagent-turn.json")
        argv = lambda n: [REF, "--workload", "turn", "--session", "cli", "--state-dir", ws, "--base-url", BASE,
                          "--out", out, "--message", f"Turn {n}: look up key k{n} and report the value."]
    cpu0 = children_cpu_ms()
    for n in range(1, CLI_TURNS + 1):
        t0 = time.perf_counter()
        run = subprocess.run(argv(n), capture_output=True, text=True, env=henv, timeout=60, stdin=subprocess.DEVNULL)
        walls.append((time.perf_counter() - t0) * 1e3)
        if run.returncode != 0:
            raise SystemExit(f"{peer} CLI turn {n} failed ({run.returncode}): {run.stderr[-2000:]}")
        if peer == "harness" and f"done {n}" not in run.stdout:
            raise SystemExit(f"harness CLI turn {n}: unexpected reply {run.stdout!r}")
    cpu = (children_cpu_ms() - cpu0) / CLI_TURNS
    shutil.rmtree(os.path.dirname(ws) if peer == "harness" else ws, ignore_errors=True)
    return statistics.median(walls), cpu


class Recorder(http.server.BaseHTTPRequestHandler):
    """Forwards to the mock and keeps every request body."""
    seen = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        Recorder.seen.append(body)
        request = urllib.request.Request(BASE.rsplit("/v1", 1)[0] + self.path, data=body, method="POST",
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request) as reply:
            data, kind = reply.read(), reply.headers.get("content-type", "application/json")
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def turn_one_request():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ws = harness_workspace()
    henv = harness_env()
    henv["OPENAI_BASE_URL"] = f"http://127.0.0.1:{server.server_address[1]}/v1"
    run = subprocess.run([CLI, "run", "--workspace", ws, "--model", "openai:mock", "hi"],
                         capture_output=True, text=True, env=henv, timeout=60, stdin=subprocess.DEVNULL)
    server.shutdown()
    server.server_close()
    shutil.rmtree(os.path.dirname(ws), ignore_errors=True)
    if run.returncode != 0:
        raise SystemExit(f"recording the turn-1 request failed: {run.stderr[-2000:]}")
    bodies = [json.loads(b) for b in Recorder.seen]
    first = next(b for b in bodies if b.get("tools"))
    compact = lambda v: len(json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode())
    system = next((m for m in first["messages"] if m.get("role") == "system"), {})
    return {
        "total_bytes": len(Recorder.seen[bodies.index(first)]),
        "system_bytes": compact(system.get("content", "")),
        "tools_bytes": compact(first["tools"]),
        "tools": sorted(((t["function"]["name"], compact(t)) for t in first["tools"]), key=lambda x: -x[1]),
    }


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


try:
    BASE = start_mock()
    samples = {}
    add = lambda key, peer, value: samples.setdefault(key, {}).setdefault(peer, []).append(value)
    print(f"mock-llm at {BASE}; {REPS} repetitions; scratch {scratch}", file=sys.stderr)
    for rep in range(REPS):
        peers = ["harness", "floor"] if rep % 2 == 0 else ["floor", "harness"]
        for peer in peers:
            result, _ = driver(peer, "w1", ["--turns", str(W1_TURNS)])
            if not result.get("history_ok"):
                raise SystemExit(f"{peer} W1: history_ok is false")
            add("w1_cpu_ms_per_turn", peer, result["cpu_ms_per_turn"])
            add("w1_wall_ms_per_turn", peer, result["wall_ms_per_turn"])
        for peer in peers:
            result, _ = driver(peer, "w2", ["--sessions", str(W2_SESSIONS), "--session-turns", str(W2_TURNS)])
            if not result.get("history_ok"):
                raise SystemExit(f"{peer} W2: history_ok is false")
            add("w2_turns_per_s", peer, result["throughput_turns_per_s"])
            add("w2_peak_rss_mb", peer, result["peak_rss_kb"] / 1024)
        for peer in peers:
            result, wall = driver(peer, "w3", [])
            if not result.get("history_ok"):
                raise SystemExit(f"{peer} W3: history_ok is false")
            add("w3_spawn_to_exit_ms", peer, wall)
        for peer in peers:
            wall, cpu = cli_turns(peer)
            add("cli_wall_ms_per_process", peer, wall)
            add("cli_cpu_ms_per_process", peer, cpu)
        print(f"repetition {rep + 1}/{REPS} done", file=sys.stderr)
    request = turn_one_request()
finally:
    stop_started()

report = {"reps": REPS, "w1_turns": W1_TURNS, "w2": [W2_SESSIONS, W2_TURNS], "cli_turns": CLI_TURNS,
          "metrics": {}, "turn1_request": request}
print(f"\n{'metric':<26} {'harness median (min–max)':>30} {'floor median (min–max)':>30} {'ratio':>7}")
for key, peers in samples.items():
    h, f = summary(peers["harness"]), summary(peers["floor"])
    ratio = h["median"] / f["median"] if f["median"] else float("nan")
    report["metrics"][key] = {"harness": h, "floor": f, "ratio": ratio}
    cell = lambda s: f"{s['median']:.3f} ({s['min']:.3f}–{s['max']:.3f})"
    print(f"{key:<26} {cell(h):>30} {cell(f):>30} {ratio:>6.2f}×")
print(f"\nturn-1 request of a fresh `harness init` workspace: {request['total_bytes']} B "
      f"(system prompt {request['system_bytes']} B, {len(request['tools'])} tools {request['tools_bytes']} B)")
for name, size in request["tools"]:
    print(f"  {size:>6} B  {name}")
with open(env["BENCH_OUT"], "w") as f:
    json.dump(report, f, indent=1)
print(f"\nwritten to {env['BENCH_OUT']}")
shutil.rmtree(scratch, ignore_errors=True)
PY
