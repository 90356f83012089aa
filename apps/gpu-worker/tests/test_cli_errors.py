"""Bad input and foreseeable failures end in one `kvroute_gpu_worker: ...` line and exit 2, never a
traceback; --calibrate checks what it can before measuring and keeps what it measured."""

import json
import os
import subprocess
import sys

import pytest

import kvroute_gpu_worker.calibrate as calibrate_mod
from conftest import make_engine
from kvroute_gpu_worker.__main__ import main

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": PKG_DIR, "OMP_NUM_THREADS": "1"}


def run_cli(*args, env=ENV, cwd=None):
    return subprocess.run([sys.executable, "-m", "kvroute_gpu_worker", "--threads", "1", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def assert_one_line(r, *needles):
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("kvroute_gpu_worker: ")]
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_calibrate_checks_the_out_folder_before_measuring(tmp_path):
    r = run_cli("--calibrate", "--out", str(tmp_path / "nodir" / "p.json"))
    assert_one_line(r, "--out", "does not exist")
    assert "calibrating" not in r.stderr  # nothing was measured
    r = run_cli("--calibrate", "--out", str(tmp_path))
    assert_one_line(r, "--out", "folder")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes anywhere")
def test_calibrate_checks_the_out_folder_is_writable(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert_one_line(run_cli("--calibrate", "--out", str(ro / "p.json")), "--out", "not writable")
    finally:
        ro.chmod(0o700)


def test_calibrate_keeps_a_share_of_the_budget_for_decode(tiny_model):
    # Prefill alone could use far more than this budget on the CPU plan; decode must still get points.
    eng = make_engine(tiny_model, chunked_prefill_size=512, capacity_tokens=32768, context_length=4096)
    points = calibrate_mod.measure(eng, "cpu", budget_s=0.3, log=lambda s: None)
    assert len(points["decode"]) >= 1, points


def test_calibrate_too_few_points_exits_2_naming_the_budget_and_keeps_the_points(tmp_path, monkeypatch, capsys):
    measured = {"prefill": [{"new": 16, "cached": 0, "ms": [1.0], "median_ms": 1.0}], "decode": []}
    monkeypatch.setattr(calibrate_mod, "measure", lambda *a, **k: measured)
    out = tmp_path / "p.json"
    with pytest.raises(SystemExit) as exc:
        main(["--calibrate", "--threads", "1", "--out", str(out), "--calibrate-budget-s", "0.3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    line = [ln for ln in err.splitlines() if ln.startswith("kvroute_gpu_worker: ")]
    assert len(line) == 1 and "--calibrate-budget-s 0.3" in line[0] and "too few points" in line[0], err
    assert not out.exists()
    saved = json.loads((tmp_path / "p.points.json").read_text())
    assert saved["points"] == measured and "too few points" in saved["error"]


@pytest.mark.parametrize("args,needles", [
    (["--calibrate", "--out", "x.json", "--calibrate-budget-s", "0"], ["--calibrate-budget-s", "> 0"]),
    (["--calibrate", "--out", "x.json", "--calibrate-budget-s", "-1"], ["--calibrate-budget-s", "> 0"]),
    (["--calibrate", "--out", "x.json", "--chunked-prefill-size", "32"], ["--chunked-prefill-size", ">= 64", "32"]),
    (["--chunked-prefill-size", "63"], ["--chunked-prefill-size", ">= 64"]),
    (["--device", "gpu"], ["--device gpu"]),
    (["--threads", "-1"], ["--threads", "-1"]),
    (["--threads", "0"], ["--threads", ">= 1"]),
    (["--port", "99999"], ["--port", "99999"]),
    (["--port", "-1"], ["--port", "0-65535"]),
])
def test_bad_flags_fail_before_anything_loads(args, needles, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    import kvroute_gpu_worker.__main__ as entry

    monkeypatch.setattr(entry, "build_engine", lambda a: pytest.fail("built an engine for bad flags"))
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("kvroute_gpu_worker: ") and err.count("\n") == 1, err
    for n in needles:
        assert n in err, err


@pytest.mark.parametrize("args,needles", [
    (["--device", "gpu"], ["--device gpu", "cuda"]),
    (["--port", "99999"], ["--port", "99999"]),
    (["--calibrate", "--chunked-prefill-size", "32", "--out", "c32.json"], ["--chunked-prefill-size", ">= 64"]),
    (["--kv-events-config", '{"buffer_steps": "x"}'], ["buffer_steps", "'x'"]),
    (["--kv-events-config", '{"topic": 5}'], ["topic"]),
])
def test_bad_flags_print_one_line(args, needles, tmp_path):
    assert_one_line(run_cli(*args, cwd=tmp_path), *needles)


def test_float16_on_cpu_is_refused_where_torch_cannot_run_it():
    import torch

    try:
        x = torch.ones(2, 2, dtype=torch.float16)
        x @ x
    except RuntimeError:
        assert_one_line(run_cli("--device", "cpu", "--dtype", "float16", "--port", "0"), "--dtype float16", "CPU")
    else:
        pytest.skip("this torch runs float16 on CPU")


def test_kv_events_port_in_use_is_one_line():
    import zmq

    ctx = zmq.Context.instance()
    holder = ctx.socket(zmq.PUB)
    holder.setsockopt(zmq.LINGER, 0)
    port = holder.bind_to_random_port("tcp://127.0.0.1")
    try:
        r = run_cli("--port", "0", "--kv-events-config", json.dumps({"endpoint": f"tcp://127.0.0.1:{port}"}))
        assert_one_line(r, "--kv-events-config", str(port))
    finally:
        holder.close()


def test_missing_torch_says_which_python_to_use(tmp_path):
    # A `torch` that cannot be imported, ahead of the real one on the path.
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path), PKG_DIR])}
    r = run_cli("--port", "0", env=env)
    assert_one_line(r, "needs torch", "python3")
