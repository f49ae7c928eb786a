"""
scaling.py against nanoGPT's scaling_laws notebook and the Chinchilla paper, and its fitting code
against synthetic data whose answer is known. The sweep's end-to-end run is marked slow.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import processes_naming
import scaling
from scaling import (TABLE3_APPROACH2, TABLE_A9_LARGEST, analyse, chinchilla_flops, chinchilla_loss,
                     chinchilla_params, compute_optimal, compute_optimal_grid, final_val_loss, fit_parabola,
                     fit_power_law, plan_sweep, power_law, table_a4, tokens_for_params)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C_NOTEBOOK = 2.21e19


def test_notebook_grid_optimum_at_2_21e19():
    # the notebook prints "best model size: 316.23M" and "best dataset size: 11.65B"
    N, D = compute_optimal_grid(C_NOTEBOOK)
    assert f"{N / 1e6:.2f}M" == "316.23M"
    assert f"{D / 1e9:.2f}B" == "11.65B"
    assert N == pytest.approx(10**8.5)  # a grid point: 10^(7 + 24/16)
    assert 6 * N * D == pytest.approx(C_NOTEBOOK)


def test_closed_form_optimum_and_why_the_grid_differs():
    N, D = compute_optimal(C_NOTEBOOK)
    assert N / 1e6 == pytest.approx(326.124, abs=1e-3)
    assert D / 1e9 == pytest.approx(11.2943, abs=1e-4)
    assert 6 * N * D == pytest.approx(C_NOTEBOOK)
    # it is the minimum: any other split of the same compute loses more
    for f in (0.9, 0.99, 1.01, 1.1):
        assert chinchilla_loss(N * f, D / f) > chinchilla_loss(N, D)
    # the grid's answer is the grid point nearest to it in log N, and loses only ~5e-5 nats
    Ng, Dg = compute_optimal_grid(C_NOTEBOOK)
    assert abs(math.log10(N) - math.log10(Ng)) < 2**-4 / 2
    assert 0 < chinchilla_loss(Ng, Dg) - chinchilla_loss(N, D) < 1e-4
    # a finer grid converges to the closed form
    Nf, _ = compute_optimal_grid(C_NOTEBOOK, step=1e-4)
    assert Nf == pytest.approx(N, rel=3e-4)


def test_closed_form_scaling_exponents():
    # N_opt ~ C^(beta/(alpha+beta)) = C^0.4516, D_opt ~ C^0.5484
    (n1, d1), (n2, d2) = compute_optimal(1e20), compute_optimal(1e22)
    assert math.log10(n2 / n1) / 2 == pytest.approx(0.28 / 0.62)
    assert math.log10(d2 / d1) / 2 == pytest.approx(0.34 / 0.62)


def test_chinchilla_params_reproduce_notebook_and_table_a9():
    notebook = [12296.1623, 13124.4826, 14614.4279, 16037.5039, 16184.4582]  # the notebook's printout, in M
    for (p, d, f, kv, h, l), expected in zip(TABLE_A9_LARGEST, notebook):
        shape = dict(seq_len=1024, vocab_size=32000, d_model=d, num_heads=h, num_layers=l, ffw_size=f)
        assert round(chinchilla_params(**shape) / 1e6, 4) == expected
        # with the real attention width (heads x kv_size) every model is within 0.02% of the paper
        assert chinchilla_params(**shape, kv_size=kv) == pytest.approx(p, rel=2e-4)
    # the notebook's count is off by >4% exactly where heads x kv_size != d_model
    p, d, f, kv, h, l = TABLE_A9_LARGEST[1]
    assert h * kv != d
    assert chinchilla_params(1024, 32000, d, h, l, f) / p > 1.04


def test_table_a4_matches_notebook():
    rows = table_a4()
    assert [r["N"] for r in rows] == [73825280, 305707008, 552604160, 1143453696, 1593126912, 6796274688]
    assert [r["flops"] for r in rows] == [929877196800, 4135248199680, 7353453772800, 14670316437504,
                                         20220437594112, 83021046743040]
    assert [r["approx"] for r in rows] == [907165040640, 3756527714304, 6790399918080, 14050759016448,
                                          19576343494656, 83512623366144]
    assert [round(r["ratio"], 6) for r in rows] == [1.025036, 1.100817, 1.082919, 1.044094, 1.032902, 0.994114]
    # 6ND is within 10% of the exact count for every model
    assert all(0.99 < r["ratio"] < 1.11 for r in rows)


def test_chinchilla_flops_attention_is_quadratic_in_seq_len():
    shape = dict(vocab_size=32000, d_model=640, num_heads=10, num_layers=10, ffw_size=2560)
    f = {T: chinchilla_flops(seq_len=T, **shape) for T in (1024, 2048, 4096)}
    # per sequence: F(T) = a*T + b*T^2, so F(2T) - 2F(T) = 2b*T^2 quadruples when T doubles
    q1, q2 = f[2048] - 2 * f[1024], f[4096] - 2 * f[2048]
    assert q1 > 0 and q2 == 4 * q1
    # that T^2 part is exactly the scores, the weighted sum and the softmax, times 3 (fwd + bwd) and layers
    T = 1024
    b = 3 * 10 * (2 * 640 + 2 * 640 + 3 * 10)  # per T^2
    assert q1 == 2 * b * T * T


def test_approach2_fit_matches_notebook():
    slope, intercept = fit_power_law(*zip(*TABLE3_APPROACH2))
    assert slope == pytest.approx(1.0409573169995892, abs=1e-9)  # the notebook's "y = 1.0409573169995892x + ..."
    assert intercept == pytest.approx(0.9353887152390791, abs=1e-8)
    assert tokens_for_params(124e6) == pytest.approx(2.292426e9, rel=1e-6)  # notebook: 2.292426e+09


def test_fit_power_law_recovers_synthetic_truth():
    x = np.logspace(3, 9, 13)
    assert fit_power_law(x, 7.5 * x**0.46) == pytest.approx((0.46, math.log10(7.5)))
    rng = np.random.default_rng(0)
    noisy = 7.5 * x**0.46 * np.exp(rng.normal(0, 0.02, x.size))
    slope, intercept = fit_power_law(x, noisy)
    assert slope == pytest.approx(0.46, abs=0.01)
    assert power_law(1e6, slope, intercept) == pytest.approx(7.5 * 1e6**0.46, rel=0.05)


def test_fit_parabola_recovers_vertex():
    x = np.linspace(4, 6, 7)
    a, b, c, x_min = fit_parabola(x, 0.3 * (x - 5.37) ** 2 + 1.8)
    assert (a, x_min) == pytest.approx((0.3, 5.37))
    assert c - b * b / (4 * a) == pytest.approx(1.8)
    # a loss that only falls (no minimum bracketed) has no vertex to report
    assert fit_parabola(x, -0.2 * (x - 5) ** 2 + 2)[3] is None


def test_analyse_recovers_known_exponent_from_synthetic_isoflop_runs():
    # runs whose loss follows a Chinchilla-shaped law with known exponents: analyse() must find
    # N_opt ~ C^(beta/(alpha+beta)) from parabolas through five sizes per budget
    E0, A0, B0, a0, b0 = 1.2, 50.0, 80.0, 0.40, 0.30
    truth = b0 / (a0 + b0)
    G = (a0 * A0 / (b0 * B0)) ** (1 / (a0 + b0))
    runs = []
    for C in (1e12, 1e13, 1e14, 1e15):
        n_star = G * (C / 6) ** truth
        for k in np.linspace(-0.6, 0.6, 5):
            N = n_star * 10**k
            D = C / (6 * N)
            runs.append(dict(budget=C, N=N, tokens=D, val_loss=E0 + A0 / N**a0 + B0 / D**b0))
    per_budget, exponent = analyse(runs)
    assert all(row["inside"] for row in per_budget)
    for row in per_budget:  # each budget's vertex is within 3% of the true optimum
        assert row["N_opt"] == pytest.approx(G * (row["budget"] / 6) ** truth, rel=0.03)
    assert exponent["a"] == pytest.approx(truth, abs=0.005)
    assert exponent["b"] == pytest.approx(1 - truth, abs=0.005)


def test_plan_sweep_spends_each_budget():
    from sizing import flops_per_token, param_counts
    plan = scaling.SWEEPS["default"]
    runs = plan_sweep(plan)
    assert len(runs) == sum(len(shapes) for _, shapes in plan)
    for r in runs:
        cfg = scaling.run_config(r["n_layer"], r["n_head"], r["n_embd"])
        assert r["N"] == param_counts(cfg)["non_embedding"]
        assert r["flops_per_token"] == flops_per_token(cfg, scaling.BLOCK_SIZE)
        assert r["tokens"] == r["iters"] * r["batch_size"] * r["block_size"]
        # rounding to whole iterations misses the budget by at most half an iteration's FLOPs
        per_iter = r["flops_per_token"] * r["batch_size"] * r["block_size"]
        assert abs(r["flops"] - r["budget"]) <= per_iter / 2 + 1
    for C, shapes in plan:
        sizes = [r["N"] for r in runs if r["budget"] == C]
        assert sizes == sorted(sizes) and sizes[-1] / sizes[0] > 10  # each budget spans over a decade of N
    # the window of sizes moves up with the budget
    firsts = [min(r["N"] for r in runs if r["budget"] == C) for C, _ in plan]
    assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)


def test_quick_sweep_is_one_budget_that_brackets_a_minimum_and_says_why_no_exponent():
    """--quick is the default's first budget (a later full sweep reuses its runs). Its five final
    val losses here are the default sweep's, measured on this machine (docs/scaling.md): the table
    shows a minimum inside the sizes tried, and says in one line why there is no exponent."""
    assert scaling.SWEEPS["quick"] == scaling.SWEEPS["default"][:1]
    runs = plan_sweep(scaling.SWEEPS["quick"])
    for r, loss in zip(runs, (2.1489, 2.0694, 2.0597, 2.0784, 2.1321)):
        r.update(val_loss=loss, seconds=30.0)
    per_budget, exponent = analyse(runs)
    assert exponent is None and len(per_budget) == 1 and per_budget[0]["inside"]
    table = scaling.sweep_table(runs, per_budget, exponent)
    assert "no minimum" not in table and "extrapolated" not in table
    assert table.splitlines()[-1].startswith("fit: one budget, so no exponent")


def test_sweep_runs_do_not_follow_tiny_py(tmp_path):
    """The sweep's runs start from config/tiny.py, whose recipe moves on (Muon, a 3-minute budget): the
    documented sweep's recipe (AdamW, a schedule of exactly its iterations, no time limit) is pinned."""
    import train
    from configurator import config_keys, configure
    run = scaling.plan_sweep(scaling.SWEEPS["quick"], 65)[0]
    argv = [os.path.join(ROOT, "config", "tiny.py"), *scaling.train_args(run, str(tmp_path), "shakespeare_char", "")]
    cfg = configure(config_keys(vars(train)), argv)
    assert cfg["optimizer"] == "adamw" and cfg["max_seconds"] == 0  # tiny.py: muon, 180
    assert (cfg["position"], cfg["norm"], cfg["bias"]) == ("rope", "rmsnorm", False)
    assert cfg["max_iters"] == cfg["lr_decay_iters"] == run["iters"] and cfg["n_layer"] == run["n_layer"]


@pytest.mark.parametrize("name, held", [("ckpt.pt", "a training run (ckpt.pt)"), ("log.jsonl", "a training run (log.jsonl)"),
                                        ("config.json", "a Hugging Face model (config.json)"),
                                        ("train.bin", "a dataset (train.bin)"),
                                        # --out_dir=. or config: the sweep's folders among the code (a fresh user's pass)
                                        ("tiny.py", "source code (tiny.py)")])
def test_sweep_refuses_an_out_dir_holding_other_work(tmp_path, name, held):
    """scaling.py sweep --out_dir=out-tiny put its run folders and isoflop.json into the main job's run."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.json").write_text(json.dumps({"tokenizer": "char", "vocab_size": 8, "dtype": "uint16",
                                                "itos": [chr(65 + i) for i in range(8)]}))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / name).write_bytes(b"mine")
    p = subprocess.run([sys.executable, "scaling.py", "sweep", "--quick", f"--out_dir={out_dir}",
                        f"--data_dir={data}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == (f"error: cannot use out_dir='{out_dir}': it holds {held}, and the sweep's trainings would "
                        "mix with it; choose another --out_dir\n")
    assert [p.name for p in out_dir.iterdir()] == [name] and (out_dir / name).read_bytes() == b"mine"


def test_sweep_out_dir_it_cannot_make_is_one_line(tmp_path):
    """A file where out_dir would go, or under it: makedirs' traceback, exit 1 (a user's trial). Now one line."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.json").write_text(json.dumps({"tokenizer": "char", "vocab_size": 8, "dtype": "uint16",
                                                "itos": [chr(65 + i) for i in range(8)]}))
    (tmp_path / "file").write_text("mine")
    # and a folder that is there but takes no files (/proc): the header came first, then train.py's error, exit 1
    # (the file said "File exists", /proc "(No such file or directory)": now what is wrong with each)
    why = {tmp_path / "file": f"{tmp_path / 'file'} is not a folder",
           tmp_path / "file" / "sub": f"{tmp_path / 'file'} is not a folder"}
    if os.path.isdir("/proc/self"):
        why[Path("/proc")] = "/proc takes no files (making one there failed: "
    for out_dir, said in why.items():
        p = subprocess.run([sys.executable, "scaling.py", "sweep", "--quick", f"--out_dir={out_dir}",
                            f"--data_dir={data}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert (p.returncode, p.stdout) == (2, "") and p.stderr.startswith(f"error: cannot use out_dir='{out_dir}': {said}")
        assert p.stderr.count("\n") == 1, p.stderr
    assert (tmp_path / "file").read_text() == "mine"


def tiny_dataset(folder):
    folder.mkdir()
    tokens = (np.arange(20000) % 8).astype(np.uint16)
    tokens[:18000].tofile(folder / "train.bin")
    tokens[18000:].tofile(folder / "val.bin")
    (folder / "meta.json").write_text(json.dumps({"tokenizer": "char", "vocab_size": 8, "dtype": "uint16",
                                                  "itos": [chr(65 + i) for i in range(8)]}))
    return folder


def test_sweep_stops_at_ctrl_c_with_no_training_left_running(tmp_path):
    """SIGINT to the sweep alone: queued trainings do not start, running ones end, one line, exit 130."""
    import signal
    import time
    data, out_dir = tiny_dataset(tmp_path / "data"), tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "scaling.py", "sweep", "--quick", f"--out_dir={out_dir}",
                             f"--data_dir={data}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    children = lambda: processes_naming(str(out_dir), but=proc.pid)  # the sweep's trainings, not the sweep
    deadline = time.time() + 60
    while len(children()) < 2 and time.time() < deadline:  # both trainings of the first pair have started
        time.sleep(0.2)
    assert len(children()) == 2
    t0 = time.time()
    proc.send_signal(signal.SIGINT)
    # acknowledged at once: it said nothing while the trainings saved, 8 s on a slow host (a fresh user's pass)
    assert proc.stderr.readline() == "SIGINT: stopping; the running trainings save first\n"
    assert time.time() - t0 < 5
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and time.time() - t0 < 15
    # none had finished: it said "finished trainings are kept", of none (a fresh user's pass)
    assert err.strip().splitlines() == ["interrupted: 0 of 5 trainings finished"], err
    assert children() == []  # nothing left training
    # the three queued trainings never started; the folder the sweep made goes if the two left nothing in it
    assert not out_dir.exists() or len(os.listdir(out_dir)) <= 2


def test_a_sweep_says_which_stopped_trainings_it_trains_again(tmp_path):
    """A training an earlier sweep stopped (its ckpt.pt, no result.json) is trained again, and train.py moves its
    files to previous/ there: the sweep said nothing of it, as train.py's line went to the sweep's pipe alone."""
    import signal
    data, out_dir = tiny_dataset(tmp_path / "data"), tmp_path / "sweep"
    runs = scaling.plan_sweep(scaling.SWEEPS["quick"], 8)
    stopped = out_dir / f"C{runs[0]['budget']:.0e}_L{runs[0]['n_layer']}_d{runs[0]['n_embd']}"
    stopped.mkdir(parents=True)
    (stopped / "ckpt.pt").write_bytes(b"an unfinished training's checkpoint")
    proc = subprocess.Popen([sys.executable, "scaling.py", "sweep", "--quick", f"--out_dir={out_dir}",
                             f"--data_dir={data}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert lines[1] == (f"trains again {stopped}: an earlier sweep stopped it unfinished (its files move to "
                        "previous/ there)\n"), lines
    assert lines[0].startswith("5 trainings on ")  # the header, then the one training stopped before


def test_a_terminals_ctrl_c_lets_the_running_trainings_save(tmp_path):
    """A terminal's Ctrl-C goes to the whole process group: each training got SIGINT (and began to save), then
    the sweep's SIGTERM on top, and train.py took the second signal as 'quit without saving'. The trainings
    now run in sessions of their own: the sweep alone gets the Ctrl-C, and each training one SIGTERM."""
    import signal
    import time
    data, out_dir = tiny_dataset(tmp_path / "data"), tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "scaling.py", "sweep", "--quick", f"--out_dir={out_dir}",
                             f"--data_dir={data}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # a group of its own, as a terminal's job
    logs = lambda: [p for p in out_dir.glob("*/log.jsonl") if '"loss"' in p.read_text()]  # noqa: E731
    deadline = time.time() + 90
    while len(logs()) < 2 and time.time() < deadline:  # both trainings of the first pair have trained
        time.sleep(0.2)
    assert len(logs()) == 2
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    saved = [p.parent for p in logs() if (p.parent / "ckpt.pt").exists()]
    assert len(saved) == 2, sorted(os.listdir(logs()[0].parent))


def test_a_torn_result_runs_again_and_a_users_isoflop_file_is_kept(tmp_path):
    """A result.json cut short made every later sweep a JSONDecodeError traceback; it now means that training
    runs again. isoflop.json and .png a sweep replaces only where it wrote them: a user's is refused first."""
    key = {"budget": 3e11, "n_layer": 1}
    path = tmp_path / "result.json"
    scaling.write_json(str(path), dict(key, val_loss=2.5, seconds=3.0))
    assert scaling.finished(scaling.read_result(str(path)), key)["val_loss"] == 2.5
    assert scaling.finished(scaling.read_result(str(path)), dict(key, n_layer=2)) is None  # another plan's
    path.write_bytes(path.read_bytes()[:20])
    assert scaling.finished(scaling.read_result(str(path)), key) is None and \
        scaling.finished(scaling.read_result(str(tmp_path / "none.json")), key) is None
    data, out_dir = tiny_dataset(tmp_path / "data"), tmp_path / "sweep"
    out_dir.mkdir()
    (out_dir / "isoflop.json").write_text('{"my results": "from glassgpt scaling.py"}')
    p = subprocess.run([sys.executable, "scaling.py", "sweep", "--quick", f"--out_dir={out_dir}", f"--data_dir={data}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == (f"error: cannot write {out_dir / 'isoflop.json'}: {out_dir / 'isoflop.json'} exists and "
                        "scaling.py did not write it: remove it or choose another name\n")
    assert sorted(os.listdir(out_dir)) == ["isoflop.json"]


def test_a_sweep_on_another_dataset_does_not_replace_an_earlier_sweeps_results(tmp_path):
    """A second sweep into the same out_dir on another dataset trained its runs again and wrote its result.json
    over the first sweep's, in silence (a fresh user's pass). Refused now, before anything trains."""
    data, out_dir = tiny_dataset(tmp_path / "data"), tmp_path / "sweep"
    first = scaling.plan_sweep(scaling.SWEEPS["quick"], 8)[0]
    run_dir = out_dir / f"C{first['budget']:.0e}_L{first['n_layer']}_d{first['n_embd']}"
    run_dir.mkdir(parents=True)
    key = {k: first[k] for k in ("budget", "n_layer", "n_head", "n_embd", "iters", "batch_size", "block_size")}
    other = str(tmp_path / "other")
    scaling.write_json(str(run_dir / "result.json"), dict(key, data_dir=other, val_loss=2.5, seconds=3.0))
    before = (run_dir / "result.json").read_bytes()
    p = subprocess.run([sys.executable, "scaling.py", "sweep", "--quick", f"--out_dir={out_dir}", f"--data_dir={data}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == (f"error: cannot use out_dir='{out_dir}': its {run_dir.name}/result.json is of "
                        f"data_dir={other!r}, not {str(data)!r}, which this sweep would replace; choose another "
                        "--out_dir\n"), p.stderr
    assert (run_dir / "result.json").read_bytes() == before and os.listdir(run_dir) == ["result.json"]


def test_a_dataset_that_is_not_char_level_is_refused(tmp_path):
    """--help says a char-level dataset; shakespeare's BPE trained a minute a model to val 9.48 (a fresh user)."""
    data = tmp_path / "bpe"
    data.mkdir()
    (data / "meta.json").write_text(json.dumps({"tokenizer": "gpt2", "vocab_size": 50257, "dtype": "uint16"}))
    p = subprocess.run([sys.executable, "scaling.py", "sweep", "--quick", f"--out_dir={tmp_path / 'sweep'}",
                        f"--data_dir={data}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr.startswith(f"error: the sweep trains char-level models; {data} is tokenized with gpt2 (vocab 50,257)")
    assert p.stderr.count("\n") == 1 and not (tmp_path / "sweep").exists()


def test_final_val_loss_reads_last_eval(tmp_path):
    log = tmp_path / "log.jsonl"
    lines = [dict(iter=0, loss=4.2, val_loss=4.19), dict(iter=10, loss=3.1, lr=1e-3),
             dict(iter=20, loss=2.5, val_loss=2.61), dict(iter=20, loss=2.5, lr=1e-4)]
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert final_val_loss(log, 20) == 2.61
    with pytest.raises(RuntimeError, match="expected 30"):
        final_val_loss(log, 30)
    log.write_text(json.dumps(dict(iter=5, loss=3.0)) + "\n")
    with pytest.raises(RuntimeError, match="no line with val_loss"):
        final_val_loss(log, 5)


def test_a_runs_folder_given_without_sweep_is_hinted_at_sizing(tmp_path):
    """scaling.py --out_dir=out-tiny: the hint was `sweep --out_dir=out-tiny`, which the sweep then refuses (a
    run's folder); the tool that reads a run's model is sizing.py."""
    run_dir = tmp_path / "out-tiny"
    run_dir.mkdir()
    (run_dir / "ckpt.pt").write_bytes(b"weights")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scaling.py"), "--out_dir=out-tiny"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr.endswith("got '--out_dir=out-tiny' (out-tiny holds a training run (ckpt.pt): sizing.py "
                             "--out_dir=out-tiny sizes it; a sweep trains into a folder of its own)\n"), p.stderr
    alone = subprocess.run([sys.executable, os.path.join(ROOT, "scaling.py"), "out-tiny"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)  # the folder alone: the same hint
    assert alone.returncode == 2 and alone.stderr.endswith("got 'out-tiny' (out-tiny holds a training run (ckpt.pt): "
                                                           "sizing.py --out_dir=out-tiny sizes it; a sweep trains "
                                                           "into a folder of its own)\n"), alone.stderr
    assert os.listdir(run_dir) == ["ckpt.pt"]


def test_cli_prints_reproduced_figures():
    out = subprocess.run([sys.executable, "scaling.py"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for figure in ("N = 316.23M, D = 11.65B", "N = 326.12M, D = 11.29B", "log10 D = 1.0410 log10 N + 0.9354",
                   "GPT-2 small (124M params) -> 2.29B tokens", "1.1008", "12296.1623M"):
        assert figure in out


@pytest.mark.parametrize("args, error", [
    (["swep"], "scaling.py takes no arguments (the figures), or sweep and its --key=value; got 'swep' "
               "(did you mean sweep?)"),
    (["--quick"], "scaling.py takes no arguments (the figures), or sweep and its --key=value; got '--quick' "
                  "(did you mean sweep --quick?)"),
    (["sweep", "quick"], "expected --key=value, got 'quick'"),  # not run as a config file
    (["sweep", "--quik"], "unknown config key 'quik' on the command line (did you mean quick?)"),
    (["sweep", "--out_dir"], "expected --key=value, got '--out_dir'"),
    (["sweep", "--jobs", "two"], "config key 'jobs' on the command line expects int, got 'two'"),
    (["sweep", "--jobs=-1"], "jobs must be >= 0 (0: one per core), got -1"),
    (["sweep", "--out_dir="], "cannot use out_dir='': empty name"),  # trained into the current folder
    (["sweep", "--data_dir=NOPE"], "no meta.json in NOPE"),  # the dataset is read before anything is said
])
def test_bad_arguments_are_one_line_errors(tmp_path, args, error):
    """--key=value as every command takes it (argparse printed a 3-line usage error): one line on stderr,
    exit 2, nothing on stdout, nothing trained or written."""
    nope = str(tmp_path / "nope")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scaling.py"), *[a.replace("NOPE", nope) for a in args]],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)  # where out-scaling would go
    assert (p.returncode, p.stdout, p.stderr) == (2, "", f"error: {error.replace('NOPE', nope)}\n")
    assert os.listdir(tmp_path) == []


def test_sweep_takes_argparses_spellings_and_key_value(monkeypatch):
    """The documented commands, and argparse's bare --quick and --out_dir DIR as before, reach sweep()."""
    calls = []
    monkeypatch.setattr(scaling, "sweep", lambda **kw: calls.append(kw))
    scaling.main(["sweep", "--quick", "--out_dir", "o", "--jobs", "2"])
    scaling.main(["sweep", "--out_dir=out-scaling", "--dataset=shakespeare_char", "--quick=false"])
    scaling.main(["sweep"])
    base = dict(scaling.SWEEP)
    assert calls == [dict(base, quick=True, out_dir="o", jobs=2), base, base]


@pytest.mark.parametrize("args", [["--help"], ["sweep", "-h"], ["sweep", "--quick", "--help"]])
def test_help_lists_the_sweeps_keys(args):
    p = subprocess.run([sys.executable, "scaling.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stderr == ""
    assert p.stdout.startswith("Chinchilla's scaling laws") and "python scaling.py sweep --quick" in p.stdout
    for key, value in scaling.SWEEP.items():
        assert f"  --{key}={value if value else repr(value)} " in p.stdout, key


@pytest.mark.slow
def test_sweep_quick_end_to_end(tmp_path):
    shared = os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare", "input.txt")
    data_ready = os.path.exists(os.path.join(ROOT, "data", "shakespeare_char", "train.bin"))
    if not data_ready and not os.path.exists(shared):
        pytest.skip("needs data/shakespeare_char prepared, or ../shared/data/tinyshakespeare to prepare it")
    data_dir = ""
    if not data_ready:  # prepare a private copy from ../shared, leaving the repo untouched
        data_dir = str(tmp_path / "shakespeare_char")
        subprocess.run([sys.executable, os.path.join(ROOT, "data", "shakespeare_char", "prepare.py"),
                        f"--input={shared}", f"--out_dir={data_dir}"], cwd=ROOT, check=True, capture_output=True)
    out_dir = tmp_path / "sweep"
    cmd = [sys.executable, "scaling.py", "sweep", "--quick", f"--out_dir={out_dir}"]
    if data_dir:
        cmd.append(f"--data_dir={data_dir}")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((out_dir / "isoflop.json").read_text())
    plan = scaling.SWEEPS["quick"]
    budgets = [C for C, _ in plan]
    assert len(result["runs"]) == sum(len(shapes) for _, shapes in plan)
    for r in result["runs"]:
        # trained: below the uniform guess ln(65) = 4.17 over the 65 characters (76 offline), and finite
        assert 0.5 < r["val_loss"] < math.log(65)
        assert (out_dir / f"C{r['budget']:.0e}_L{r['n_layer']}_d{r['n_embd']}" / "log.jsonl").exists()
    # the budget's five sizes bracket its minimum, on the canonical text or the offline one
    assert len(result["per_budget"]) == len(budgets) == 1
    assert result["per_budget"][0]["inside"], result["per_budget"]
    assert "fit: one budget, so no exponent" in proc.stdout
    try:
        import matplotlib  # noqa: F401
        assert (out_dir / "isoflop.png").stat().st_size > 10_000
    except ImportError:
        pass
    # a second run reuses every finished training instead of repeating it
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout.count("reused") == len(result["runs"])
