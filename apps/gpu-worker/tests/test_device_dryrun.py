"""device/validate.sh end to end on CPU (DEVICE=cpu, tiny shape): workers, router, calibration,
`kvroute-sim validate` for both scenarios under both policies. Needs node + pnpm (CI has both);
bundles come from REPO/.device when prepared, else prepare.sh builds them into a temp dir."""

import json
import os
import shutil
import subprocess

import pytest

from conftest import REPO_ROOT

DEVICE_DIR = os.path.join(REPO_ROOT, "apps", "gpu-worker", "device")


def have_bundles(d):
    return all(os.path.exists(os.path.join(d, f)) for f in ("kvroute-router.mjs", "kvroute-sim.mjs"))


@pytest.fixture(scope="module")
def carry(tmp_path_factory):
    prepared = os.path.join(REPO_ROOT, ".device")
    if have_bundles(prepared) and os.environ.get("KVROUTE_REBUNDLE") != "1":
        return prepared
    if not shutil.which("node") or not shutil.which("pnpm"):
        pytest.skip("node and pnpm are needed to bundle the router and sim (or run device/prepare.sh first)")
    d = str(tmp_path_factory.mktemp("carry"))
    r = subprocess.run(["bash", os.path.join(DEVICE_DIR, "prepare.sh")], env={**os.environ, "DEVICE_DIR": d,
                       "SKIP_NODE": "1"}, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"prepare.sh failed:\n{r.stdout}\n{r.stderr}"
    assert have_bundles(d)
    return d


def test_validate_sh_dry_run_on_cpu(carry, tmp_path):
    if not shutil.which("node"):
        pytest.skip("the CPU dry run uses the local node")
    out = tmp_path / "out"
    env = {**os.environ, "DEVICE": "cpu", "OUT": str(out), "DEVICE_DIR": carry, "WORKERS": "2"}
    r = subprocess.run(["bash", os.path.join(DEVICE_DIR, "validate.sh")], env=env, capture_output=True, text=True,
                       timeout=330)
    assert r.returncode == 0, f"validate.sh failed:\n{r.stdout[-6000:]}\n{r.stderr[-3000:]}"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] is True, f"not ok: skipped {summary['skipped']}, runs {summary['runs']}"
    assert summary["device"] == "cpu" and len(summary["worker_urls"]) == 2
    assert summary["profile"]["format"] == "kvroute-cost-profile/v1"
    runs = {x["run"] for x in summary["runs"]}
    assert runs == {"seed-sequential-round_robin", "seed-sequential-prefix_match", "agentic-round_robin",
                    "agentic-prefix_match"}
    for name in runs:
        report = json.loads((out / f"{name}.json").read_text())
        assert report, name
        assert (out / f"{name}.html").read_text().lstrip().lower().startswith("<!doctype html")
        assert (out / f"{name}.requests.jsonl").stat().st_size > 0
        assert "kvroute_worker_cached_tokens_total" in (out / f"{name}.worker-0.metrics.txt").read_text()
    # prefix_match keeps the shared seed prefix on one rank; round_robin spreads it: observed hit
    # rates (printed side by side with the prediction) must show that.
    seq_rr = (out / "seed-sequential-round_robin.txt").read_text()
    seq_pm = (out / "seed-sequential-prefix_match.txt").read_text()
    assert "hit rate" in seq_rr and "hit rate" in seq_pm

    def observed_hit_rate(name):
        report = json.loads((out / f"{name}.json").read_text())
        return next(c["observed"] for c in report["comparison"] if c["key"] == "hitRate")

    assert observed_hit_rate("seed-sequential-prefix_match") > observed_hit_rate("seed-sequential-round_robin")
    assert (out / "worker-0.log").exists() and (out / "router-prefix_match.log").exists()
