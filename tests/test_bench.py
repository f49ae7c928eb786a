"""
bench.py: every mode at --quick sizes, run as a user types it; its figures are checked against each other
(tokens/s against the step time, MFU against the peak, cache against recompute), bad input is one line
and exit code 2, and the race is run against a fake nanoGPT checkout (a script printing nanoGPT's lines).
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import bench
from conftest import run_script
from model import GPT, GPTConfig
from sizing import flops_per_token, forward_flops

ROOT = Path(__file__).absolute().parent.parent


def run_bench(tmp_path, *args):
    """python bench.py args --quick=True (in this process): its --json and its stdout."""
    out = tmp_path / "bench.json"
    p = run_script("bench.py", *args, "--quick=True", "--num_threads=1", f"--json={out}")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("machine: torch "), p.stdout
    return json.loads(out.read_text()), p.stdout


def test_slope_is_the_log_log_exponent():
    xs = [128, 256, 512, 1024]
    assert bench.slope(xs, [3 * x**2 for x in xs]) == pytest.approx(2.0)
    assert bench.slope(xs, [7 * x for x in xs]) == pytest.approx(1.0)
    assert math.isnan(bench.slope([128], [1.0]))  # one point fits no line
    assert bench.slope(xs, [0, 0, 5 * 512**2, 5 * 1024**2]) == pytest.approx(2.0)  # unmeasured zeros left out


def test_peak_is_the_best_size(tmp_path):
    r, out = run_bench(tmp_path, "--mode=peak")
    assert set(r["gflops_by_size"]) == {"256", "512"}  # --quick's sizes
    assert r["peak_gflops"] == max(r["gflops_by_size"].values()) > 0
    assert f"peak {r['peak_gflops']:.1f} GFLOP/s" in out and "a smoke test whose figures mean nothing" in out


def test_train_step_rate_flops_mfu_and_profile(tmp_path):
    # a train.py config file: its model keys apply, its training-only keys are ignored, the command line wins
    cfg = tmp_path / "cfg.py"
    cfg.write_text("n_layer = 1\nn_head = 2\nn_embd = 32\nblock_size = 16\nbatch_size = 8\nmax_iters = 5\n")
    data = tmp_path / "data"  # a dataset's meta gives the vocab, as train.py builds the model
    data.mkdir()
    (data / "meta.json").write_text(json.dumps({"tokenizer": "char", "vocab_size": 70, "dtype": "uint16",
                                                "itos": [chr(c) for c in range(32, 102)]}))
    r, out = run_bench(tmp_path, "--mode=train", cfg, "--batch_size=3", "--profile=True", f"--data_dir={data}",
                       "--dtype=float32")
    assert (r["model"]["n_layer"], r["model"]["n_embd"], r["model"]["vocab_size"], r["settings"]["batch_size"]) == \
        (1, 32, 70, 3)
    config = GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=70, bias=False)
    assert r["tokens_per_step"] == 3 * 16
    assert r["flops_per_step"] == flops_per_token(config, 16) * 3 * 16  # sizing.py's 6N + 12LHQT
    assert r["tokens_per_s"] == pytest.approx(r["tokens_per_step"] / (r["step_ms"] / 1e3))
    assert r["gflops"] == pytest.approx(r["flops_per_step"] / (r["step_ms"] / 1e3) / 1e9)
    assert r["mfu"] == pytest.approx(r["gflops"] / r["peak"]["peak_gflops"]) and 0 < r["mfu"] < 1.5
    assert r["peak"]["dtype"] == "float32"  # the peak of the dtype the step ran in
    assert r["optimizer"] == "AdamW (fused=True)"
    assert "aten::mm" in r["profile"] and "top ops over 10 profiled steps" in out and "MFU" in out


def test_train_times_train_pys_muon_step(tmp_path):
    """config/tiny.py trains with Muon for the blocks' matrices and AdamW for the rest: that is the step timed."""
    r, out = run_bench(tmp_path, "--mode=train", ROOT / "config" / "tiny.py", "--n_layer=1", "--n_embd=32",
                       "--block_size=16", "--batch_size=2", "--repeats=2", "--warmup=1")
    assert r["optimizer"] == "Muon for 4 block matrices + AdamW (fused=True)"  # c_attn, c_proj, c_fc, mlp.c_proj
    assert r["optimizer"] in out


def test_sample_races_the_cache_recompute_and_transformers_on_the_same_tokens(tmp_path, monkeypatch):
    """The decode race: glassgpt's generate (KV cache, recomputing) and transformers' on the same weights exported,
    the same greedy tokens, in sample.py's dtype (float32 below 512 wide on a CPU, even one with native bf16, where
    bench's bf16 gave other tokens), beside a token's Linear layers alone and the arithmetic's limits."""
    pytest.importorskip("transformers")
    import device
    monkeypatch.setattr(device, "native_bf16", lambda device_type: device_type == "cpu")
    r, out = run_bench(tmp_path, "--mode=sample")
    assert r["dtype"] == "float32" and "float32, identical tokens: True" in out
    assert r["identical"] is True and r["distinct_tokens"] > 3  # sharp random weights: greedy tokens vary
    assert set(r["tokens_per_s"]) == {"KV cache", "recompute", "transformers"} and r["new_tokens"] == 63
    assert all(v > 0 for v in r["tokens_per_s"].values()) and "transformers" in out
    assert 0 < r["linear_layers_ms"] and "its 9 Linear layers alone" in out  # 2 blocks x 4, and the head
    config = GPTConfig(**r["model"])
    assert r["flops_per_token"] == forward_flops(config, 1 + 63 // 2)["total"]
    assert r["weight_bytes_per_token"] == 4 * GPT(config).get_num_params(non_embedding=False)
    assert 0 < r["memory_limit_tokens_per_s"] < r["flop_limit_tokens_per_s"]  # one token at a time: memory-bound


def test_attention_time_and_memory_against_T(tmp_path):
    r, out = run_bench(tmp_path, "--mode=attention", "--backward=True", "--t_max=512")
    assert r["T"] == [64, 128, 256, 512] and r["backward"] is True
    assert all(row["manual_ms"] > 0 and row["sdpa_ms"] > 0 for row in r["rows"])
    assert all(math.isfinite(r["slopes"][k]) for k in ("manual_time", "sdpa_time"))
    assert 1.7 < r["slopes"]["manual_memory_large_T"] < 2.3, r["slopes"]  # the T x T scores: quadratic
    last = r["rows"][-1]
    assert last["scores_bytes"] == 2 * 512 * 512 * 4  # (B, nh, T, T) float32
    assert last["manual_bytes"] >= last["scores_bytes"]  # at least one whole score matrix held
    assert last["sdpa_bytes"] < last["scores_bytes"] / 2  # the fused kernel never holds them all
    assert "log-log slope, T >= 256" in out


def test_help_lists_a_modes_keys():
    p = run_script("bench.py", "--mode=race", "--help")
    assert p.returncode == 0 and "--nanogpt=" in p.stdout and "--batch_size=" not in p.stdout
    p = run_script("bench.py", "--help")
    assert p.returncode == 0 and all(f"--mode={m}:" in p.stdout for m in bench.DEFAULTS)


@pytest.mark.parametrize("args, words", [
    (["--mode=nope"], "mode must be one of peak, train"),
    (["--mode=peak", "--batch_size=3"], "unknown config key 'batch_size'"),
    (["--mode=peak", "--threads=1"], "did you mean num_threads"),
    (["--mode=peak", "--peak_sizes=256,x"], "peak_sizes must be comma-separated integers"),
    (["--mode=train", "--dtype=float16"], "float16 on a CPU"),
    (["--mode=train", "--optimizer=sgd"], "optimizer must be adamw or muon"),
    (["--mode=train", "--n_head=3"], "divisible by n_head=3"),
    (["--mode=train", "--data_dir=NOPE"], "no meta.json"),
    (["--mode=sample", "--new_tokens=lots"], "expects int, got 'lots'"),
    (["--mode=sample", "--new_tokens=-1"], "new_tokens must be >= 0"),
    (["--mode=attention", "--t_min=100", "--t_max=120"], "no power of 2 between t_min=100 and t_max=120"),
    (["--mode=peak", "--json=/nonexistent/bench.json"], "cannot write --json=/nonexistent/bench.json"),
    (["--mode=race", "--nanogpt="], "is not a nanoGPT checkout"),
    (["--mode=race", f"--nanogpt={ROOT}"], "is not a nanoGPT checkout"),  # glassgpt's own: muon.py
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    p = run_script("bench.py", *args)
    assert (p.returncode, p.stdout, p.stderr.count("\n")) == (2, "", 1), p.stderr
    assert p.stderr.startswith("error: ") and words in p.stderr, p.stderr


# ----------------------------------------------------------------------------- race

FAKE_NANOGPT = """\
import json, sys
# nanoGPT's train.py as the race reads it: its lines, a val loss falling evenly from 4.0 to 1.25 over the run,
# each step 10 ms, and 500 ms for a step that also held an eval (nanoGPT times the eval into the next step)
json.dump(sys.argv[1:], open("ARGV", "w"))
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
n, k = int(args["max_iters"]), int(args["eval_interval"])
print("tokens per iteration will be: 768")
for it in range(n + 1):
    if it % k == 0:
        print(f"step {it}: train loss {4.0 - 2.75 * it / n:.4f}, val loss {4.0 - 2.75 * it / n:.4f}")
    print(f"iter {it}: loss 3.0000, time {500.0 if it % k == 0 else 10.0:.2f}ms, mfu -100.00%")
"""


def make_race(tmp_path, same_data=True):
    """A fake nanoGPT checkout, and a glassgpt config training a tiny model on the same synthetic bins."""
    ng = tmp_path / "nanoGPT"
    (ng / "data" / "shakespeare_char").mkdir(parents=True)
    (ng / "train.py").write_text(FAKE_NANOGPT.replace('"ARGV"', repr(str(tmp_path / "argv.json"))))
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)  # a stream of 0..7 repeating, 10% of tokens random: quick to learn
    tokens = np.where(rng.random(6000) < 0.1, rng.integers(0, 8, 6000), np.arange(6000) % 8).astype(np.uint16)
    for split, part in (("train", tokens[:5000]), ("val", tokens[5000:])):
        part.tofile(data / f"{split}.bin")
        (part if same_data else part[::-1]).tofile(ng / "data" / "shakespeare_char" / f"{split}.bin")
    (data / "meta.json").write_text(json.dumps({"tokenizer": "char", "vocab_size": 8, "dtype": "uint16",
                                                "itos": [chr(65 + i) for i in range(8)]}))
    cfg = tmp_path / "gg.py"
    cfg.write_text(f"data_dir = {str(data)!r}\nn_layer = 1\nn_head = 2\nn_embd = 16\nblock_size = 16\nbatch_size = 8\n"
                   "gradient_accumulation_steps = 1\nwarmup_iters = 2\nlearning_rate = 1e-2\neval_iters = 2\n"
                   "device = 'cpu'\ncompile = 'false'\ndtype = 'float32'\nnum_threads = 1\noptimizer = 'muon'\n")
    return ng, cfg


def test_a_side_is_read_from_nanogpts_lines(tmp_path):
    ng, _ = make_race(tmp_path)
    run = bench.run_side("nanoGPT", [sys.executable, "train.py", "--max_iters=20", "--eval_interval=4"], ng, None)
    assert run["iters"] == 21 and run["tokens_per_iter"] == 768  # iterations 0..max_iters
    assert run["train_s"] == pytest.approx(21 * 0.010)  # the eval-holding steps count as the others, 10 ms, not 500
    assert run["before"][4] == pytest.approx(0.04) and run["before"][21] == run["train_s"]
    assert run["tokens_per_s"] == pytest.approx(21 * 768 / run["train_s"])
    assert [e["iter"] for e in run["evals"]] == [0, 4, 8, 12, 16, 20] and run["final_val"] == pytest.approx(1.25)
    # val 4.0 - 0.1375 * iter first reaches 1.88 at the eval of iteration 16 (1.80), 1.60 at 20 (1.25)
    result, lines = bench.race_report({"nanoGPT": [run], "glassgpt": [run]}, [1.88, 1.60, 0.5],
                                      {"repeats": 1, "quick": False, "glassgpt_config": "gg.py"})
    assert result["sides"]["nanoGPT"]["thresholds"] == {"1.88": pytest.approx(0.16), "1.60": pytest.approx(0.20),
                                                        "0.50": None}
    assert result["comparisons"]["time_to_first_threshold_over_nanogpt_run"] == pytest.approx(0.16 / 0.21)
    assert result["comparisons"]["glassgpt_val_at_nanogpt_end"] == pytest.approx(1.25)
    assert any("not reached" in line for line in lines)
    with pytest.raises(bench.ConfigError, match="nanoGPT failed"):  # no lines of its own: said, not summed to 0
        bench.run_side("nanoGPT", [sys.executable, "-c", "print('hello')"], ng, None)


@pytest.mark.parametrize("train_s, short", [(179.6, False), (175.1, True), (200.0, False), (12.3, True)])
def test_race_says_when_glassgpts_run_was_shorter_than_the_3_minutes_it_reports(train_s, short):
    def run(train_s, iters):
        evals = [{"iter": 0, "val_loss": 4.0, "wall_s": 1.0}, {"iter": iters, "val_loss": 1.5, "wall_s": train_s + 9}]
        return {"evals": evals, "before": {0: 0.0, iters: train_s}, "train_s": train_s, "wall_s": train_s + 9,
                "iters": iters, "final_val": 1.5, "tokens_per_s": 1000.0, "tokens_per_iter": 768}
    _, lines = bench.race_report({"nanoGPT": [run(100.0, 2001)], "glassgpt": [run(train_s, 1600)]}, [1.88],
                                 {"repeats": 1, "quick": False, "glassgpt_config": "gg.py"})
    line = next(ln for ln in lines if ln.startswith("glassgpt's val loss after 180 s of training"))
    assert (f", its whole run being {train_s:.1f} s: 1.5000" in line) == short, line


@pytest.mark.parametrize("case, words", [("not a checkout", "is not a nanoGPT checkout"),
                                         ("other data", "must hold the same train.bin and val.bin"),
                                         ("thresholds", "could not convert string to float: 'low'")])
def test_race_refuses_bad_input_before_it_runs(case, words, tmp_path):
    ng, cfg = make_race(tmp_path, same_data=case != "other data")
    path = tmp_path if case == "not a checkout" else ng
    p = run_script("bench.py", "--mode=race", f"--nanogpt={path}", f"--glassgpt_config={cfg}",
                   "--thresholds=" + ("low" if case == "thresholds" else "1.88"))
    assert (p.returncode, p.stdout) == (2, "") and p.stderr.count("\n") == 1 and words in p.stderr, p.stderr


@pytest.mark.slow
def test_quick_race_against_a_fake_nanogpt(tmp_path):
    """The race end to end: nanoGPT (the fake) given the README recipe, glassgpt's train.py given nanoGPT's command
    and its own config, each read from its own lines; nothing written into the checkout."""
    ng, cfg = make_race(tmp_path)
    r, out = run_bench(tmp_path, "--mode=race", f"--nanogpt={ng}", f"--glassgpt_config={cfg}", "--nanogpt_iters=20",
                       "--nanogpt_eval_interval=4", "--eval_interval=4", "--glassgpt_iters=12")
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[:11] == ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
                         "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
                         "--n_embd=128", "--dropout=0.0"]
    # nanoGPT's lr divides 0/0 where its 100 warmup iterations reach lr_decay_iters: a short race halves it
    assert {"--max_iters=20", "--lr_decay_iters=20", "--eval_interval=4", "--warmup_iters=10"} <= set(argv)
    out_dir = next(a for a in argv if a.startswith("--out_dir="))[len("--out_dir="):]
    assert not out_dir.startswith(str(ng)) and not Path(out_dir).exists()  # a temporary folder, gone after
    sides = r["sides"]
    assert sides["nanoGPT"]["iters"] == 21 and sides["nanoGPT"]["train_s"] == pytest.approx(0.21)
    gg, same = sides["glassgpt"], sides[bench.SAME]
    assert (gg["iters"], gg["tokens_per_iter"]) == (12, 8 * 16) and gg["wall_s"] > gg["train_s"] > 0
    assert [e["iter"] for e in gg["runs"][0]["evals"]] == [0, 4, 8, 12]  # the race's eval spacing
    assert gg["final_val"] < 1.88 and 0 < gg["thresholds"]["1.88"] <= gg["train_s"]  # an easy stream to learn
    assert (same["iters"], same["tokens_per_iter"]) == (20, 12 * 64)  # the recipe's model and batch
    assert r["comparisons"]["same_step_tokens_per_s_ratio"] == pytest.approx(same["tokens_per_s"] / 76800, rel=1e-3)
    assert r["comparisons"]["glassgpt_val_at_3_minutes"] == gg["final_val"]  # all of its run is inside 3 minutes
    assert "a quick race (--quick)" in out and "the same step (nanoGPT's model and batch)" in out
    assert "target" not in out.lower()  # what it measured, not goals someone set
