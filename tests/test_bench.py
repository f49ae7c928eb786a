"""
bench.py: every mode runs at --quick sizes from the command line, as a user types it, and its --json
holds the figures with values that make sense; bad input is one line and exit code 2.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bench
from configurator import ConfigError
from model import GPTConfig
from sizing import flops_per_token

ROOT = Path(__file__).resolve().parent.parent


def run_bench(tmp_path, *args):
    out = tmp_path / "bench.json"
    # one thread: with the CPU shared (other tests, other jobs), two OpenMP threads wait on each other
    # at every small op and a seconds-long run becomes a minutes-long one
    p = subprocess.run([sys.executable, "bench.py", *args, "--quick", "--threads=1", "--json", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("machine: torch "), p.stdout
    return json.loads(out.read_text()), p.stdout


def test_slope_is_the_log_log_exponent():
    xs = [128, 256, 512, 1024]
    assert bench.slope(xs, [3 * x**2 for x in xs]) == pytest.approx(2.0)
    assert bench.slope(xs, [7 * x for x in xs]) == pytest.approx(1.0)
    assert math.isnan(bench.slope([128], [1.0]))  # one point fits no line
    assert bench.slope(xs, [0, 0, 5 * 512**2, 5 * 1024**2]) == pytest.approx(2.0)  # unmeasurable zeros left out


def test_bare_flags_and_json_path_become_key_value():
    defaults = {**bench.COMMON, **bench.DEFAULTS["train"]}
    argv = ["config/x.py", "--compile", "--json", "out.json", "--batch_size=3", "--profile=false"]
    assert bench.normalize_argv(argv, defaults) == [
        "config/x.py", "--compile=true", "--json=out.json", "--batch_size=3", "--profile=false"]


def test_peak_measures_positive_gflops(tmp_path):
    r, out = run_bench(tmp_path, "--mode=peak")
    assert set(r["gflops_by_size"]) == {"256", "512"}  # --quick's sizes
    assert r["peak_gflops"] == max(r["gflops_by_size"].values()) > 0
    assert f"peak {r['peak_gflops']:.1f} GFLOP/s" in out


def test_train_step_rate_flops_and_mfu(tmp_path):
    # a train.py config file: its model keys apply, its training-only keys (max_iters) are ignored,
    # and the command line wins over it
    cfg = tmp_path / "cfg.py"
    cfg.write_text("n_layer = 1\nn_head = 2\nn_embd = 32\nblock_size = 16\nbatch_size = 8\nmax_iters = 5\n")
    data = tmp_path / "data"  # a dataset as prepare.py writes it, for --data_dir's batch timing
    data.mkdir()
    for split, n in (("train", 5000), ("val", 500)):
        np.random.default_rng(0).integers(0, 65, n, dtype=np.uint16).tofile(data / f"{split}.bin")
    chars = [chr(c) for c in range(32, 102)]  # vocab 70, as a dataset other than tiny Shakespeare has
    (data / "meta.json").write_text(json.dumps({"tokenizer": "char", "vocab_size": 70, "itos": chars, "dtype": "uint16"}))
    r, out = run_bench(tmp_path, "--mode=train", str(cfg), "--batch_size=3", "--profile", f"--data_dir={data}")
    assert r["model"]["n_layer"] == 1 and r["model"]["n_embd"] == 32 and r["batch_size"] == 3
    assert r["model"]["vocab_size"] == 70 and "vocab 70," in out  # the dataset's, as train.py would build
    config = GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=70, bias=False)  # bench: nanoGPT recipe, no biases
    assert r["tokens_per_step"] == 3 * 16
    assert r["flops_per_step"] == flops_per_token(config, 16) * 3 * 16  # sizing.py's 6N + 12LHQT
    assert r["tokens_per_s"] == pytest.approx(r["tokens_per_step"] / (r["step_ms"] / 1e3))
    assert r["gflops"] == pytest.approx(r["flops_per_step"] / (r["step_ms"] / 1e3) / 1e9)
    assert 0 < r["mfu"] < 1.5
    assert r["mfu"] == pytest.approx(r["gflops"] / r["peak"]["peak_gflops"])  # the peak of the same run
    assert all(ms > 0 for ms in r["phase_ms"].values())
    assert r["optimizer"]["fused"] is True  # configure_optimizers picks the fused CPU AdamW
    ops = [row["op"] for row in r["profile"]]
    assert any(op in ("aten::mm", "aten::addmm") for op in ops), ops
    assert 0 < sum(row["share"] for row in r["profile"]) <= 1 + 1e-9
    assert "top ops by self CPU time" in out and "MFU" in out
    assert r["data"]["ms_per_batch"] > 0 and 0 < r["data"]["share_of_step"] < 1


def test_sample_cache_matches_recompute(tmp_path):
    r, out = run_bench(tmp_path, "--mode=sample")
    assert r["identical"] is True and r["first_mismatch"] is None
    assert r["distinct_tokens"] > 3  # the sharp re-drawn weights make greedy decoding vary
    assert r["cache_tokens_per_s"] > 0 and r["recompute_tokens_per_s"] > 0
    assert r["speedup"] == pytest.approx(r["cache_tokens_per_s"] / r["recompute_tokens_per_s"])
    assert "identical" in out


def test_attention_sweep_slopes(tmp_path):
    r, out = run_bench(tmp_path, "--mode=attention", "--backward")
    assert r["T"] == [64, 128, 256, 512, 1024] and r["backward"] is True
    for row in r["rows"]:
        assert row["manual_ms"] > 0 and row["sdpa_ms"] > 0
    assert all(math.isfinite(r["slopes"][k]) for k in ("manual_time", "sdpa_time"))
    assert "log-log slope" in out
    if r["memory_method"] is None:
        pytest.skip("no peak-memory measurement on this platform")
    s = r["slopes"]
    assert 1.7 < s["manual_memory_large_T"] < 2.3, s  # the T x T scores: quadratic
    last = r["rows"][-1]
    assert last["manual_bytes"] >= last["scores_bytes"]  # at least one full score matrix materialised
    assert last["sdpa_bytes"] < last["scores_bytes"] / 2  # the fused kernel never holds them all


@pytest.mark.parametrize("args, message", [
    (["--mode=nope"], "mode must be one of peak, train, sample, attention"),
    (["--mode=peak", "--batch_size=3"], "unknown config key 'batch_size'"),
    (["--mode=train", "--dtype=float16"], "float32 or bfloat16, not cpu float16"),
    (["--mode=train", "--dtype=int8"], "dtype must be auto or one of"),
    (["--mode=train", "--device=gpu"], "device='gpu' is not a torch device"),
    (["--mode=attention", "--t_min=100", "--t_max=120"], "no power of 2 between t_min=100 and t_max=120"),
    (["--mode=train", "--optimizer=sgd"], "optimizer must be default, fused, foreach, forloop"),
    (["--mode=sample", "--n_head=5"], "must be divisible by n_head=5"),
    (["--mode=attention", "--t_min=512", "--t_max=256"], "t_max >= t_min"),
])
def test_bad_input_is_a_config_error(args, message):
    with pytest.raises(ConfigError, match=message):
        bench.main(args + ["--quick", "--repeats=1", "--warmup=1", "--peak_sizes=64"] * (args[0] == "--mode=train"))


def test_bad_input_on_the_command_line_is_one_line_and_exit_2():
    p = subprocess.run([sys.executable, "bench.py", "--mode=sample", "--new_tokens=lots"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr == "error: config key 'new_tokens' on the command line expects int, got 'lots'\n"
