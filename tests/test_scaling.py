"""
scaling.py against nanoGPT's scaling_laws notebook and the Chinchilla paper, its fitting code against
synthetic data whose answer is known, and the sweep's plumbing. Sweeps that train (train.py) are slow.
"""

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import run_script
import scaling
from scaling import (TABLE3_APPROACH2, TABLE_A9_LARGEST, analyse, chinchilla_flops, chinchilla_loss,
    chinchilla_params, compute_optimal, compute_optimal_grid, final_eval, fit_parabola, fit_power_law, plan_sweep,
    table_a4)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C_NOTEBOOK = 2.21e19


def test_notebook_grid_optimum_at_2_21e19():
    # the notebook prints "best model size: 316.23M" and "best dataset size: 11.65B"
    N, D = compute_optimal_grid(C_NOTEBOOK)
    assert f"{N / 1e6:.2f}M" == "316.23M" and f"{D / 1e9:.2f}B" == "11.65B"
    assert N == pytest.approx(10**8.5)  # a grid point: 10^(7 + 24/16)
    assert 6 * N * D == pytest.approx(C_NOTEBOOK)


def test_closed_form_optimum_and_why_the_grid_differs():
    N, D = compute_optimal(C_NOTEBOOK)
    assert N / 1e6 == pytest.approx(326.124, abs=1e-3)
    assert D / 1e9 == pytest.approx(11.2943, abs=1e-4)
    assert 6 * N * D == pytest.approx(C_NOTEBOOK)
    for f in (0.9, 0.99, 1.01, 1.1):  # any other split of the same compute loses more
        assert chinchilla_loss(N * f, D / f) > chinchilla_loss(N, D)
    # the grid's answer is the grid point nearest to it in log N, and loses only ~5e-5 nats
    Ng, Dg = compute_optimal_grid(C_NOTEBOOK)
    assert abs(math.log10(N) - math.log10(Ng)) < 2**-4 / 2
    assert 0 < chinchilla_loss(Ng, Dg) - chinchilla_loss(N, D) < 1e-4
    assert compute_optimal_grid(C_NOTEBOOK, step=1e-4)[0] == pytest.approx(N, rel=3e-4)  # a finer grid converges


def test_closed_form_scaling_exponents():
    # N_opt ~ C^(beta/(alpha+beta)) = C^0.4516, D_opt ~ C^0.5484
    (n1, d1), (n2, d2) = compute_optimal(1e20), compute_optimal(1e22)
    assert math.log10(n2 / n1) / 2 == pytest.approx(0.28 / 0.62)
    assert math.log10(d2 / d1) / 2 == pytest.approx(0.34 / 0.62)


def test_chinchilla_params_reproduce_notebook_and_table_a9():
    notebook = [12296.1623, 13124.4826, 14614.4279, 16037.5039, 16184.4582]  # the notebook's printout, in M
    for (p, d, f, kv, h, layers), expected in zip(TABLE_A9_LARGEST, notebook):
        assert round(chinchilla_params(1024, 32000, d, h, layers, f) / 1e6, 4) == expected
        # with the real attention width (heads x kv_size) every model is within 0.02% of the paper
        assert chinchilla_params(1024, 32000, d, h, layers, f, kv_size=kv) == pytest.approx(p, rel=2e-4)
    # the notebook's count is off by >4% exactly where heads x kv_size != d_model
    p, d, f, kv, h, layers = TABLE_A9_LARGEST[1]
    assert h * kv != d and chinchilla_params(1024, 32000, d, h, layers, f) / p > 1.04


def test_table_a4_matches_notebook():
    rows = table_a4()
    assert [r["N"] for r in rows] == [73825280, 305707008, 552604160, 1143453696, 1593126912, 6796274688]
    assert [r["flops"] for r in rows] == [929877196800, 4135248199680, 7353453772800, 14670316437504,
                                         20220437594112, 83021046743040]
    assert [r["approx"] for r in rows] == [907165040640, 3756527714304, 6790399918080, 14050759016448,
                                          19576343494656, 83512623366144]
    assert [round(r["ratio"], 6) for r in rows] == [1.025036, 1.100817, 1.082919, 1.044094, 1.032902, 0.994114]


def test_chinchilla_flops_attention_is_quadratic_in_seq_len():
    shape = dict(vocab_size=32000, d_model=640, num_heads=10, num_layers=10, ffw_size=2560)
    f = {T: chinchilla_flops(seq_len=T, **shape) for T in (1024, 2048, 4096)}
    # per sequence: F(T) = a*T + b*T^2, so F(2T) - 2F(T) = 2b*T^2 quadruples when T doubles
    q1, q2 = f[2048] - 2 * f[1024], f[4096] - 2 * f[2048]
    assert q1 > 0 and q2 == 4 * q1
    # that T^2 part is exactly the scores, the weighted sum and the softmax, times 3 (fwd + bwd) and layers
    assert q1 == 2 * 3 * 10 * (2 * 640 + 2 * 640 + 3 * 10) * 1024 * 1024


def test_approach2_fit_matches_notebook():
    slope, intercept = fit_power_law(*zip(*TABLE3_APPROACH2))
    assert slope == pytest.approx(1.0409573169995892, abs=1e-9)  # the notebook's "y = 1.0409573169995892x + ..."
    assert intercept == pytest.approx(0.9353887152390791, abs=1e-8)
    assert 10 ** (slope * math.log10(124e6) + intercept) == pytest.approx(2.292426e9, rel=1e-6)  # notebook: 2.292426e+09


def test_fit_power_law_and_parabola_recover_synthetic_truth():
    x = np.logspace(3, 9, 13)
    assert fit_power_law(x, 7.5 * x**0.46) == pytest.approx((0.46, math.log10(7.5)))
    noisy = 7.5 * x**0.46 * np.exp(np.random.default_rng(0).normal(0, 0.02, x.size))
    assert fit_power_law(x, noisy)[0] == pytest.approx(0.46, abs=0.01)
    x = np.linspace(4, 6, 7)
    a, b, c, x_min = fit_parabola(x, 0.3 * (x - 5.37) ** 2 + 1.8)
    assert (a, x_min) == pytest.approx((0.3, 5.37)) and c - b * b / (4 * a) == pytest.approx(1.8)
    assert fit_parabola(x, -0.2 * (x - 5) ** 2 + 2)[3] is None  # a loss that only falls has no vertex


def test_analyse_recovers_known_exponent_from_synthetic_isoflop_runs():
    # runs whose loss follows a Chinchilla-shaped law with known exponents: analyse() must find
    # N_opt ~ C^(beta/(alpha+beta)) from parabolas through five sizes per budget
    E0, A0, B0, a0, b0 = 1.2, 50.0, 80.0, 0.40, 0.30
    truth = b0 / (a0 + b0)
    G = (a0 * A0 / (b0 * B0)) ** (1 / (a0 + b0))
    runs = []
    for C in (1e12, 1e13, 1e14, 1e15):
        for k in np.linspace(-0.6, 0.6, 5):
            N = G * (C / 6) ** truth * 10**k
            runs.append(dict(budget=C, N=N, tokens=C / (6 * N), val_loss=E0 + A0 / N**a0 + B0 / (C / (6 * N))**b0))
    per_budget, exponent = analyse(runs)
    assert all(row["inside"] for row in per_budget)
    for row in per_budget:  # each budget's vertex is within 3% of the true optimum
        assert row["N_opt"] == pytest.approx(G * (row["budget"] / 6) ** truth, rel=0.03)
    assert exponent["a"] == pytest.approx(truth, abs=0.005)
    assert exponent["b"] == pytest.approx(1 - truth, abs=0.005)


def test_plan_sweep_spends_each_budget():
    from model import GPTConfig
    from sizing import flops_per_token, param_counts
    plan = scaling.SWEEPS["default"]
    runs = plan_sweep(plan)
    assert len(runs) == sum(len(shapes) for _, shapes in plan)
    for r in runs:
        cfg = GPTConfig(block_size=64, vocab_size=65, n_layer=r["n_layer"], n_head=r["n_head"], n_embd=r["n_embd"])
        assert r["N"] == param_counts(cfg)["non_embedding"]
        assert r["flops_per_token"] == flops_per_token(cfg, 64)
        assert r["tokens"] == r["iters"] * r["batch_size"] * r["block_size"]
        # rounding to whole iterations misses the budget by at most half an iteration's FLOPs
        assert abs(r["flops"] - r["budget"]) <= r["flops_per_token"] * r["batch_size"] * r["block_size"] / 2 + 1
    for C, _ in plan:
        sizes = [r["N"] for r in runs if r["budget"] == C]
        assert sizes == sorted(sizes) and sizes[-1] / sizes[0] > 10  # each budget spans over a decade of N
    firsts = [min(r["N"] for r in runs if r["budget"] == C) for C, _ in plan]
    assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)  # the window moves up with the budget


def test_quick_sweep_is_the_first_budget_and_brackets_a_minimum():
    """--quick is the default's first budget; with its five val losses as measured (docs/scaling.md), the
    table shows a minimum inside the sizes tried and no exponent."""
    assert scaling.SWEEPS["quick"] == scaling.SWEEPS["default"][:1]
    runs = plan_sweep(scaling.SWEEPS["quick"])
    for r, loss in zip(runs, (2.1489, 2.0694, 2.0597, 2.0784, 2.1321)):
        r.update(val_loss=loss, seconds=30.0)
    per_budget, exponent = analyse(runs)
    assert exponent is None and len(per_budget) == 1 and per_budget[0]["inside"]
    assert per_budget[0]["N_opt"] == pytest.approx(16_753, rel=1e-3)  # docs/scaling.md's quick run
    table = scaling.sweep_table(runs, per_budget, exponent)
    assert "2.0587" in table and "extrapolated" not in table and "no minimum" not in table


def test_train_args_pin_the_recipe():
    """Each run's recipe is pinned on the command line (AdamW, decay over exactly its iterations, no time
    limit, an evaluation at its last iteration), not left to train.py's defaults."""
    run_ = plan_sweep(scaling.SWEEPS["quick"], 65)[0]
    args = dict(a[2:].split("=", 1) for a in scaling.train_args(run_, "out", "shakespeare_char", "/d"))
    assert (args["optimizer"], args["max_seconds"], args["position"], args["norm"]) == ("adamw", "0", "rope", "rmsnorm")
    assert args["max_iters"] == args["lr_decay_iters"] == args["eval_interval"] == str(run_["iters"])
    assert (args["n_layer"], args["out_dir"], args["data_dir"]) == (str(run_["n_layer"]), "out", "/d")


def test_final_eval_reads_the_evaluation_at_the_last_iteration(tmp_path):
    lines = [dict(iter=0, train_loss=4.2, val_loss=4.19, elapsed=0.1), dict(iter=10, loss=3.1, lr=1e-3),
             dict(iter=20, train_loss=2.5, val_loss=2.61, elapsed=7.5), dict(iter=20, loss=2.5, lr=1e-4)]
    (tmp_path / "log.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert final_eval(tmp_path, 20) == (2.61, 7.5)
    assert final_eval(tmp_path, 30) is None  # stopped before its last iteration: trained again
    assert final_eval(tmp_path / "none", 20) is None


def char_dataset(folder, n=30_000, seed=0):
    """A char dataset a model can learn a little of: text from a random 8-letter Markov chain."""
    from tokenizer import prepare_text
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.ones(8) * 0.3, size=8)
    s = [0]
    for _ in range(n):
        s.append(rng.choice(8, p=P[s[-1]]))
    prepare_text("".join("abcdefgh"[i] for i in s), "char", str(folder))
    return folder


MICRO = [(2e8, [(1, 1, 8), (1, 2, 16), (1, 2, 32)])]  # three trainings of a few iterations each


def test_a_sweep_reuses_finished_runs_and_writes_its_outputs(tmp_path, capsys):
    """Runs whose log.jsonl holds the evaluation at their last iteration are not trained again: the fit,
    the table, isoflop.json and isoflop.png come from them."""
    data, out_dir = char_dataset(tmp_path / "data"), tmp_path / "out"
    for r, loss in zip(plan_sweep(MICRO, 8), (2.10, 2.00, 2.05)):
        run_dir = out_dir / f"data_C{r['budget']:.0e}_L{r['n_layer']}_d{r['n_embd']}"
        run_dir.mkdir(parents=True)
        (run_dir / "log.jsonl").write_text(json.dumps(dict(iter=r["iters"], train_loss=loss, val_loss=loss,
                                                           elapsed=3.0)) + "\n")
    runs, per_budget, exponent = scaling.sweep(out_dir=str(out_dir), data_dir=str(data), plan=MICRO)
    out = capsys.readouterr().out
    assert out.count("reused") == 3 and [r["val_loss"] for r in runs] == [2.10, 2.00, 2.05]
    assert per_budget[0]["inside"] and exponent is None
    saved = json.loads((out_dir / "isoflop.json").read_text())
    assert [r["val_loss"] for r in saved["runs"]] == [2.10, 2.00, 2.05]
    assert saved["per_budget"][0]["N_opt"] == pytest.approx(per_budget[0]["N_opt"])
    pytest.importorskip("matplotlib")
    assert (out_dir / "isoflop.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def scaling_cli(capsys, monkeypatch, *args):
    """python scaling.py args, in this process: (exit code, stdout, stderr)."""
    result = run_script("scaling.py", *args)
    return result.returncode, result.stdout, result.stderr


def test_cli_prints_reproduced_figures(capsys, monkeypatch):
    code, out, _ = scaling_cli(capsys, monkeypatch)
    assert code == 0
    for figure in ("N = 316.23M, D = 11.65B", "N = 326.12M, D = 11.29B", "log10 D = 1.0410 log10 N + 0.9354",
                   "GPT-2 small (124M params) -> 2.29B tokens", "1.1008", "12296.1623M", "12569.9277M"):
        assert figure in out, figure


@pytest.mark.parametrize("args, needle", [
    (["swep"], "swep"),
    (["sweep", "--quik"], "quik"),
    (["sweep", "--jobs=two"], "jobs"),
    (["sweep", "--jobs=-1"], "jobs"),
    (["sweep", "--out_dir="], "out_dir"),
    (["sweep", "--data_dir=NOPE"], "NOPE"),
    (["sweep", "--data_dir=BPE"], "char"),
])
def test_bad_arguments_are_one_line_errors(capsys, monkeypatch, tmp_path, args, needle):
    """One line on stderr, exit 2, nothing on stdout, nothing trained or written."""
    bpe = tmp_path / "BPE"
    bpe.mkdir()
    (bpe / "meta.json").write_text(json.dumps({"tokenizer": "gpt2", "vocab_size": 50257}))
    monkeypatch.chdir(tmp_path)  # where out-scaling would go
    args = [a.replace("NOPE", str(tmp_path / "NOPE")).replace("=BPE", f"={bpe}") for a in args]
    code, out, err = scaling_cli(capsys, monkeypatch, *args)
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and needle in err, err
    assert sorted(os.listdir(tmp_path)) == ["BPE"]


@pytest.mark.parametrize("args", [["--help"], ["sweep", "-h"], ["sweep", "--quick", "--help"]])
def test_help_lists_the_sweeps_keys(capsys, monkeypatch, args):
    code, out, err = scaling_cli(capsys, monkeypatch, *args)
    assert (code, err) == (0, "") and "python scaling.py sweep --quick" in out
    for key in scaling.SWEEP:
        assert f"--{key}=" in out, key


def test_bare_quick_and_key_value_reach_the_sweep(monkeypatch):
    calls = []
    monkeypatch.setattr(scaling, "sweep", lambda **kw: calls.append(kw))
    scaling.main(["sweep", "--quick", "--out_dir=o", "--jobs=2"])
    scaling.main(["sweep"])
    assert calls == [dict(scaling.SWEEP, quick=True, out_dir="o", jobs=2), scaling.SWEEP]


@pytest.mark.slow
def test_a_micro_sweep_trains_fits_and_reuses(tmp_path, capsys):
    """Three tiny trainings by train.py, two at a time: their final val losses, the fit, the outputs; a
    second sweep trains nothing again."""
    data, out_dir = char_dataset(tmp_path / "data"), tmp_path / "out"
    runs, per_budget, _ = scaling.sweep(out_dir=str(out_dir), data_dir=str(data), plan=MICRO, jobs=2)
    out = capsys.readouterr().out
    assert sum(line.startswith("[") for line in out.splitlines()) == 3 and "reused" not in out  # [n/3] per training
    for r in runs:  # trained: below the uniform guess ln(8) over the 8 characters
        assert 0.5 < r["val_loss"] < math.log(8)
        assert (out_dir / f"data_C{r['budget']:.0e}_L{r['n_layer']}_d{r['n_embd']}" / "ckpt.pt").exists()
    assert json.loads((out_dir / "isoflop.json").read_text())["runs"] == json.loads(json.dumps(runs))
    again, _, _ = scaling.sweep(out_dir=str(out_dir), data_dir=str(data), plan=MICRO, jobs=2)
    assert capsys.readouterr().out.count("reused") == 3
    assert [r["val_loss"] for r in again] == [r["val_loss"] for r in runs]


def children_of(pid):
    """The pids of pid's child processes (Linux /proc)."""
    found = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{p}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(p))
        except (OSError, ValueError, IndexError):  # it ended between the listing and the read
            pass
    return found


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the process table from /proc")
def test_ctrl_c_stops_the_trainings_which_save_and_exits_130(tmp_path):
    """A terminal's Ctrl-C (SIGINT to the whole process group): the sweep stops its running trainings, each
    saves its checkpoint, none is left running, exit 130."""
    data, out_dir = char_dataset(tmp_path / "data"), tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "scaling.py", "sweep", "--quick", f"--out_dir={out_dir}",
                             f"--data_dir={data}", "--jobs=2"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # a group, as a terminal's job
    logs = lambda: [p for p in out_dir.glob("*/log.jsonl") if '"loss"' in p.read_text()]  # noqa: E731
    deadline = time.time() + 120
    while len(logs()) < 2 and time.time() < deadline:  # both running trainings have trained a little
        time.sleep(0.2)
    assert len(logs()) == 2
    trainings = children_of(proc.pid)
    assert len(trainings) == 2
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip().splitlines()[-1:] == ["interrupted"], err
    assert all(not os.path.exists(f"/proc/{pid}") for pid in trainings)  # nothing left training
    assert all((p.parent / "ckpt.pt").exists() for p in logs())  # each saved
    assert len(list(out_dir.iterdir())) == 2  # the queued trainings never started
