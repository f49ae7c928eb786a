"""
bench.py: every mode runs at --quick sizes from the command line, as a user types it, and its --json
holds the figures with values that make sense; bad input is one line and exit code 2.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bench
from configurator import ConfigError
from conftest import run_script
from model import GPTConfig
from sizing import flops_per_token

ROOT = Path(__file__).resolve().parent.parent


def run_bench(tmp_path, *args, real=False):
    """python bench.py args --quick: its --json and stdout. Run in this process (conftest.run_script), or,
    real, as a process of its own (what measures the process's own memory needs one)."""
    out = tmp_path / "bench.json"
    # one thread: with the CPU shared (other tests, other jobs), two OpenMP threads wait on each other
    # at every small op and a seconds-long run becomes a minutes-long one
    args = ["bench.py", *args, "--quick", "--num_threads=1", "--json", str(out)]
    p = (subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120) if real
         else run_script(*args))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("machine: torch "), p.stdout
    return json.loads(out.read_text()), p.stdout


def test_machine_line_says_how_idle_threads_wait(monkeypatch):
    """The OpenMP wait settings a run inherited move small steps by ~10%: the machine line names them."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("GOMP_SPINCOUNT", "1000")
    assert "OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=1000" in bench.machine_line(bench.machine_info())
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.delenv("GOMP_SPINCOUNT")
    line = bench.machine_line(bench.machine_info())
    assert "OMP_WAIT_POLICY" not in line and "GOMP_SPINCOUNT" not in line, line


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
    # its figures are a smoke test's: said, as the race's and attention's quick runs say it (a fresh user
    # read "159.3% of the peak" from --mode=train --quick with no such line)
    assert "peak: median of 3 after 1 warm-up (--quick: tiny sizes, a smoke test whose figures mean nothing)" in out
    again, _ = run_bench(tmp_path, "--mode=peak")  # its own --json of the first run, which it replaces
    assert again["written_by"] == "glassgpt bench.py" and again["peak_gflops"] > 0


def test_a_failed_json_write_keeps_the_earlier_report(tmp_path, monkeypatch):
    """--json is written beside and renamed over: a disk full mid-write leaves the last run's report whole."""
    run_bench(tmp_path, "--mode=peak")
    before = (tmp_path / "bench.json").read_text()

    def full_disk(obj, f, **kw):
        f.write('{"written_by": "glassgpt bench.py", "peak')
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json, "dump", full_disk)
    p = run_script("bench.py", "--mode=peak", "--quick", "--num_threads=1", "--json", tmp_path / "bench.json")
    assert p.returncode != 0 and p.stderr.strip().endswith("No space left on device"), p.stderr
    assert (tmp_path / "bench.json").read_text() == before
    assert sorted(f.name for f in tmp_path.iterdir()) == ["bench.json"]  # no temporary left behind


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
    assert r["optimizer"]["name"] == "adamw" and ", AdamW fused=True foreach=None\n" in out and "Muon" not in out
    ops = [row["op"] for row in r["profile"]]
    assert any(op in ("aten::mm", "aten::addmm") for op in ops), ops
    assert 0 < sum(row["share"] for row in r["profile"]) <= 1 + 1e-9
    assert "top ops by self CPU time" in out and "MFU" in out
    assert all(f"\n{op} " in out for op in ops)  # whole names: cut short, forward and backward kernels read alike
    assert r["data"]["ms_per_batch"] > 0 and 0 < r["data"]["share_of_step"] < 1
    # the Linear matmuls alone: c_attn, c_proj, c_fc, mlp.c_proj and the head, forward and backward
    mm = r["matmuls"]
    assert mm["layers"] == 5
    assert mm["flops"] == 6 * 3 * 16 * 32 * (3 * 32 + 32 + 4 * 32 + 4 * 32 + 70)
    assert mm["share_of_peak"] == pytest.approx(mm["flops"] / (mm["ms"] / 1e3) / (r["peak"]["peak_gflops"] * 1e9))
    assert f"matmuls alone (the model's 5 Linear layers, forward and backward at the step's shapes): {mm['ms']:.2f} ms" in out


def test_profile_prints_no_library_noise():
    """--profile's stderr stays empty: torch 2.13's profiler wrote two 'USDT: ... profiler_start' lines there."""
    p = subprocess.run([sys.executable, "bench.py", "--mode=train", "--profile", "--quick", "--num_threads=1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "top ops by self CPU time" in p.stdout, p.stderr
    assert p.stderr == ""


def test_train_says_which_optimizer_ran(tmp_path):
    """config/tiny.py trains with Muon for the blocks' matrices and AdamW for the rest: the step bench.py
    times is that one, and its line and JSON say so (they said AdamW whatever ran)."""
    r, out = run_bench(tmp_path, "--mode=train", "config/tiny.py", "--n_layer=1", "--n_embd=32", "--block_size=16",
                       "--batch_size=2", "--repeats=2", "--warmup=1")
    assert r["optimizer"] == {"name": "muon+adamw", "setting": "muon", "fused": True, "foreach": None,
                              "muon_matrices": 4}  # c_attn, attn.c_proj, c_fc, mlp.c_proj
    assert "Muon for 4 block matrices + AdamW fused=True foreach=None for the rest" in out


def test_sample_cache_matches_recompute(tmp_path):
    r, out = run_bench(tmp_path, "--mode=sample")
    assert r["identical"] is True and r["first_mismatch"] is None
    assert r["distinct_tokens"] > 3  # the sharp re-drawn weights make greedy decoding vary
    assert r["cache_tokens_per_s"] > 0 and r["recompute_tokens_per_s"] > 0
    assert r["speedup"] == pytest.approx(r["cache_tokens_per_s"] / r["recompute_tokens_per_s"])
    assert "identical" in out
    assert r["dtype"] == "float32" and "prompt, float32" in out  # auto, as sample.py: 64 wide samples in float32


def test_sample_times_bf16_autocast_when_asked(tmp_path, monkeypatch):
    import configurator
    monkeypatch.setattr(configurator, "cpu_has_native_bf16", lambda: True)  # no warning about emulated bf16
    r, out = run_bench(tmp_path, "--mode=sample", "--dtype=bfloat16")
    assert r["dtype"] == "bfloat16" and "prompt, bfloat16" in out and r["cache_tokens_per_s"] > 0
    r, _ = run_bench(tmp_path, "--mode=sample", "--n_embd=512", "--n_head=8")  # auto: bf16 from 512 wide
    assert r["dtype"] == "bfloat16"


def test_attention_sweep_slopes(tmp_path):
    r, out = run_bench(tmp_path, "--mode=attention", "--backward", real=True)  # the peak resident set: its own
    assert r["T"] == [64, 128, 256, 512, 1024] and r["backward"] is True
    for row in r["rows"]:
        assert row["manual_ms"] > 0 and row["sdpa_ms"] > 0
    assert all(math.isfinite(r["slopes"][k]) for k in ("manual_time", "sdpa_time"))
    assert "log-log slope" in out
    # at --quick's sizes the memory slopes are not attention's growth: said under them, and flagged in the JSON
    assert r["memory_slopes_meaningful"] is False and "these memory slopes are a smoke test" in out
    if r["memory_method"] is None:
        pytest.skip("no peak-memory measurement on this platform")
    s = r["slopes"]
    assert 1.7 < s["manual_memory_large_T"] < 2.3, s  # the T x T scores: quadratic
    last = r["rows"][-1]
    assert last["manual_bytes"] >= last["scores_bytes"]  # at least one full score matrix materialised
    assert last["sdpa_bytes"] < last["scores_bytes"] / 2  # the fused kernel never holds them all


def test_attention_times_bf16_inputs_too(tmp_path):
    """--dtype=bfloat16: q, k and v in bf16 (how docs/cpu.md compares torch's CPU kernel in the two dtypes),
    the score matrix's size in bf16's 2 bytes."""
    r, out = run_bench(tmp_path, "--mode=attention", "--backward", "--dtype=bfloat16", "--t_max=128")
    assert r["dtype"] == "bfloat16" and r["T"] == [64, 128]
    assert all(row["manual_ms"] > 0 and row["sdpa_ms"] > 0 for row in r["rows"])
    assert "q, k, v of shape (1, 2, T, 32), bfloat16" in out and "T*T*2 MiB" in out
    assert all(row.get("scores_bytes") in (None, 1 * 2 * row["T"] ** 2 * 2) for row in r["rows"])  # B nh T T, 2 bytes


@pytest.mark.parametrize("args, message", [
    (["--mode=nope"], "mode must be one of peak, train, sample, attention"),
    (["--mode=peak", "--batch_size=3"], "unknown config key 'batch_size'"),
    (["--mode=peak", "--threads=1"], r"unknown config key 'threads' on the command line \(did you mean num_threads\?\)"),
    (["--mode=train", "--dtype=float16"], "float16 on a CPU"),
    (["--mode=train", "--dtype=int8"], "dtype must be auto or one of"),
    (["--mode=train", "--device=gpu"], "device='gpu' is not a torch device"),
    (["--mode=attention", "--t_min=100", "--t_max=120"], "no power of 2 between t_min=100 and t_max=120"),
    (["--mode=train", "--optimizer=sgd"], "optimizer must be default, fused, foreach, forloop"),
    (["--mode=sample", "--n_head=5"], "must be divisible by n_head=5"),
    (["--mode=attention", "--t_min=512", "--t_max=256"], "t_max >= t_min"),
    (["--mode=peak", "--peak_sizes=256,0"], "peak_sizes must be comma-separated integers >= 1, got '256,0'"),
])
def test_bad_input_is_a_config_error(args, message):
    with pytest.raises(ConfigError, match=message):
        bench.main(args + ["--quick", "--repeats=1", "--warmup=1", "--peak_sizes=64"] * (args[0] == "--mode=train"))


def test_bad_input_on_the_command_line_is_one_line_and_exit_2():
    p = subprocess.run([sys.executable, "bench.py", "--mode=sample", "--new_tokens=lots"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr == "error: config key 'new_tokens' on the command line expects int, got 'lots'\n"


@pytest.mark.parametrize("args, error", [
    (["--mode=peak", "--peak_sizes=0"], "peak_sizes must be comma-separated integers >= 1, got '0'"),
    (["--mode=train", "--optimizer=sgd"], "optimizer must be default, fused, foreach, forloop, muon; got 'sgd'"),
    (["--mode=train", "--n_head=3"], "GPTConfig.n_embd=128: must be divisible by n_head=3"),
    (["--mode=train", "--data_dir=NOPE"], "no dataset folder NOPE (set dataset or data_dir)"),  # its batches are timed
    (["--mode=sample", "--new_tokens=0"], "new_tokens and prompt_len must be >= 1, got 0 and 1"),
    (["--mode=attention", "--t_min=100", "--t_max=120"], "no power of 2 between t_min=100 and t_max=120"),
    (["--mode=peak", "--num_threads=-2"], "num_threads must not be negative, got -2 (0: torch's default)"),
    (["--mode=peak", "--json=HERE"], "cannot write --json=HERE: it is a folder"),
    (["--mode=peak", "--json=HERE/file/x.json"], "cannot write --json=HERE/file/x.json: HERE/file is not a folder"),
    # a user's own file of that name (README.md, notes): it was written over after the measuring
    (["--mode=peak", "--json=HERE/file"], "cannot write --json=HERE/file: HERE/file exists and bench.py did not "
                                          "write it: remove it or choose another name"),
    (["--mode=peak", "--json=HERE/notes.json"], "cannot write --json=HERE/notes.json: HERE/notes.json exists and "
                                                "bench.py did not write it: remove it or choose another name"),
])
def test_bad_input_is_the_only_output_in_every_mode(tmp_path, args, error):
    """Each mode checks its keys before the machine line (as the race does): the error is all that is said,
    not a line after 'machine: ...' (and, for data_dir and peak_sizes, not after the timing)."""
    nope = str(tmp_path / "nope")  # (in this process: the test above runs bench.py's bad input for real)
    (tmp_path / "file").touch()  # HERE: a folder where --json wants a file, with a file where it wants a folder
    (tmp_path / "notes.json").write_text('{"my notes": "on glassgpt bench.py"}')  # its name, not its mark
    fill = lambda text: text.replace("NOPE", nope).replace("HERE", str(tmp_path))  # noqa: E731
    p = run_script("bench.py", *map(fill, args))
    assert (p.returncode, p.stdout, p.stderr) == (2, "", f"error: {fill(error)}\n")


# ----------------------------------------------------------------------------- race

FAKE_NANOGPT = """\
import json, sys
# nanoGPT's train.py as the race sees it: its output format, a val loss falling evenly from 4.0 to 1.25 over
# the run, each step 10 ms, and 500 ms for a step that also held an eval (nanoGPT times the eval into the next)
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
json.dump(sys.argv[1:], open("ARGV", "w"))
n, k = int(args["max_iters"]), int(args["eval_interval"])
for it in range(n + 1):
    if it % k == 0:
        print(f"step {it}: train loss {4.0 - 2.75 * it / n:.4f}, val loss {4.0 - 2.75 * it / n:.4f}")
    print(f"iter {it}: loss 3.0000, time {500.0 if it % k == 0 else 10.0:.2f}ms, mfu -100.00%")
"""


def make_race(tmp_path, same_data=True):
    """A fake nanoGPT checkout and a glassgpt config training a tiny model on the same synthetic bins."""
    ng = tmp_path / "nanoGPT"
    ng_data = ng / "data" / "shakespeare_char"
    ng_data.mkdir(parents=True)
    (ng / "train.py").write_text(FAKE_NANOGPT.replace('"ARGV"', repr(str(tmp_path / "argv.json"))))
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    tokens = np.where(rng.random(6000) < 0.1, rng.integers(0, 8, 6000), np.arange(6000) % 8).astype(np.uint16)
    for split, part in (("train", tokens[:5000]), ("val", tokens[5000:])):
        part.tofile(data / f"{split}.bin")
        (part if same_data else part[::-1]).tofile(ng_data / f"{split}.bin")
    (data / "meta.json").write_text(json.dumps({"tokenizer": "char", "vocab_size": 8, "dtype": "uint16",
                                                "itos": [chr(65 + i) for i in range(8)]}))
    cfg = tmp_path / "gg.py"
    cfg.write_text(f"data_dir = {str(data)!r}\nn_layer = 1\nn_head = 2\nn_embd = 16\nblock_size = 16\n"
                   "batch_size = 8\ngradient_accumulation_steps = 1\nmax_iters = 12\nlr_decay_iters = 12\n"
                   "warmup_iters = 2\nlearning_rate = 1e-2\neval_iters = 2\ndevice = 'cpu'\ncompile = 'false'\n"
                   "dtype = 'float32'\nnum_threads = 1\noptimizer = 'muon'\n")
    return ng, cfg


def test_race_times_each_threshold_from_the_eval_lines(tmp_path):
    """The race against a fake nanoGPT (its output format, known step times) and a real, tiny glassgpt run:
    the README recipe is what nanoGPT is given, the threshold times are exact sums of step times with the
    eval-holding steps counted as typical ones, and glassgpt's side is read from its own log."""
    ng, cfg = make_race(tmp_path)
    r, out = run_bench(tmp_path, "--mode=race", f"--nanogpt={ng}", f"--glassgpt_config={cfg}",
                       "--nanogpt_iters=20", "--nanogpt_eval_interval=4", "--eval_interval=4",
                       "--thresholds=1.88,1.70,1.60,0.5", "--same_time=false")  # the next test's
    ngr = r["sides"]["nanoGPT"]
    assert ngr["iters"] == 21  # nanoGPT runs iterations 0..max_iters
    assert ngr["train_s"] == pytest.approx(21 * 0.010)  # the eval-holding steps count 10 ms, not 500
    # val 4.0 - 0.1375 * iter reaches 1.88 first at the eval of iteration 16 (1.80), 1.70 and 1.60 at 20
    assert ngr["thresholds"]["1.88"]["train_s"] == pytest.approx(0.16)
    assert ngr["thresholds"]["1.70"]["train_s"] == pytest.approx(0.20)
    assert ngr["thresholds"]["1.60"]["train_s"] == pytest.approx(0.20)
    assert ngr["thresholds"]["0.50"] == {"train_s": None, "wall_s": None}  # never reached: said so
    assert ngr["final_val"] == pytest.approx(1.25)
    assert "not reached" in out and "time to val <= 1.88" in out and "nanoGPT's whole run" in out
    assert "a quick race (--quick): a smoke test" in out  # its figures are not to be quoted
    gg = r["sides"]["glassgpt"]
    assert gg["iters"] == 12 and gg["train_s"] > 0 and gg["wall_s"] > gg["train_s"]
    evals = gg["runs"][0]["evals"]
    assert [e["iter"] for e in evals] == list(range(0, 13, 4))  # the race's eval spacing, not the config's
    assert gg["final_val"] == evals[-1]["val_loss"] < 1.88  # the synthetic stream is easy to learn
    t188 = gg["thresholds"]["1.88"]["train_s"]
    assert 0 < t188 <= gg["train_s"]
    assert r["targets"]["time_to_first_threshold_over_nanogpt_run"] == pytest.approx(t188 / ngr["train_s"])
    assert gg["tokens_per_s"] == pytest.approx(12 * 8 * 16 / gg["train_s"])
    assert ngr["tokens_per_s"] == pytest.approx(21 * 12 * 64 / ngr["train_s"])
    # glassgpt's train.py ran nanoGPT's own command (the same model and batch): the same-step ratio and MFU
    same = r["sides"][bench.SAME]
    assert same["iters"] == 20 and same["runs"][0]["evals"][-1]["iter"] == 20
    assert same["tokens_per_s"] == pytest.approx(20 * 12 * 64 / same["train_s"])
    t = r["targets"]
    assert t["same_step_tokens_per_s_ratio"] == pytest.approx(same["tokens_per_s"] / ngr["tokens_per_s"])
    step = bench.GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=8, bias=False)
    # against the peak of the dtype that run trained in, dtype=auto's for nanoGPT's width on this CPU
    assert t["same_step_dtype"] == bench.resolve_device("cpu", "auto", 128)[2]
    assert t["same_step_mfu"] == pytest.approx(same["tokens_per_s"] * bench.flops_per_token(step, 64) / 1e9
                                               / t["same_step_peak_gflops"])
    assert f"of the {t['same_step_dtype']} peak vs nanoGPT's" in out
    # ... and how high that MFU could go: the step's matmuls alone, 4 layers of 4 Linears and the head
    assert 0 < t["same_step_matmuls_share_of_peak"] and "the same step's matmuls alone (the model's 17 Linear" in out
    assert "the same step (nanoGPT's model and batch)" in out and "glassgpt, the same command" in out
    # all of glassgpt's run is inside 3 minutes: its val loss after 180 s of training is its last eval's
    assert t["glassgpt_val_at_3_minutes"] == gg["final_val"] and "after 180 s of training" in out
    assert f"its whole run being {gg['train_s']:.1f} s" in out  # a short config's run is not read as 3 minutes


def test_race_gives_glassgpt_nanogpts_training_time_as_a_budget(tmp_path):
    """--same_time: the main job runs again with --max_seconds set to the training seconds nanoGPT's run
    just took (the fake's 101 steps of 10 ms: 1.01 s), so its lr decays over them and it ends there."""
    ng, cfg = make_race(tmp_path)
    cfg.write_text(cfg.read_text() + "max_iters = 100000\nlr_decay_iters = 100000\nmax_seconds = 3\n")
    r, out = run_bench(tmp_path, "--mode=race", f"--nanogpt={ng}", f"--glassgpt_config={cfg}",
                       "--nanogpt_iters=100", "--nanogpt_eval_interval=10", "--eval_interval=50",
                       "--same_recipe=false", "--glassgpt_iters=0")  # the config's own budget, not --quick's cut
    gg, same_time = r["sides"]["glassgpt"], r["sides"][bench.SAME_TIME]
    assert 2.9 < gg["train_s"] < 3.5  # the config's own budget, 3 s
    assert 0.9 < same_time["train_s"] < 1.4 and same_time["iters"] < gg["iters"]  # nanoGPT's 1.01 s
    assert r["targets"]["glassgpt_val_in_nanogpt_time"] == same_time["final_val"]
    assert same_time["final_val"] == same_time["runs"][0]["evals"][-1]["val_loss"]
    assert "given nanoGPT's training time as its budget" in out and "the same, nanoGPT's time" in out


def test_quick_race_cuts_glassgpts_runs_to_the_quick_nanogpt_sides_iterations(tmp_path):
    """--quick once shortened nanoGPT's side alone, and glassgpt's still trained config/tiny.py's 3 minutes (with
    its evals): its runs now end at the quick nanoGPT side's iterations, the lr decaying over them; a config
    already shorter keeps its own (the tests' races are not made longer)."""
    ng, cfg = make_race(tmp_path)
    tiny = tmp_path / "tiny.py"  # the main job's config, on the race's synthetic text
    tiny.write_text((ROOT / "config" / "tiny.py").read_text() + f"data_dir = {str(tmp_path / 'data')!r}\n")
    quick = {**bench.COMMON, **bench.DEFAULTS["race"], **bench.QUICK["race"], "quick": True, "nanogpt": str(ng)}
    n = quick["nanogpt_iters"]
    _, _, args, gg = bench.race_plan(dict(quick, glassgpt_config=str(tiny)))
    assert args == [str(tiny), f"--max_iters={n}", f"--lr_decay_iters={n}"]
    assert (gg["max_iters"], gg["lr_decay_iters"], gg["max_seconds"]) == (n, n, 180)
    _, _, args, gg = bench.race_plan(dict(quick, glassgpt_config=str(cfg)))  # 12 iterations already
    assert args == [str(cfg)] and gg["max_iters"] == 12
    with pytest.raises(ConfigError, match="glassgpt_iters must be >= 0"):
        bench.race_plan(dict(quick, glassgpt_config=str(tiny), glassgpt_iters=-1))


def test_race_argv_is_nanogpts_readme_recipe(tmp_path):
    ng, cfg = make_race(tmp_path)
    (ng / "train.py").write_text(FAKE_NANOGPT.replace('"ARGV"', repr(str(tmp_path / "argv.json"))))
    run_bench(tmp_path, "--mode=race", f"--nanogpt={ng}", f"--glassgpt_config={cfg}", "--nanogpt_iters=20",
              "--nanogpt_eval_interval=10", "--eval_interval=20", "--same_recipe=false", "--same_time=false")
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[:11] == ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
                         "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
                         "--n_embd=128", "--dropout=0.0"]
    assert "--max_iters=20" in argv and "--lr_decay_iters=20" in argv and "--eval_interval=10" in argv
    # nanoGPT's schedule divides 0/0 where its 100 warmup iterations reach lr_decay_iters: a short race halves it
    assert "--warmup_iters=10" in argv and "--warmup_iters=10" in bench.same_recipe_args("D", 20, 10)
    assert bench.short_run_warmup(100) == ["--warmup_iters=50"] and bench.short_run_warmup(2000) == []
    assert bench.same_recipe_args("D", 20, 10)[:11] == argv[:11]  # glassgpt's side of the same step: the same
    assert {"--bias=False", "--data_dir=D"} <= set(bench.same_recipe_args("D", 20, 10))  # ... with nanoGPT's bias
    out_dir = next(a for a in argv if a.startswith("--out_dir="))[len("--out_dir="):]
    assert not out_dir.startswith(str(ng))  # nothing is written into the user's checkout
    assert not os.path.exists(out_dir)  # a temporary folder, gone after the race


@pytest.mark.parametrize("case, message", [
    ("no path", "needs --nanogpt=PATH, a nanoGPT checkout: git clone https://github.com/karpathy/nanoGPT"),
    ("not a checkout", "has no train.py: not a nanoGPT checkout"),
    ("glassgpt", "is a glassgpt checkout, not nanoGPT's"),
    ("other data", "different train.bin/val.bin"),
])
def test_race_refuses_without_a_prepared_nanogpt_on_the_same_data(case, message, tmp_path):
    ng, cfg = make_race(tmp_path, same_data=case != "other data")
    path = {"no path": "", "not a checkout": str(tmp_path), "other data": str(ng), "glassgpt": ROOT}[case]
    p = run_script("bench.py", "--mode=race", f"--nanogpt={path}", f"--glassgpt_config={cfg}")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), p.stderr
    assert message in p.stderr
    assert p.stdout == ""  # the error alone: no machine line before it


def test_race_tells_how_to_give_nanogpt_the_text_glassgpt_used(tmp_path):
    """nanoGPT's prepare.py reads input.txt beside it (downloading tiny Shakespeare where there is none):
    the race says to copy the text our prepare.py used, input.txt, or plays.txt where it fell back to the
    plays from PyPI and kept no input.txt; before it has run, to run it first."""
    ours, ng = tmp_path / "data", "ng/data/shakespeare_char"
    ours.mkdir()
    assert f"python {ours}/prepare.py, then copy the input.txt" in bench.give_nanogpt_our_text(str(ours), ng)
    (ours / "plays.txt").write_text("fallback")
    assert bench.give_nanogpt_our_text(str(ours), ng) == f"cp {ours}/plays.txt {ng}/input.txt && python {ng}/prepare.py"
    (ours / "input.txt").write_text("tiny Shakespeare")  # the one prepare.py reads whenever it is there
    assert bench.give_nanogpt_our_text(str(ours), ng) == f"cp {ours}/input.txt {ng}/input.txt && python {ng}/prepare.py"


@pytest.mark.parametrize("max_seconds, max_iters, train_s, iters, short", [
    (180, 5000, 179.6, 1650, False),  # ended by its 3-minute budget, the race's sum of steps a little under it
    (175, 5000, 175.1, 1600, True),  # ended by a shorter budget: not 3 minutes of training
    (0, 2000, 176.0, 2000, True),  # no budget: max_iters ended it before 3 minutes
    (0, 2000, 200.0, 2000, False),  # ... or after them
    (180, 100, 12.3, 100, True),  # --quick's 100 iterations, well inside the budget
])
def test_race_says_when_glassgpts_run_was_shorter_than_the_3_minutes_it_reports(max_seconds, max_iters, train_s,
                                                                               iters, short):
    """The line 'val loss after 180 s of training' adds 'its whole run being X s' when the run trained less than
    that, from glassgpt's own settings: it was a hard-coded 'under 170 s', wrong for a budget of 175 s or a
    max_iters run of 176 s."""
    def run(train_s, iters):
        evals = [{"iter": 0, "val_loss": 4.0, "wall_s": 1.0}, {"iter": iters, "val_loss": 1.5, "wall_s": train_s + 9}]
        return {"evals": evals, "before": {0: 0.0, iters: train_s}, "train_s": train_s, "wall_s": train_s + 9,
                "iters": iters, "final_val": 1.5}
    runs = {"nanoGPT": [run(100.0, 2001)], "glassgpt": [run(train_s, iters)]}
    cfg = {"repeats": 1, "quick": False, "glassgpt_config": "gg.py"}
    _, lines = bench.race_report(runs, [1.88], {"nanoGPT": 768, "glassgpt": 2048}, cfg,
                                 {"max_seconds": max_seconds, "max_iters": max_iters}, {"float32": 100.0},
                                 "float32", 1e6)
    line = next(ln for ln in lines if ln.startswith("glassgpt's val loss after 180 s of training"))
    assert (f", its whole run being {train_s:.1f} s: 1.5000" in line) == short, line


def test_train_seconds_count_eval_steps_as_typical_ones():
    # steps 0 and 4 also held an eval: each counts as the median of the others, 0.15 s
    before, total = bench.train_seconds({0: 5.0, 1: 0.1, 2: 0.2, 3: 0.1, 4: 9.0, 5: 0.3}, {0, 4})
    assert before[0] == 0 and before[1] == pytest.approx(0.15) and before[4] == pytest.approx(0.55)
    assert total == pytest.approx(0.15 * 2 + 0.1 + 0.2 + 0.1 + 0.3) and before[6] == total
