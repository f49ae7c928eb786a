"""
sizing.py's arithmetic against the model it describes: parameter counts per component (GPT-2's
published numbers and every config switch), FLOPs counted by torch, bytes on disk, and the CLI.
"""

import io
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from conftest import run_script
from model import GPT, GPTConfig
from sizing import (BLOCK_PARTS, activation_bytes, flops_per_token, forward_flops, gpt_params, instantiated_params,
                    memory_bytes, param_counts)

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


def test_gpt2_small_non_embedding():
    assert gpt_params(1024, 50257, 768, 12, 12) == 123_653_376
    assert meta_model(GPTConfig()).get_num_params() == 123_653_376


def test_gpt2_small_components():
    config = GPTConfig()
    counts = param_counts(config)
    model = meta_model(config)
    for key, n in GPT2_SMALL.items():
        assert counts[key] == n, key
    assert model.transformer.wte.weight.numel() == GPT2_SMALL["wte"]
    assert model.transformer.wpe.weight.numel() == GPT2_SMALL["wpe"]
    assert numel(model.transformer.ln_f) == GPT2_SMALL["ln_f"]
    for block in model.transformer.h:
        for part in BLOCK_PARTS:
            assert numel(block.get_submodule(part)) == GPT2_SMALL[part], part
    assert model.lm_head.weight is model.transformer.wte.weight and counts["lm_head"] == 0
    assert counts["blocks"] == 12 * sum(GPT2_SMALL[p] for p in BLOCK_PARTS) == 85_054_464


@pytest.mark.parametrize("norm,bias,position,tie", list(itertools.product(  # a list: pytest 9.1+ deprecates iterators
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
    assert hasattr(model.transformer, "wpe") == (position == "learned")
    for block in model.transformer.h:
        for part in BLOCK_PARTS:
            assert counts[part] == numel(block.get_submodule(part)), part
        assert counts["block"] == numel(block)
    assert counts["blocks"] == numel(model.transformer.h)
    assert counts["ln_f"] == numel(model.transformer.ln_f)
    if tie:
        assert model.lm_head.weight is model.transformer.wte.weight and counts["lm_head"] == 0
    else:
        assert counts["lm_head"] == numel(model.lm_head) == 37 * 12
    # every parameter belongs to exactly one counted component
    named = dict(model.named_parameters())
    assert sum(p.numel() for p in named.values()) == counts["total"]
    assert all(n.split(".")[0] == "lm_head" or n.split(".")[1] in ("wte", "wpe", "h", "ln_f") for n in named)


def test_a_deep_model_is_counted_from_two_small_ones_and_agrees():
    """sizing.py checks its arithmetic against the model built on the meta device; --n_layer=1e9 built a
    billion blocks' Python objects (minutes, gigabytes, then killed). Past 100 blocks it builds 1 and 2
    and counts the rest, which gives what building them all gives."""
    config = GPTConfig(block_size=11, vocab_size=37, n_layer=7, n_head=2, n_embd=12, position="rope", bias=False)
    built, how = instantiated_params(config)
    assert built == GPT(config).get_num_params(non_embedding=False) and how == ""
    assert instantiated_params(config, most_blocks=2) == (built, " (built with 1 and 2 blocks, the rest counted)")
    deep = GPTConfig(n_layer=10**9)
    assert instantiated_params(deep)[0] == param_counts(deep)["total"] > 10**9 * 7 * 10**6
    wide = GPTConfig(n_layer=2, n_head=12, n_embd=1_200_000_000)  # 3.6e9 x 1.2e9: torch cannot describe it
    n, how = instantiated_params(wide)
    assert n is None and how.startswith("not built: ")
    from sizing import report
    assert "instantiated model" in report(wide) and "EB" in report(wide)  # the arithmetic still reports


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
    """
    torch's FlopCounterMode counts every matmul (2mkn; norms, GELU, softmax are not counted, as in
    forward_flops). The manual attention path is used because torch does not count the CPU sdpa kernel.
    forward_flops counts the full T x T scores (the causal half is still computed), so it is exact.
    """
    T, B = config.block_size, 3
    model = GPT(config)
    idx = torch.randint(0, config.vocab_size, (B, T))
    with FlopCounterMode(display=False) as fwd:
        model(idx, targets=idx)
    f = forward_flops(config, T)
    assert fwd.get_total_flops() == B * T * f["total"]
    with FlopCounterMode(display=False) as fwd_bwd:
        _, loss = model(idx, targets=idx)
        loss.backward()
    assert fwd_bwd.get_total_flops() == 3 * B * T * f["total"]  # backward: twice the forward
    # 6N + 12*L*H*Q*T counts 6 FLOPs for every non-embedding parameter, biases and norm gains
    # included; forward_flops counts only the matmuls. The difference is exactly those vectors.
    N = model.get_num_params()
    L, H, Q = config.n_layer, config.n_head, config.n_embd // config.n_head
    assert flops_per_token(config, T) == 6 * N + 12 * L * H * Q * T
    assert flops_per_token(config, T) - 3 * f["total"] == 6 * (N - matmul_params(config))
    assert f["attn.scores"] + f["attn.reduce"] == 4 * T * config.n_embd  # the part that grows with T


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


def test_memory_bytes_match_torch_save():
    """Weights plus AdamW state, saved by torch, take what memory_bytes says (plus a little pickle)."""
    config = GPTConfig(block_size=64, vocab_size=200, n_layer=2, n_head=4, n_embd=64)
    model = GPT(config)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    idx = torch.randint(0, 200, (2, 64))
    _, loss = model(idx, idx)
    loss.backward()
    opt.step()
    m = memory_bytes(config)
    weights, both = io.BytesIO(), io.BytesIO()
    torch.save(model.state_dict(), weights)  # the tied lm_head shares wte's storage: saved once
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, both)
    assert m["weights_only"] <= weights.tell() < m["weights_only"] * 1.03 + 20_000
    assert m["checkpoint"] <= both.tell() < m["checkpoint"] * 1.03 + 40_000


@pytest.mark.parametrize("switches", [{}, {"position": "rope", "norm": "rmsnorm", "bias": False},
                                      {"attention": "manual"}, {"dropout": 0.1}])
def test_activation_bytes_is_a_lower_bound_of_what_autograd_keeps(switches):
    """train.py refuses a run whose activations cannot fit by this bound, so it must never exceed what
    the backward pass really keeps (every tensor autograd saves, parameters aside), and not by far."""
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
    bound = activation_bytes(config, 8, 64)
    assert bound <= sum(kept.values()) <= 4 * bound  # measured here: 2.0x to 3.4x


# ---------------------------------------------------------------------------------------------
# the command line


def sizing(*args, real=False):
    """python sizing.py args: in this process (conftest.run_script), or, real, as a process of its own."""
    if real:
        return subprocess.run([sys.executable, str(ROOT / "sizing.py"), *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
    return run_script("sizing.py", *args)


def test_cli_prints_gpt2_small():
    r = sizing(real=True)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for n in list(GPT2_SMALL.values()) + [124_439_808, 123_653_376, 85_054_464]:
        assert f"{n:,}" in out, n
    assert "matches" in out and "DOES NOT MATCH" not in out
    assert "== non_embedding" in out
    assert "855,166,464" in out  # FLOPs per token at seq_len 1024
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "38,597,376" in lines["transformer.wte"] and "786,432" in lines["transformer.wpe"]


def test_cli_reads_a_train_config_and_overrides(tmp_path):
    """A train.py config holds other keys (batch_size): sizing.py takes the model keys only."""
    cfg = tmp_path / "big.py"
    cfg.write_text("batch_size = 12\nout_dir = 'out-big'\nn_layer = 3\nn_head = 25\nn_embd = 1600\n")
    r = sizing(str(cfg), "--n_layer=48")  # gpt2-xl
    assert r.returncode == 0, r.stderr
    assert "n_layer=48" in r.stdout and "1,557,611,200" in r.stdout and "matches" in r.stdout


def test_cli_takes_vocab_size_from_the_configs_dataset(tmp_path):
    """config/tiny.py trains on shakespeare_char: sized with GPT-2's 50257 tokens it would be 7M, not 0.6M."""
    data = ROOT / "data" / "shakespeare_char" / "meta.json"
    cfg = tmp_path / "c.py"
    cfg.write_text("dataset = 'no_such_dataset'\nn_layer = 2\n")
    r = sizing(str(cfg))
    assert r.returncode == 0 and "vocab_size=50257" in r.stdout and "not found" in r.stderr
    if data.is_file():  # prepared (train.py prepares it on first use)
        r = sizing(str(ROOT / "config" / "tiny.py"))
        vocab = json.loads(data.read_text())["vocab_size"]
        assert r.returncode == 0 and f"vocab_size={vocab} " in r.stdout and "matches" in r.stdout
    r = sizing(str(ROOT / "config" / "tiny.py"), "--vocab_size=100")  # by hand wins
    assert r.returncode == 0 and "vocab_size=100 " in r.stdout
    # --data_dir, train.py's other way to name the dataset, is read the same way
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "meta.json").write_text(json.dumps(
        {"tokenizer": "char", "vocab_size": 70, "itos": [chr(32 + i) for i in range(70)], "dtype": "uint16"}))
    r = sizing(str(ROOT / "config" / "tiny.py"), f"--data_dir={tmp_path / 'ds'}")
    assert r.returncode == 0 and "vocab_size=70 " in r.stdout, r.stderr
    assert f"vocab_size 70 from {tmp_path / 'ds' / 'meta.json'}" in r.stderr


@pytest.mark.parametrize("args,needle", [
    (("--bogus=1",), "bogus"),
    (("--n_embd=100", "--n_head=3"), "n_embd"),
    (("--n_layer=two",), "n_layer"),
    (("no_such_config.py",), "no_such_config.py"),
    (("--seq_len=-5",), "seq_len must not be negative"),  # printed negative FLOPs
    ((str(ROOT / "config" / "tiny.py"), "--n_head=3"), "n_head=3"),  # the vocab's note came first: two lines
])
def test_cli_bad_input_is_one_line_exit_2(args, needle):
    r = sizing(*args, real=args == ("--bogus=1",))  # one as a user sees it; the rest the same code, in process
    assert r.returncode == 2
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.stderr


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_checkpoint_size_follows_the_optimizer_as_train_py_saves_it(optimizer, tmp_path):
    """sizing.py's checkpoint figure is the size of the ckpt.pt train.py writes with that optimizer (config/tiny.py
    trains with Muon: one momentum buffer per block matrix, where AdamW keeps two moments), and says which."""
    import train
    from checkpoint import save_checkpoint
    from sizing import human, report
    config = GPTConfig(block_size=64, vocab_size=65, n_layer=2, n_head=4, n_embd=64, bias=False, norm="rmsnorm",
                       position="rope")
    model = GPT(config)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu", optimizer)
    idx = torch.randint(0, 65, (2, 64))
    model(idx, idx)[1].backward()
    opt.step()  # the state exists from the first step on
    state = train.checkpoint_state(model, opt, torch.amp.GradScaler("cpu", enabled=False),
                                   dict(train.config_keys(vars(train)), optimizer=optimizer), 1, 2.0, 1.0,
                                   train.rng_state("cpu"), torch.Generator().get_state())
    save_checkpoint(state, str(tmp_path / "ckpt.pt"))
    size = (tmp_path / "ckpt.pt").stat().st_size
    m = memory_bytes(config, optimizer=optimizer)
    assert m["checkpoint"] <= size < m["checkpoint"] * 1.03 + 40_000
    if optimizer == "muon":  # the AdamW figure it stated before would be 40% too large here
        assert size < 0.75 * memory_bytes(config)["checkpoint"]
    line = report(config, optimizer=optimizer).splitlines()[-1]
    assert f"optimizer={optimizer}" in line and f"checkpoint {human(m['checkpoint'])}B" in line


def test_out_dir_sizes_the_model_a_run_trained(tmp_path):
    """`sizing.py --out_dir=RUN` sizes the checkpoint's model (shape, vocab, optimizer), as sample.py and lens.py
    read a run. Before, --out_dir was an unknown key whose "did you mean data_dir?" pointed away from it, and
    `sizing.py RUN` said only that a folder is not a config file."""
    import train
    from checkpoint import save_checkpoint
    config = GPTConfig(block_size=32, vocab_size=43, n_layer=2, n_head=2, n_embd=32, bias=False, position="rope")
    model = GPT(config)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu", "muon")
    state = train.checkpoint_state(model, opt, torch.amp.GradScaler("cpu", enabled=False),
                                   dict(train.config_keys(vars(train)), optimizer="muon"), 7, 2.0, 1.0,
                                   train.rng_state("cpu"), torch.Generator().get_state())
    save_checkpoint(state, str(tmp_path / "ckpt.pt"))
    r = run_script("sizing.py", f"--out_dir={tmp_path}")
    assert r.returncode == 0 and r.stderr == f"the model of {tmp_path / 'ckpt.pt'} (iter 7)\n", r.stderr
    assert r.stdout.startswith("GPT: n_layer=2 n_head=2 n_embd=32 block_size=32 vocab_size=43 norm=layernorm "
                               "position=rope bias=False")
    assert f"{param_counts(config)['total']:>16,}" in r.stdout and "optimizer=muon" in r.stdout
    clash = run_script("sizing.py", f"--out_dir={tmp_path}", "--n_layer=4")
    assert clash.returncode == 2 and clash.stderr.startswith("error: --out_dir sizes the model") and \
        "whose n_layer is 2, not 4" in clash.stderr
    folder = run_script("sizing.py", str(tmp_path))
    assert folder.returncode == 2 and f"did you mean --out_dir={tmp_path}?" in folder.stderr
    # a checkpoint named as out_dir, and an export folder: "no checkpoint at <file>/ckpt.pt", where sample.py
    # says what each is (a fresh user's pass)
    named = run_script("sizing.py", f"--out_dir={tmp_path / 'ckpt.pt'}")
    assert (named.returncode, named.stderr) == (2, f"error: out_dir {tmp_path / 'ckpt.pt'} is a file: out_dir is a "
                                                   f"run's folder, whose ckpt.pt sizing.py reads; pass --out_dir={tmp_path}\n")
    hf = tmp_path / "hf"
    hf.mkdir()
    for name in ("config.json", "meta.json", "model.safetensors"):
        (hf / name).write_text("{}")
    export = run_script("sizing.py", f"--out_dir={hf}")
    assert export.returncode == 2 and export.stderr.startswith(f"error: {hf} is a Hugging Face folder as export.py "
                                                               "writes, not a training run"), export.stderr


def test_out_dir_with_ckpt_pt_missing_or_corrupt_sizes_best_pt(tmp_path):
    """A run whose ckpt.pt is gone or corrupt: the error said best.pt is there, but sizing.py has no key to read
    it (a fresh user's pass). best.pt holds the same model's shape, so it is sized, with a line saying why."""
    import shutil
    import train
    from checkpoint import save_checkpoint
    config = GPTConfig(block_size=32, vocab_size=43, n_layer=2, n_head=2, n_embd=32)
    model = GPT(config)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu", "adamw")
    state = train.checkpoint_state(model, opt, torch.amp.GradScaler("cpu", enabled=False),
                                   train.config_keys(vars(train)), 5, 2.0, 1.0,
                                   train.rng_state("cpu"), torch.Generator().get_state())
    save_checkpoint(state, str(tmp_path / "best.pt"))
    ckpt, best = tmp_path / "ckpt.pt", tmp_path / "best.pt"
    gone = run_script("sizing.py", f"--out_dir={tmp_path}")
    assert gone.returncode == 0 and gone.stderr == (f"no checkpoint at {ckpt}: sizing best.pt, the same model\n"
                                                    f"the model of {best} (iter 5)\n"), gone.stderr
    assert gone.stdout.startswith("GPT: n_layer=2 n_head=2 n_embd=32 block_size=32 vocab_size=43")
    ckpt.write_bytes(best.read_bytes()[:1000])
    corrupt = run_script("sizing.py", f"--out_dir={tmp_path}")
    assert corrupt.returncode == 0 and corrupt.stdout == gone.stdout
    assert corrupt.stderr.startswith(f"cannot read checkpoint {ckpt}: truncated, corrupt") and \
        corrupt.stderr.endswith(f": sizing best.pt, the same model\nthe model of {best} (iter 5)\n")
    shutil.copy(ckpt, best)  # both corrupt: one line, naming both
    both = run_script("sizing.py", f"--out_dir={tmp_path}")
    assert both.returncode == 2 and both.stdout == "" and both.stderr.startswith(
        f"error: cannot read checkpoint {ckpt}: truncated") and both.stderr.endswith(f"; nor can {best} be read\n")


def test_a_seq_len_past_block_size_is_sized_with_a_note():
    """--seq_len=4096 on a 1024-token model: FLOPs for a length the model cannot take, now said on stderr."""
    r = run_script("sizing.py", "--seq_len=4096")
    assert r.returncode == 0 and "at seq_len 4096" in r.stdout
    assert r.stderr == ("note: seq_len 4096 is past block_size 1024, more than the model can take at once: "
                        "its FLOPs are counted as if it could\n"), r.stderr
    assert run_script("sizing.py", "--seq_len=1024").stderr == ""


def test_the_model_keys_sizing_takes_are_train_pys():
    """sizing.py sizes what train.py trains: each model key it takes is one train.py takes too (vocab_size
    aside, which train.py reads from the dataset). It took --sinusoidal_scale, which train.py has not, and
    train.py lacked --activation, which sizing.py took (a fresh user's pass)."""
    from configurator import training_keys
    help_text = run_script("sizing.py", "--help").stdout
    taken = {line.split("=")[0].strip()[2:] for line in help_text.splitlines() if line.startswith("  --")}
    model = set(vars(GPTConfig())) & taken
    assert "activation" in model and "sinusoidal_scale" not in taken
    assert model - {"vocab_size"} <= training_keys(), model - training_keys()
    gelu = run_script("sizing.py", "--activation=gelu")
    assert gelu.returncode == 0 and gelu.stdout.splitlines()[0].endswith(" tie_weights=True activation=gelu"), gelu.stdout
