"""Orchestrates validate.sh (python, because the GPU machine has python and nothing else).

Phases, each logged with its duration to $OUT/summary.json:
  1. node: unpack .device/node.xz (lzma from the stdlib: no xz binary needed), or the local
     node for DEVICE=cpu
  2. calibrate: one worker process measures its prefill/decode curve -> $OUT/profile.json,
     alone on the device so nothing else skews it
  3. workers: WORKERS gpu-workers on one device, URLs read from their first stdout line;
     then a fit-probe run through a one-worker router measures the per-request overhead the
     in-process calibration cannot see (lone requests' TTFT minus the calibrated prefill)
     -> $OUT/profile-with-overhead.json
  4. per policy: a fresh router (--load-balance-method P); per scenario: flush every worker's
     radix cache, then `kvroute-sim validate` with the calibrated profile; JSON, HTML, the
     requests sent (JSONL), the printed comparison and each worker's /metrics are kept
A global deadline (DEADLINE_S) skips whatever would not fit rather than overrunning.
"""

from __future__ import annotations

import json
import lzma
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PKG = os.path.dirname(HERE)

DEVICE = os.environ.get("DEVICE", "cuda")
CPU = DEVICE == "cpu"
OUT = os.path.abspath(os.environ.get("OUT") or "/tmp/kvroute-validate-out")
CARRY = os.path.abspath(os.environ.get("DEVICE_DIR") or os.path.join(ROOT, ".device"))
WORKERS = int(os.environ.get("WORKERS", "4"))
SHAPE = os.environ.get("SHAPE", "tiny" if CPU else "llama-3.2-1b")
POLICIES = os.environ.get("POLICIES", "round_robin,prefix_match").split(",")
SCENARIOS = os.environ.get("SCENARIOS", "seed-sequential,agentic").split(",")
DEADLINE_S = float(os.environ.get("DEADLINE_S", "240" if CPU else "450"))

if CPU:
    CAPACITY, CHUNK, CONTEXT = 32768, 512, 4096
    DEFAULT_WORKER_ARGS = f"--device cpu --threads 1 --max-total-tokens {CAPACITY} --chunked-prefill-size {CHUNK} " \
                          f"--context-length {CONTEXT}"
    # Tiny sizes: the point is that every piece runs end to end, not the numbers.
    DEFAULT_SEQ = ("--requests 4 --set prefixTokens=600 --set turnMinTokens=8 --set turnMaxTokens=24 "
                   "--set outputMinTokens=4 --set outputMaxTokens=8 --set thinkMinMs=0 --set thinkMaxMs=50")
    DEFAULT_AGENTIC = ("--requests 8 --set sessions=3 --set sessionsPerS=20 --set turnsMin=2 --set turnsMax=3 "
                       "--set prefixMinTokens=200 --set prefixMaxTokens=600 --set userMinTokens=8 --set userMaxTokens=32 "
                       "--set outputMinTokens=4 --set outputMaxTokens=8 --set toolMinTokens=10 --set toolMaxTokens=50 "
                       "--set thinkMinMs=0 --set thinkMaxMs=50 --set tenants=2")
    CALIBRATE_TIMEOUT, RUN_TIMEOUT = 120, 120
    # The fit probe's longest prompt must fit the tiny context with room for its output, and
    # the probe the dry run's time budget.
    PROBE = ("--set singles=10 --set maxTokens=2048 --set singleOutputTokens=4 --set bursts=2 "
             "--set burstContextTokens=256 --set gapMs=600 --set burstGapMs=800")
else:
    CAPACITY, CHUNK, CONTEXT = 200000, 8192, 32768
    DEFAULT_WORKER_ARGS = f"--max-total-tokens {CAPACITY} --chunked-prefill-size {CHUNK} --context-length {CONTEXT}"
    # Scaled so both scenarios under both policies fit the 8-minute budget with startup and
    # calibration: seed-sequential keeps its real 22,651-token prefix with fewer requests and
    # shorter think times; agentic keeps its shape with fewer, shorter sessions.
    DEFAULT_SEQ = "--requests 12 --set thinkMinMs=200 --set thinkMaxMs=800"
    DEFAULT_AGENTIC = ("--requests 48 --set sessions=12 --set sessionsPerS=1 --set turnsMin=2 --set turnsMax=5 "
                       "--set prefixMinTokens=2000 --set prefixMaxTokens=8000 --set outputMaxTokens=128 "
                       "--set toolMaxTokens=1000 --set tenants=4 --set thinkMinMs=200 --set thinkMaxMs=1000")
    CALIBRATE_TIMEOUT, RUN_TIMEOUT = 150, 150
    PROBE = ("--set singles=24 --set maxTokens=16384 --set singleOutputTokens=4 --set bursts=2,4,8 "
             "--set burstContextTokens=512,4096 --set gapMs=1500 --set burstGapMs=3000")

WORKER_ARGS = shlex.split(os.environ.get("WORKER_ARGS", DEFAULT_WORKER_ARGS))
PROBE_ARGS = shlex.split(os.environ.get("PROBE_ARGS", PROBE))
SCENARIO_ARGS = {
    "seed-sequential": shlex.split(os.environ.get("SEQ_ARGS", DEFAULT_SEQ)),
    "agentic": shlex.split(os.environ.get("AGENTIC_ARGS", DEFAULT_AGENTIC)),
}

T0 = time.time()
summary: Dict[str, Any] = {"device": DEVICE, "shape": SHAPE, "workers": WORKERS, "policies": POLICIES,
                           "scenarios": SCENARIOS, "worker_args": WORKER_ARGS, "phases": [], "runs": [],
                           "skipped": [], "warnings": []}
procs: List[subprocess.Popen] = []


def log(msg: str) -> None:
    print(f"[validate +{time.time() - T0:6.1f}s] {msg}", flush=True)


def left() -> float:
    return DEADLINE_S - (time.time() - T0)


def phase(name: str, started: float, **extra: Any) -> None:
    summary["phases"].append({"phase": name, "seconds": round(time.time() - started, 2), **extra})
    write_summary()


def write_summary() -> None:
    summary["elapsed_s"] = round(time.time() - T0, 2)
    with open(os.path.join(OUT, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")


def fail(msg: str, code: int = 1) -> None:
    log(f"FAILED: {msg}")
    summary["error"] = msg
    write_summary()
    cleanup()
    sys.exit(code)


def cleanup() -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def stop(p: subprocess.Popen) -> None:
    """SIGTERM, SIGKILL if still running 10 s later; then no longer one for cleanup() to end."""
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
    procs.remove(p)


def http(method: str, url: str, body: Optional[bytes] = None, timeout: float = 5.0) -> tuple:
    req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)


def wait_http(url: str, timeout: float, proc: Optional[subprocess.Popen] = None) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            return False
        if http("GET", url, timeout=2)[0] == 200:
            return True
        time.sleep(0.2)
    return False


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def find_node() -> str:
    xz = os.path.join(CARRY, "node.xz")
    if os.path.exists(xz):
        dest_dir = "/tmp/kvroute-node"
        os.makedirs(dest_dir, exist_ok=True)
        dest = os.path.join(dest_dir, "node")
        with lzma.open(xz) as src, open(dest + ".tmp", "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.chmod(dest + ".tmp", stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        os.replace(dest + ".tmp", dest)
        return dest
    local = shutil.which("node")
    if CPU and local:
        return local
    fail(f"no node: {xz} is missing (run apps/gpu-worker/device/prepare.sh on a machine with node and carry .device)",
         2)
    return ""


def start_worker(i: int) -> tuple:
    logf = open(os.path.join(OUT, f"worker-{i}.log"), "w")
    env = {**os.environ, "PYTHONPATH": PKG + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-u", "-m", "kvroute_gpu_worker", "--shape", SHAPE, "--port", "0", "--seed", str(i),
           *WORKER_ARGS]
    logf.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
    logf.flush()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=logf, text=True)
    procs.append(p)
    return p, logf


def run_logged(cmd: List[str], log_path: str, timeout: float, env: Optional[Dict[str, str]] = None) -> int:
    with open(log_path, "w") as f:
        f.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        f.flush()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        procs.append(p)

        def pump() -> None:
            assert p.stdout is not None
            for line in p.stdout:
                if f.closed:  # the run timed out and its log was closed; drop the tail
                    break
                f.write(line)
                f.flush()
                sys.stdout.write("    " + line)
                sys.stdout.flush()

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGINT)  # validate writes what it has on SIGINT
            try:
                rc = p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = -9
        t.join(timeout=5)
        procs.remove(p)
        return rc


def calibrated_prefill_ms(prof: Dict[str, Any], new: int, cached: int, chunk: int) -> float:
    """The in-engine prefill the simulator charges a lone request: one step per chunk of the
    new tokens, each attending over everything before it (the cost model's prefill form)."""
    p = prof["prefill"]
    total, done = 0.0, 0
    while done < new or (new == 0 and done == 0):
        n = min(chunk, new - done) if new > 0 else 0
        c = cached + done
        ms = (p["floorMs"] + p["perTokenMs"] * n + p["attnMsPerMTokenPairs"] * n * (c + n) / 1e6
              + p.get("perKCachedTokenMs", 0.0) * c / 1000.0)
        total += max(ms, p.get("launchFloorMs", 0.0))
        done += max(n, 1)
    return total


def overhead_from_probe(path: str, prof: Dict[str, Any], chunk: int) -> Optional[Dict[str, Any]]:
    """What a lone request's TTFT adds beyond the calibrated prefill, fitted as a + b * prompt
    tokens over the probe's single requests (spaced so each runs alone): a is the per-request
    overhead, b what grows with the prompt outside the engine (JSON, the routing tokenizer
    and hashing over the whole prompt, cached part included)."""
    recs = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            o = r.get("observed") or {}
            if r.get("type") == "request" and o.get("ok") and o.get("startMs") is not None:
                recs.append((r, o))
    pts = []
    for r, o in recs:
        if not str(r.get("sessionKey", "")).startswith("single-"):
            continue
        s0, s1 = o["startMs"], o["startMs"] + o["ttftMs"]
        # Lone: no other request was in flight at any time during this one's TTFT.
        if any(q is not o and q["startMs"] < s1 and q["startMs"] + q["e2eMs"] > s0 for _, q in recs):
            continue
        prompt, cached = int(o["promptTokens"]), int(o.get("cachedTokens") or 0)
        pts.append((prompt, o["ttftMs"] - calibrated_prefill_ms(prof, prompt - cached, cached, chunk)))
    if len(pts) < 6:
        return None

    # Theil-Sen: the median of pairwise slopes, then the median intercept; a stray first-visit
    # kernel or GC pause moves neither, unlike least squares.
    xs = sorted({x for x, _ in pts})
    slopes = sorted((y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(pts) for x2, y2 in pts[i + 1:] if x2 != x1)
    b = max(0.0, slopes[len(slopes) // 2]) if slopes and len(xs) > 1 else 0.0
    inter = sorted(y - b * x for x, y in pts)
    a = inter[len(inter) // 2]
    if a < 0:  # both terms stay >= 0: a line through the origin
        a = 0.0
        ratios = sorted(y / x for x, y in pts if x > 0)
        b = max(0.0, ratios[len(ratios) // 2]) if ratios else 0.0
    resid = sorted(y for _, y in pts)
    return {"overheadMs": a, "perPromptTokenMs": b, "n": len(pts), "residual_median_ms": resid[len(resid) // 2]}


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    router_js = os.path.join(CARRY, "kvroute-router.mjs")
    sim_js = os.path.join(CARRY, "kvroute-sim.mjs")
    for f in (router_js, sim_js):
        if not os.path.exists(f):
            fail(f"{f} is missing: run `bash apps/gpu-worker/device/prepare.sh` (DEVICE_DIR={CARRY}) first", 2)
    t = time.time()
    node = find_node()
    ver = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    if ver.returncode != 0:
        fail(f"node does not run here: {ver.stderr.strip()}")
    summary["node"] = ver.stdout.strip()
    phase("node", t, node=node, version=ver.stdout.strip())
    log(f"node {ver.stdout.strip()} ({node}); out={OUT}; device={DEVICE}; shape={SHAPE}; workers={WORKERS}")
    # torch/GPU names come from the calibration profile (name, source): importing torch here
    # would hold a CUDA context for the whole run.

    # 2. calibrate alone on the device
    t = time.time()
    profile = os.path.join(OUT, "profile.json")
    env = {**os.environ, "PYTHONPATH": PKG}
    rc = run_logged([sys.executable, "-u", "-m", "kvroute_gpu_worker", "--calibrate", "--shape", SHAPE, "--out",
                     profile, "--calibrate-budget-s", "40" if CPU else "75", *WORKER_ARGS],
                    os.path.join(OUT, "calibrate.log"), CALIBRATE_TIMEOUT, env)
    if rc != 0 or not os.path.exists(profile):
        fail(f"calibration failed (exit {rc}); see {OUT}/calibrate.log")
    with open(profile) as f:
        summary["profile"] = json.load(f)
    phase("calibrate", t)

    # 3. workers
    t = time.time()
    started = [start_worker(i) for i in range(WORKERS)]
    urls: List[str] = []
    for i, (p, _logf) in enumerate(started):
        assert p.stdout is not None
        line = p.stdout.readline().strip()  # first stdout line: "listening http://..."
        if not line.startswith("listening "):
            fail(f"worker {i} did not start (got {line!r}); see {OUT}/worker-{i}.log")
        urls.append(line.split(" ", 1)[1])
    for u in urls:
        if not wait_http(u + "/health", 60):
            fail(f"worker {u} is not healthy")
    summary["worker_urls"] = urls
    phase("workers", t, urls=urls)
    log(f"{WORKERS} workers up: {' '.join(urls)}")

    # 3b. per-request overhead (HTTP through the router, JSON, the worker's routing tokenizer,
    # scheduling), which --calibrate cannot see because it drives the engine in-process: a
    # fit-probe run through a one-worker router, whose lone requests' TTFTs minus the
    # calibrated in-engine prefill give the overhead (see overhead_from_probe).
    # `kvroute-sim fit` is run on the same records as a cross-check (fit.txt), but its own
    # constants cannot split overhead from the prefill floor when every probe prompt is one
    # chunk, so the overhead comes from the residuals against the calibration.
    t = time.time()
    probe = os.path.join(OUT, "fit-probe.requests.jsonl")
    fitted = os.path.join(OUT, "fitted-profile.json")
    probe_port = free_port()
    probe_router = subprocess.Popen([node, router_js, "--host", "127.0.0.1", "--port", str(probe_port),
                                     "--load-balance-method", "round_robin", "--worker-urls", urls[0]],
                                    stdout=open(os.path.join(OUT, "router-fit-probe.log"), "w"),
                                    stderr=subprocess.STDOUT)
    procs.append(probe_router)
    probe_url = f"http://127.0.0.1:{probe_port}"
    rc = 1
    if wait_http(probe_url + "/health", 30, probe_router):
        rc = run_logged([node, sim_js, "validate", "--target", probe_url, "--scenario", "fit-probe", *PROBE_ARGS,
                         "--ranks", "1", "--profile-file", profile, "--record", probe],
                        os.path.join(OUT, "fit-probe.txt"), min(RUN_TIMEOUT, max(30.0, left() - 60)))
    stop(probe_router)
    if rc == 0:
        run_logged([node, sim_js, "fit", "--input", probe, "--chunked-prefill-size", str(CHUNK),
                    "--kv-capacity", str(CAPACITY), "--out", fitted], os.path.join(OUT, "fit.txt"), 60)
        if os.path.exists(fitted):
            with open(fitted) as f:
                summary["fitted_profile"] = json.load(f)
    for u in urls:
        http("POST", u + "/flush_cache", b"", timeout=30)
    with open(profile) as f:
        prof = json.load(f)
    est = overhead_from_probe(probe, prof, CHUNK) if rc == 0 else None
    if est is not None:
        prof["overheadMs"] = round(est["overheadMs"], 3)
        per_tok = est["perPromptTokenMs"]
        prof["prefill"]["perTokenMs"] = prof["prefill"]["perTokenMs"] + per_tok
        prof["prefill"]["perKCachedTokenMs"] = prof["prefill"].get("perKCachedTokenMs", 0.0) + per_tok * 1000.0
        prof["description"] = (prof.get("description", "") + f"; per-request overhead {est['overheadMs']:.2f} ms + "
                               f"{per_tok * 1000:.4f} ms per 1k prompt tokens from {est['n']} lone fit-probe requests "
                               f"through the router (TTFT minus the calibrated prefill)")
        profile = os.path.join(OUT, "profile-with-overhead.json")
        with open(profile, "w") as f:
            json.dump(prof, f, indent=2)
        summary["overhead"] = est
        log(f"per-request overhead: {est['overheadMs']:.2f} ms + {per_tok * 1000:.4f} ms per 1k prompt tokens "
            f"({est['n']} lone requests, residual median {est['residual_median_ms']:.2f} ms)")
    else:
        miss = {"run": "fit-probe", "why": f"probe failed (exit {rc}) or too few lone requests; predictions use no overhead"}
        # On a GPU the overhead is part of what is validated, so a failed probe makes the run not
        # ok; the CPU dry run only checks the plumbing: a warning.
        summary["warnings" if CPU else "skipped"].append(miss)
        log(f"fit-probe failed (exit {rc}): predictions use the calibrated profile without overhead")
    phase("fit-overhead", t)

    # 4. per policy: a fresh router; per scenario: cold caches, then validate
    for policy in POLICIES:
        port = free_port()
        router_url = f"http://127.0.0.1:{port}"
        rlog = open(os.path.join(OUT, f"router-{policy}.log"), "w")
        rcmd = [node, router_js, "--host", "127.0.0.1", "--port", str(port), "--load-balance-method", policy,
                "--worker-urls", *urls]
        rlog.write("$ " + " ".join(shlex.quote(c) for c in rcmd) + "\n")
        rlog.flush()
        t = time.time()
        router = subprocess.Popen(rcmd, stdout=rlog, stderr=subprocess.STDOUT)
        procs.append(router)
        if not wait_http(router_url + "/health", 30, router):
            fail(f"router ({policy}) did not become healthy; see {OUT}/router-{policy}.log")
        phase(f"router-{policy}", t)
        for scenario in SCENARIOS:
            name = f"{scenario}-{policy}"
            budget = min(RUN_TIMEOUT, left() - 10)
            if budget < 30:
                summary["skipped"].append({"run": name, "why": f"deadline ({DEADLINE_S:.0f} s) too close"})
                log(f"skip {name}: deadline too close")
                continue
            for u in urls:
                st, body = http("POST", u + "/flush_cache", b"", timeout=30)
                if st != 200:
                    fail(f"flush_cache on {u} failed ({st}: {body})")
            t = time.time()
            cmd = [node, sim_js, "validate", "--target", router_url, "--scenario", scenario, "--policy", policy,
                   "--policy-label", policy, "--profile-file", profile, "--ranks", str(WORKERS),
                   "--kv-capacity", str(CAPACITY), "--page-size", "1", "--chunked-prefill-size", str(CHUNK),
                   *SCENARIO_ARGS.get(scenario, []),
                   "--json", os.path.join(OUT, f"{name}.json"), "--html", os.path.join(OUT, f"{name}.html"),
                   "--record", os.path.join(OUT, f"{name}.requests.jsonl")]
            log(f"run {name}")
            rc = run_logged(cmd, os.path.join(OUT, f"{name}.txt"), budget)
            for i, u in enumerate(urls):
                st, text = http("GET", u + "/metrics")
                with open(os.path.join(OUT, f"{name}.worker-{i}.metrics.txt"), "w") as f:
                    f.write(text)
            summary["runs"].append({"run": name, "exit": rc, "seconds": round(time.time() - t, 2),
                                    "json": f"{name}.json", "html": f"{name}.html"})
            write_summary()
            log(f"{name}: exit {rc} in {time.time() - t:.1f} s")
        stop(router)
        rlog.close()

    cleanup()
    failed = [r for r in summary["runs"] if r["exit"] != 0]
    summary["ok"] = not failed and not summary["skipped"]
    write_summary()
    log(f"done: {len(summary['runs'])} runs, {len(failed)} failed, {len(summary['skipped'])} skipped; "
        f"results in {OUT}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except SystemExit:
        raise
    except BaseException as exc:
        fail(f"{exc!r}")
