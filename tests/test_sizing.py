"""
sizing.py's arithmetic against the model it describes: parameter counts per component (GPT-2's
published numbers and every config switch), FLOPs counted by torch, bytes on disk, and the CLI.
"""

import io
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from conftest import run_script

import sizing
from model import GPT, GPTConfig
from sizing import (BLOCK_PARTS, activation_bytes, flops_per_token, forward_flops, gpt_params, instantiated_params,
    memory_bytes, param_counts, training_bytes)

ROOT = Path(__file__).resolve().parent.parent

# name: (n_layer, n_head, n_embd, total parameters as Hugging Face / nanoGPT count them)
GPT2_SHAPES = {
    "gpt2": (12, 12, 768, 124_439_808),
    "gpt2-medium": (24, 16, 1024, 354_823_168),
    "gpt2-large": (36, 20, 1280, 774_030_080),
    "gpt2-xl": (48, 25, 1600, 1_557_611_200),
}

GPT2_SMALL = {  # the per-component breakdown of nanoGPT's scaling_laws / transformer_sizing notebooks
    "wte": 38_597_376,
    "wpe": 786_432,
    "ln_1": 1_536,
    "attn.c_attn": 1_771_776,
    "attn.c_proj": 590_592,
    "ln_2": 1_536,
    "mlp.c_fc": 2_362_368,
    "mlp.c_proj": 2_360_064,
    "ln_f": 1_536,
}


def meta_model(config):
    with torch.device("meta"):  # shapes only, no memory: even gpt2-xl builds in about a second
        return GPT(config)


def numel(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name", GPT2_SHAPES)
def test_gpt2_family_counts(name):
    n_layer, n_head, n_embd, total = GPT2_SHAPES[name]
    config = GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd)  # vocab 50257, block 1024
    model = meta_model(config)
    assert model.get_num_params(non_embedding=False) == total
    non_embedding = gpt_params(1024, 50257, n_embd, n_head, n_layer)
    assert model.get_num_params(non_embedding=True) == non_embedding == total - 1024 * n_embd
    counts = param_counts(config)
    assert counts["total"] == total and counts["non_embedding"] == non_embedding


def test_gpt2_small_components():
    config = GPTConfig()
    assert gpt_params(1024, 50257, 768, 12, 12) == 123_653_376
    counts = param_counts(config)
    assert (counts["non_embedding"], counts["total"]) == (123_653_376, 124_439_808)
    model = meta_model(config)
    for key, n in GPT2_SMALL.items():
        assert counts[key] == n, key
    assert model.transformer.wte.weight.numel() == GPT2_SMALL["wte"]
    assert model.transformer.wpe.weight.numel() == GPT2_SMALL["wpe"]
    assert numel(model.transformer.ln_f) == GPT2_SMALL["ln_f"]
    for part in BLOCK_PARTS:
        assert numel(model.transformer.h[0].get_submodule(part)) == GPT2_SMALL[part], part
    assert model.lm_head.weight is model.transformer.wte.weight and counts["lm_head"] == 0
    assert counts["blocks"] == 12 * sum(GPT2_SMALL[p] for p in BLOCK_PARTS) == 85_054_464


@pytest.mark.parametrize("norm,bias,position,tie", list(itertools.product(
    ("layernorm", "rmsnorm"), (True, False), ("learned", "sinusoidal", "rope"), (True, False))))
def test_param_counts_equal_the_model_for_every_switch(norm, bias, position, tie):
    config = GPTConfig(block_size=11, vocab_size=37, n_layer=3, n_head=2, n_embd=12,
                       norm=norm, bias=bias, position=position, tie_weights=tie)
    counts = param_counts(config)
    model = GPT(config)
    assert counts["total"] == numel(model) == model.get_num_params(non_embedding=False)
    assert counts["non_embedding"] == model.get_num_params(non_embedding=True)
    assert counts["wte"] == model.transformer.wte.weight.numel()
    assert counts["wpe"] == (model.transformer.wpe.weight.numel() if position == "learned" else 0)
    for block in model.transformer.h:
        for part in BLOCK_PARTS:
            assert counts[part] == numel(block.get_submodule(part)), part
        assert counts["block"] == numel(block)
    assert counts["blocks"] == numel(model.transformer.h)
    assert counts["ln_f"] == numel(model.transformer.ln_f)
    assert (model.lm_head.weight is model.transformer.wte.weight) == tie
    assert counts["lm_head"] == (0 if tie else numel(model.lm_head)) == (0 if tie else 37 * 12)


def test_a_deep_model_is_counted_from_two_small_ones_and_agrees():
    """Past 100 blocks, 1 and 2 are built and the rest counted: --n_layer=1e9 is sized in a second."""
    config = GPTConfig(block_size=11, vocab_size=37, n_layer=7, n_head=2, n_embd=12, position="rope", bias=False)
    built = instantiated_params(config)
    assert built == GPT(config).get_num_params(non_embedding=False)
    assert instantiated_params(config, most_blocks=2) == built
    deep = GPTConfig(n_layer=10**9)
    assert instantiated_params(deep) == param_counts(deep)["total"] > 10**9 * 7 * 10**6
    wide = GPTConfig(n_layer=2, n_head=12, n_embd=1_200_000_000)  # 3.6e9 x 1.2e9: torch cannot describe it
    assert instantiated_params(wide) is None
    assert "EB" in sizing.report(wide)  # the arithmetic still reports


def matmul_params(config):
    """The parameters that multiply: 2 forward FLOPs per token each (weights of the Linears and the head)."""
    d, L = config.n_embd, config.n_layer
    return L * 12 * d * d + d * config.vocab_size


@pytest.mark.parametrize("config", [
    GPTConfig(block_size=16, vocab_size=50, n_layer=2, n_head=2, n_embd=32, attention="manual"),
    GPTConfig(block_size=24, vocab_size=30, n_layer=3, n_head=4, n_embd=16, attention="manual",
              bias=False, norm="rmsnorm", position="rope", tie_weights=False),
])
def test_forward_flops_equal_what_torch_counts(config):
    """torch's FlopCounterMode counts every matmul (2mkn), as forward_flops; the manual attention path,
    as torch does not count the CPU sdpa kernel; the full T x T scores are computed, so it is exact."""
    T, B = config.block_size, 3
    model = GPT(config)
    idx = torch.randint(0, config.vocab_size, (B, T))
    f = forward_flops(config, T)
    with FlopCounterMode(display=False) as fwd:
        model(idx, targets=idx)
    assert fwd.get_total_flops() == B * T * f["total"]
    with FlopCounterMode(display=False) as fwd_bwd:
        model(idx, targets=idx)[1].backward()
    assert fwd_bwd.get_total_flops() == 3 * B * T * f["total"]  # backward: twice the forward
    # 6N counts 6 FLOPs for every non-embedding parameter, biases and gains included; forward_flops
    # counts only the matmuls: the difference is exactly those vectors
    N = model.get_num_params()
    L, H, Q = config.n_layer, config.n_head, config.n_embd // config.n_head
    assert flops_per_token(config, T) == 6 * N + 12 * L * H * Q * T
    assert flops_per_token(config, T) - 3 * f["total"] == 6 * (N - matmul_params(config))
    assert f["attn.scores"] + f["attn.reduce"] == 4 * T * config.n_embd  # the part that grows with T


@pytest.mark.parametrize("switches", [{}, {"position": "rope", "norm": "rmsnorm", "bias": False},
                                      {"attention": "manual", "tie_weights": False}, {"dropout": 0.1}])
def test_the_built_model_costs_what_the_paper_says(switches):
    """built_costs, what train.py checks and reports, counts on the model as built, in fake tensors: for the GPT that
    model.py ships, the FLOPs of forward_flops (times 3, the backward's twice) and sizing's bytes."""
    config = GPTConfig(block_size=64, vocab_size=100, n_layer=2, n_head=4, n_embd=256, **switches)  # (the paper
    built = sizing.built_costs(config, 8, "muon")  # leaves out a few values per token: a head's logsumexp, a norm's)
    assert built["flops_per_token"] == 3 * forward_flops(config, 64)["total"]
    assert built["train_state"] == memory_bytes(config, optimizer="muon")["train_state"]
    assert 0.98 < built["activations"] / activation_bytes(config, 8, 64) < 1.02
    assert built["training_bytes"] == training_bytes(config, 8, acts=built["activations"], state=built["train_state"])
    assert sizing.built_costs(config, 8, "adamw", shards=2)["train_state"] == memory_bytes(config, shards=2)["train_state"]


def mlp_of_width(monkeypatch, width):
    """A fork's change: model.MLP replaced by one `width` times as wide as the residual stream (GPT-2's: 4), a class
    of the test's own, so that a fork's own MLP changes nothing here."""
    import model

    class MLP(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.c_fc = torch.nn.Linear(config.n_embd, width * config.n_embd, bias=config.bias)
            self.c_proj = torch.nn.Linear(width * config.n_embd, config.n_embd, bias=config.bias)

        def forward(self, x):
            return self.c_proj(torch.nn.functional.gelu(self.c_fc(x), approximate="tanh"))
    monkeypatch.setattr(model, "MLP", MLP)


def test_a_forks_wider_mlp_is_counted_as_built(monkeypatch):
    """sizing.py's formulas know a 4x MLP; what train.py checks and reports is counted on the model as built, so a
    fork's 40x MLP is counted as one: its parameters, its FLOPs (MFU) and its hidden activations."""
    config = GPTConfig(block_size=32, vocab_size=50, n_layer=2, n_head=2, n_embd=32, bias=False)
    mlp_of_width(monkeypatch, 4)
    paper = sizing.built_costs(config, 4)
    mlp_of_width(monkeypatch, 40)
    built, d, L = sizing.built_costs(config, 4), 32, 2
    assert built["flops_per_token"] - paper["flops_per_token"] == 3 * L * 2 * (2 * 36 * d * d)  # c_fc, c_proj: 36 d^2 more
    assert built["train_state"] - paper["train_state"] == 16 * L * 2 * 36 * d * d  # AdamW: weight, grad, 2 moments
    assert built["activations"] - paper["activations"] == 4 * 32 * L * 2 * 36 * d * 4  # hidden: before and after GELU


def test_gpt2_small_flops_per_token():
    config = GPTConfig()
    assert flops_per_token(config, 1024) == 6 * 123_653_376 + 12 * 12 * 12 * 64 * 1024 == 855_166_464
    f = forward_flops(config, 1024)
    assert f["lm_head"] == 2 * 768 * 50257
    assert f["total"] == 12 * f["block"] + f["lm_head"]
    assert forward_flops(config, 2048)["total"] - f["total"] == 12 * 4 * 1024 * 768


def test_memory_bytes_is_consistent():
    config = GPTConfig()
    n = 124_439_808
    m = memory_bytes(config)
    assert m["params"] == m["grads"] == m["weights_only"] == 4 * n
    assert m["adamw"] == 8 * n
    assert m["train_state"] == m["params"] + m["grads"] + m["adamw"]
    assert m["checkpoint"] == m["weights_only"] + m["adamw"]
    half = memory_bytes(config, bytes_per_param=2)  # bf16 weights: AdamW's moments stay fp32
    assert half["params"] == 2 * n and half["adamw"] == 8 * n and half["train_state"] == 12 * n


def trained_one_step(config, optimizer):
    """A model and its optimizer after one step (the state exists from the first step on)."""
    model = GPT(config)
    if optimizer == "muon":
        from muon import configure_muon
        opt = configure_muon(model, 0.1, 1e-3, (0.9, 0.99), "cpu")
    else:
        opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
    idx = torch.randint(0, config.vocab_size, (2, config.block_size))
    model(idx, idx)[1].backward()
    opt.step()
    return model, opt


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_checkpoint_size_follows_the_optimizer(optimizer):
    """Weights plus the optimizer's state, saved by torch as ckpt.pt holds them, take what memory_bytes says
    (plus a little pickle): Muon keeps one buffer per block matrix where AdamW keeps two moments."""
    config = GPTConfig(block_size=64, vocab_size=65, n_layer=2, n_head=4, n_embd=64, bias=False, norm="rmsnorm",
                       position="rope")
    model, opt = trained_one_step(config, optimizer)
    m = memory_bytes(config, optimizer=optimizer)
    weights, both = io.BytesIO(), io.BytesIO()
    torch.save(model.state_dict(), weights)  # the tied lm_head shares wte's storage: saved once
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, both)
    assert m["weights_only"] <= weights.tell() < m["weights_only"] * 1.03 + 20_000
    assert m["checkpoint"] <= both.tell() < m["checkpoint"] * 1.03 + 40_000
    if optimizer == "muon":
        assert both.tell() < 0.75 * memory_bytes(config)["checkpoint"]


@pytest.mark.parametrize("switches", [{}, {"position": "rope", "norm": "rmsnorm", "bias": False},
                                      {"attention": "manual"}, {"dropout": 0.1}])
def test_activation_bytes_is_what_autograd_keeps(switches):
    """train.py refuses a run that cannot fit by this count: within 10% of what the backward pass really keeps
    (every tensor autograd saves, parameters aside)."""
    config = GPTConfig(block_size=64, vocab_size=100, n_layer=2, n_head=4, n_embd=64, **switches)
    model = GPT(config)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = {}

    def pack(t):
        storage = t.untyped_storage()  # views of one tensor share it: counted once
        if storage.data_ptr() not in params:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    idx = torch.randint(0, 100, (8, 64))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(idx, idx)
    assert 0.9 < sum(kept.values()) / activation_bytes(config, 8, 64) < 1.1


def peak_rss(*args):
    """The most memory a train.py process held (ru_maxrss), run alone in a process of its own."""
    code = "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); " \
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)"
    cmd = [sys.executable, "-c", code, sys.executable, "train.py", "config/tiny.py", *args, "--max_iters=2",
           "--eval_iters=1", "--eval_interval=1000", "--max_seconds=0", "--device=cpu", "--compile=false",
           "--dtype=float32"]  # as every host runs it (auto is bf16 on some): their peaks vary less
    return int(subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()[-1])


@pytest.mark.slow
def test_training_bytes_is_within_10_percent_of_the_measured_peak(tmp_path):
    """sizing.built_costs' training_bytes, which train.py's fit check uses, against the peak memory of real runs of
    the main job's recipe at larger shapes (their peak less that of a run of a negligible model: torch itself)."""
    data = tmp_path / "data"  # 65 characters, as tiny Shakespeare's: what is read does not change the memory
    data.mkdir()
    np.random.default_rng(0).integers(0, 65, 100_000).astype("uint16").tofile(data / "train.bin")
    (data / "val.bin").write_bytes((data / "train.bin").read_bytes())
    (data / "meta.json").write_text(json.dumps({"tokenizer": "char", "vocab_size": 65, "dtype": "uint16",
                                                "itos": [chr(0x100 + i) for i in range(65)]}))
    base = peak_rss("--n_layer=1", "--n_embd=16", "--n_head=2", f"--data_dir={data}", f"--out_dir={tmp_path / 'base'}")
    for shape in (dict(n_layer=8, n_embd=512, n_head=8, batch_size=32), dict(n_layer=4, n_embd=1024, n_head=8, batch_size=64)):
        args = [f"--{k}={v}" for k, v in shape.items()] + [f"--data_dir={data}", f"--out_dir={tmp_path / 'run'}"]
        config = GPTConfig(block_size=64, vocab_size=65, bias=False, norm="rmsnorm", position="rope",
                           **{k: v for k, v in shape.items() if k != "batch_size"})
        # one run's peak at the first shape ranged over 1,116-1,307 MiB in five runs: what must fit is the highest
        measured = max(peak_rss(*args) for _ in range(5)) - base  # 3 runs fell short of it twice
        estimate = sizing.built_costs(config, shape["batch_size"], "muon")["training_bytes"]
        assert 0.9 < estimate / measured < 1.1, (shape, estimate, measured)


# ---------------------------------------------------------------------------------------------
# the command line, run in this process (a new interpreter importing torch costs seconds)


def cli(capsys, monkeypatch, *args):
    """python sizing.py args, in this process: (exit code, stdout, stderr)."""
    result = run_script("sizing.py", *args)
    return result.returncode, result.stdout, result.stderr


def test_cli_prints_gpt2_small(capsys, monkeypatch):
    code, out, err = cli(capsys, monkeypatch)
    assert (code, err) == (0, "")
    for n in list(GPT2_SMALL.values()) + [124_439_808, 123_653_376, 85_054_464, 855_166_464]:
        assert f"{n:,}" in out, n
    assert "matches" in out and "DOES NOT MATCH" not in out and "== non_embedding" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "38,597,376" in lines["transformer.wte"] and "786,432" in lines["transformer.wpe"]


def test_cli_reads_a_train_config_and_overrides(capsys, monkeypatch, tmp_path):
    """A train.py config holds other keys (batch_size): sizing.py takes the model keys only."""
    cfg = tmp_path / "big.py"
    cfg.write_text("batch_size = 12\nout_dir = 'out-big'\nn_layer = 3\nn_head = 25\nn_embd = 1600\n")
    code, out, _ = cli(capsys, monkeypatch, cfg, "--n_layer=48")  # gpt2-xl
    assert code == 0 and "n_layer=48" in out and "1,557,611,200" in out and "matches" in out
    code, out, _ = cli(capsys, monkeypatch, "--activation=gelu", "--optimizer=muon", "--n_layer=2")
    assert code == 0 and "activation=gelu" in out and "optimizer=muon" in out


def test_cli_takes_vocab_size_from_the_configs_dataset(capsys, monkeypatch, tmp_path):
    """config/tiny.py trains on shakespeare_char: sized with GPT-2's 50257 tokens it would be 7M, not 0.6M."""
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "meta.json").write_text(json.dumps(
        {"tokenizer": "char", "vocab_size": 70, "itos": [chr(32 + i) for i in range(70)], "dtype": "uint16"}))
    code, out, err = cli(capsys, monkeypatch, ROOT / "config" / "tiny.py", f"--data_dir={tmp_path / 'ds'}")
    assert code == 0 and "vocab_size=70 " in out, err
    code, out, _ = cli(capsys, monkeypatch, ROOT / "config" / "tiny.py", f"--data_dir={tmp_path / 'ds'}",
                       "--vocab_size=100")  # by hand wins
    assert code == 0 and "vocab_size=100 " in out
    code, out, err = cli(capsys, monkeypatch, "--dataset=no_such_dataset", "--n_layer=2")
    assert code == 0 and "vocab_size=50257 " in out and "no_such_dataset" in err


@pytest.mark.parametrize("args,needle", [
    (("--bogus=1",), "bogus"),
    (("--n_embd=100", "--n_head=3"), "n_embd"),
    (("--n_layer=two",), "n_layer"),
    (("no_such_config.py",), "no_such_config.py"),
    (("--seq_len=-5",), "seq_len"),
    (("--optimizer=sgd",), "optimizer"),
    (("--dtype=half",), "half"),
    (("--out_dir=NOWHERE",), "NOWHERE"),
])
def test_cli_bad_input_is_one_line_exit_2(capsys, monkeypatch, tmp_path, args, needle):
    args = [a.replace("NOWHERE", str(tmp_path / "NOWHERE")) for a in args]
    code, out, err = cli(capsys, monkeypatch, *args)
    assert (code, out) == (2, "")
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err


def test_cli_counts_the_training_memory_in_the_dtype_train_py_would_take(capsys, monkeypatch):
    """--dtype as train.py's: the training memory as train.py checks it on a GPU, the model as built in that
    autocast, where bf16 keeps fewer bytes for the backward pass."""
    shape = ("--n_layer=2", "--n_embd=256", "--n_head=4", "--block_size=256", "--vocab_size=100")
    gb = {}
    for dtype in ("float32", "bfloat16"):
        code, out, _ = cli(capsys, monkeypatch, *shape, f"--dtype={dtype}")
        line = next(line for line in out.splitlines() if line.startswith("training, per process"))
        gb[dtype] = float(re.search(r": ([\d.]+)MB", line)[1])
        config = GPTConfig(block_size=256, vocab_size=100, n_layer=2, n_head=4, n_embd=256)
        assert code == 0 and gb[dtype] == pytest.approx(sizing.built_costs(config, 12, dtype=dtype)["training_bytes"] / 1e6,
                                                        abs=0.01)
    assert gb["bfloat16"] < gb["float32"]


def test_out_dir_sizes_the_model_a_run_trained(capsys, monkeypatch, tmp_path):
    """--out_dir=RUN sizes its ckpt.pt's model (shape, vocab, optimizer); a key given by hand overrides."""
    from checkpoint import save_checkpoint
    config = GPTConfig(block_size=32, vocab_size=43, n_layer=2, n_head=2, n_embd=32, bias=False, position="rope")
    model, opt = trained_one_step(config, "muon")
    save_checkpoint({"model": model.state_dict(), "optimizer": opt.state_dict(),
                     "model_args": dict(vars(config)), "config": {"optimizer": "muon"}, "iter_num": 7,
                     "best_val_loss": 2.0}, str(tmp_path / "ckpt.pt"))
    code, out, err = cli(capsys, monkeypatch, f"--out_dir={tmp_path}")
    assert code == 0 and str(tmp_path / "ckpt.pt") in err, err
    assert out.startswith("GPT: n_layer=2 n_head=2 n_embd=32 block_size=32 vocab_size=43 norm=layernorm "
                          "position=rope bias=False")
    m = memory_bytes(config, optimizer="muon")
    assert f"{param_counts(config)['total']:>16,}" in out and "optimizer=muon" in out
    assert f"checkpoint {sizing.human(m['checkpoint'])}B" in out
    code, out, _ = cli(capsys, monkeypatch, f"--out_dir={tmp_path}", "--n_layer=4")
    assert code == 0 and out.startswith("GPT: n_layer=4 n_head=2 n_embd=32 block_size=32 vocab_size=43")


def test_help_lists_the_keys(capsys, monkeypatch):
    code, out, err = cli(capsys, monkeypatch, "--help")
    assert (code, err) == (0, "")
    for key in ("n_layer", "vocab_size", "seq_len", "optimizer", "out_dir", "activation"):
        assert f"--{key}=" in out, key
    assert "--sinusoidal_scale" not in out  # an amplitude, no size: not a key of train.py's either
