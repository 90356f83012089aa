"""The module entry point: serve (first stdout line is the URL) and --calibrate (profile file)."""

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from conftest import make_engine
from kvroute_gpu_worker.calibrate import calibrate, decode_ms, fit_profile, nnls_fit, prefill_ms

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": PKG_DIR, "OMP_NUM_THREADS": "1"}


def check_profile(p):
    assert p["format"] == "kvroute-cost-profile/v1"
    assert isinstance(p["name"], str) and p["name"].startswith("gpu-worker-tiny-")
    assert isinstance(p["description"], str) and isinstance(p["source"], str)
    assert set(p["prefill"]) == {"floorMs", "perTokenMs", "attnMsPerMTokenPairs", "perKCachedTokenMs"}
    assert set(p["decode"]) == {"floorMs", "perSeqMs", "perKContextTokenMs"}
    for v in list(p["prefill"].values()) + list(p["decode"].values()):
        assert isinstance(v, float) and v >= 0
    # Prefill must cost something per token, and a long prefill more than a short one.
    assert prefill_ms(p, 512, 0) > prefill_ms(p, 16, 0) > 0
    assert decode_ms(p, 8, 2000) > 0
    assert p["kvCapacityTokens"] > 0 and p["chunkedPrefillSize"] > 0


def test_nnls_fit_recovers_known_constants_and_never_goes_negative():
    rows = [[1.0, n, n * (c + n) / 1e6] for n, c in [(100, 0), (1000, 0), (4000, 0), (200, 8000), (2000, 16000)]]
    ys = [5 + 0.01 * r[1] + 0.3 * r[2] for r in rows]
    coef = nnls_fit(rows, ys)
    assert coef == pytest.approx([5, 0.01, 0.3], rel=1e-6)
    # Data that would want a negative slope gets a zero instead.
    coef = nnls_fit([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]], [3.0, 2.0, 1.0])
    assert coef[1] == 0 and coef[0] == pytest.approx(2.0)


def test_fit_profile_needs_enough_points():
    with pytest.raises(ValueError, match="too few points"):
        fit_profile({"prefill": [{"new": 1, "cached": 0, "median_ms": 1.0}], "decode": []})


def test_calibrate_in_process_writes_a_valid_profile(tiny_model):
    eng = make_engine(tiny_model, chunked_prefill_size=512, capacity_tokens=32768, context_length=4096)
    profile, details = calibrate(eng, budget_s=30, log=lambda s: None)
    check_profile(profile)
    cached = [p for p in details["points"]["prefill"] if p["cached"] > 0]
    assert cached and len(details["points"]["decode"]) >= 3
    # Decode points time steady-state steps only: each shape's first visit runs untimed.
    for d in details["points"]["decode"]:
        assert len(d["ms"]) == 4 and d["warmup_steps"] >= 0
    assert sum(d["warmup_steps"] for d in details["points"]["decode"]) >= 1
    assert eng.cache.total_tokens == 0 and not eng.running


def test_cli_calibrate_writes_profile_file(tmp_path):
    out = tmp_path / "profile.json"
    r = subprocess.run([sys.executable, "-m", "kvroute_gpu_worker", "--calibrate", "--shape", "tiny", "--threads", "1",
                        "--out", str(out)], env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    check_profile(json.loads(out.read_text()))
    points = json.loads((tmp_path / "profile.points.json").read_text())
    assert points["points"]["prefill"] and points["fit_relative_error"]["prefill_median"] >= 0


def test_cli_serves_and_prints_url_first():
    p = subprocess.Popen([sys.executable, "-m", "kvroute_gpu_worker", "--shape", "tiny", "--port", "0", "--threads", "1"],
                         env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = p.stdout.readline().strip()
        assert first.startswith("listening http://127.0.0.1:"), first + p.stderr.read()
        url = first.split(" ", 1)[1]
        with urllib.request.urlopen(url + "/get_server_info", timeout=10) as resp:
            info = json.loads(resp.read())
        assert info["engine"] == "kvroute-gpu-worker" and info["shape"] == "tiny" and info["decode"] == "batched"
        req = urllib.request.Request(url + "/generate", data=json.dumps({"text": "hi", "sampling_params": {
            "max_new_tokens": 2}}).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.loads(resp.read())["meta_info"]["completion_tokens"] == 2
    finally:
        p.terminate()
        p.wait(timeout=10)


def test_cli_rejects_bad_options():
    r = subprocess.run([sys.executable, "-m", "kvroute_gpu_worker", "--calibrate"], env=ENV, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--calibrate needs --out" in r.stderr
    r = subprocess.run([sys.executable, "-m", "kvroute_gpu_worker", "--shape", "gpt-9"], env=ENV, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "invalid choice" in r.stderr
