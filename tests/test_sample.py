"""
sample.py on small random-weight checkpoints written as train.py writes them: the number of samples
and tokens asked for, greedy determinism with and without the KV cache, the checkpoint and tokenizer
it picks, and a one-line error (exit 2, no traceback) for each kind of bad input.
"""

import dataclasses
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import sample
import tokenizer
from conftest import run_script
from checkpoint import load_checkpoint, save_checkpoint
from model import GPT, GPTConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEP = "\n---------------\n"
VOCAB = "\n ,.:;!?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # no '-': the separator stays unambiguous


def write_checkpoint(path, seed=0, block_size=32, dataset="shakespeare_char", n_layer=2, n_embd=32):
    torch.manual_seed(seed)
    config = GPTConfig(block_size=block_size, vocab_size=len(VOCAB), n_layer=n_layer, n_head=2, n_embd=n_embd)
    model = GPT(config)
    save_checkpoint({
        "model": model.state_dict(), "optimizer": {}, "scaler": None,
        "model_args": dataclasses.asdict(config), "config": {"dataset": dataset, "block_size": block_size},
        "iter_num": 7, "best_val_loss": 4.25, "rng": {}, "sampler": {},
    }, str(path))
    return model


def write_run(folder, **model):
    """A training run's out_dir: ckpt.pt and the char-level meta.json beside it."""
    write_checkpoint(folder / "ckpt.pt", **model)
    tokenizer.write_meta(folder, dict(tokenizer.char_meta(VOCAB), dtype="uint16"))
    return folder


@pytest.fixture
def out_dir(tmp_path):
    return write_run(tmp_path)


def run_sample(capsys, *args):
    sample.main(list(args))
    out = capsys.readouterr()
    return out.out, out.err


def samples_of(stdout):
    assert stdout.endswith(SEP)
    return stdout[:-len(SEP)].split(SEP)


def test_number_of_samples_and_tokens(out_dir, capsys):
    out, err = run_sample(capsys, f"--out_dir={out_dir}", "--start=ROMEO:", "--num_samples=3", "--max_new_tokens=25")
    samples = samples_of(out)
    assert len(samples) == 3
    for s in samples:  # char-level: one character per token, after the prompt
        assert s.startswith("ROMEO:") and len(s) == len("ROMEO:") + 25 and set(s) <= set(VOCAB)
    assert len(set(samples)) > 1  # temperature 0.8: the samples differ
    assert f"loaded {out_dir / 'ckpt.pt'} (iter 7, best val loss 4.2500), tokenizer from {out_dir / 'meta.json'}" in err
    assert "75 tokens" in err


def test_dtype_auto_samples_in_bfloat16_only_from_512_wide(tmp_path, capsys, monkeypatch):
    """On a CPU with native bf16, a token at a time ran 0.43x as fast in bf16 as in float32 at width 128, 1.02x
    at 512 (docs/cpu.md): sampling picks bf16 from 512 wide, not from training's 64. The last line says which."""
    import configurator
    monkeypatch.setattr(configurator, "cpu_has_native_bf16", lambda: True)  # what this test asks of the CPU
    for width, dtype in ((128, "float32"), (512, "bfloat16")):
        run_dir = tmp_path / str(width)
        run_dir.mkdir()
        write_run(run_dir, n_layer=1, n_embd=width)
        out, err = run_sample(capsys, f"--out_dir={run_dir}", "--num_samples=1", "--max_new_tokens=3", "--start=A")
        assert len(samples_of(out)[0]) == 4
        assert f"tokens/s, cpu {dtype}, use_cache=True)" in err, err


@pytest.mark.parametrize("prompt_len, new", [(5, 20), (40, 30)])  # the second crosses block_size (32)
def test_greedy_is_deterministic_and_cache_free_equal(out_dir, capsys, prompt_len, new):
    prompt = ("To be or not to be, that is the question. " * 2)[:prompt_len]
    args = [f"--out_dir={out_dir}", f"--start={prompt}", "--num_samples=2", f"--max_new_tokens={new}", "--temperature=0"]
    cached, said = run_sample(capsys, *args, "--use_cache=true")
    uncached, _ = run_sample(capsys, *args, "--use_cache=false", "--seed=99")
    assert cached == uncached
    first, second = samples_of(cached)
    assert first == second  # greedy ignores the random state, which the run says (it printed them in silence)
    assert "note: temperature=0 is greedy, so the 2 samples will be the same: --num_samples=1 gives it once\n" in said
    # and it is the model's argmax continuation, computed here without sample.py
    model = write_checkpoint(out_dir / "other.pt").eval()
    encode, decode = tokenizer.load_tokenizer(tokenizer.char_meta(VOCAB))
    ids = model.generate(torch.tensor([encode(prompt)]), new, temperature=0, use_cache=False)[0].tolist()
    assert first == decode(ids)


def test_seed_makes_sampling_reproducible(out_dir, capsys):
    args = [f"--out_dir={out_dir}", "--num_samples=1", "--max_new_tokens=40", "--temperature=1.0", "--top_k=None"]
    a, _ = run_sample(capsys, *args, "--seed=1")
    b, _ = run_sample(capsys, *args, "--seed=1")
    c, _ = run_sample(capsys, *args, "--seed=2")
    assert a == b and a != c


def test_top_p_and_top_k_one_are_greedy(out_dir, capsys):
    base = [f"--out_dir={out_dir}", "--num_samples=1", "--max_new_tokens=30", "--start=A"]
    greedy, _ = run_sample(capsys, *base, "--temperature=0")
    top_k1, _ = run_sample(capsys, *base, "--temperature=1.0", "--top_k=1")
    top_p_small, _ = run_sample(capsys, *base, "--temperature=1.0", "--top_k=None", "--top_p=1e-9")
    top_p_zero, _ = run_sample(capsys, *base, "--temperature=1.0", "--top_k=None", "--top_p=0")  # as model.py's
    assert greedy == top_k1 == top_p_small == top_p_zero


def test_best_pt_preferred_unless_ckpt_given(out_dir, capsys):
    write_checkpoint(out_dir / "best.pt", seed=1)
    args = [f"--out_dir={out_dir}", "--num_samples=1", "--max_new_tokens=30", "--temperature=0"]
    best, err = run_sample(capsys, *args)
    assert f"loaded {out_dir / 'best.pt'}" in err
    assert "ckpt.pt beside it" not in err  # glassgpt's own run: ckpt.pt records best.pt's loss, no lower
    latest, err = run_sample(capsys, *args, "--ckpt=ckpt.pt")
    assert f"loaded {out_dir / 'ckpt.pt'}" in err
    assert best != latest  # different weights, different greedy text


def test_best_pt_taken_by_default_says_when_ckpt_pt_records_a_lower_loss(out_dir, capsys):
    """nanoGPT writes only ckpt.pt: trained on in a folder after glassgpt, its ckpt.pt holds a lower val
    loss than glassgpt's best.pt. sample.py still takes best.pt by default, and says so."""
    write_checkpoint(out_dir / "best.pt", seed=1)
    ckpt = load_checkpoint(out_dir / "ckpt.pt")
    save_checkpoint({**ckpt, "iter_num": 70, "best_val_loss": torch.tensor(3.2027)}, str(out_dir / "ckpt.pt"))
    _, err = run_sample(capsys, f"--out_dir={out_dir}", "--num_samples=1", "--max_new_tokens=3")
    assert (f"loaded {out_dir / 'best.pt'} (iter 7, best val loss 4.2500); ckpt.pt beside it records a lower val "
            "loss (iter 70, best val loss 3.2027): --ckpt=ckpt.pt samples that") in err


def test_a_char_tokenizer_smaller_than_the_model_is_taken_with_a_warning(out_dir, capsys):
    """--meta naming another run's char meta.json with fewer characters: the ids past it cannot print, said so."""
    tokenizer.write_meta(out_dir / "small", dict(tokenizer.char_meta(VOCAB[:35]), dtype="uint16"))
    _, err = run_sample(capsys, f"--out_dir={out_dir}", f"--meta={out_dir / 'small' / 'meta.json'}",
                        "--num_samples=1", "--max_new_tokens=3")
    assert (f"tokenizer from {out_dir / 'small' / 'meta.json'} (warning: the tokenizer's 35 characters are fewer "
            f"than the model's {len(VOCAB)} ids, which print as \ufffd: this model's meta.json?)") in err
    _, err = run_sample(capsys, f"--out_dir={out_dir}", "--num_samples=1", "--max_new_tokens=3")
    assert "warning" not in err  # its own meta.json: as many characters as ids


def test_a_checkpoint_from_before_the_first_eval_says_so(out_dir, capsys):
    """A ckpt.pt saved before the run's first eval (a stop at iter 3) holds train.py's starting best val
    loss, inf, which is no loss at all: sample.py (and lens.py, through it) says there is none yet, not "inf".
    The eval at a run's start does not count: it scored the initial weights, not these."""
    _, err = run_sample(capsys, f"--out_dir={out_dir}", "--num_samples=1", "--max_new_tokens=1")
    assert "(iter 7, best val loss 4.2500)" in err
    ckpt = load_checkpoint(out_dir / "ckpt.pt")
    save_checkpoint({**ckpt, "iter_num": 3, "best_val_loss": float("inf")}, str(out_dir / "ckpt.pt"))
    _, err = run_sample(capsys, f"--out_dir={out_dir}", "--num_samples=1", "--max_new_tokens=1")
    assert "(iter 3, no val loss for these weights yet)" in err and "inf" not in err, err


def test_tokenizer_from_the_training_dataset(tmp_path, monkeypatch, capsys):
    """No meta.json in out_dir: sample.py reads data/<config dataset>/meta.json."""
    (tmp_path / "run").mkdir()
    write_checkpoint(tmp_path / "run" / "ckpt.pt", dataset="mine")
    tokenizer.write_meta(tmp_path / "data" / "mine", dict(tokenizer.char_meta(VOCAB), dtype="uint16"))
    monkeypatch.setattr(sample, "REPO", str(tmp_path))
    out, err = run_sample(capsys, f"--out_dir={tmp_path / 'run'}", "--num_samples=1", "--max_new_tokens=10", "--start=Hi")
    assert f"tokenizer from {tmp_path / 'data' / 'mine' / 'meta.json'}" in err
    assert len(samples_of(out)[0]) == 12


def test_multibyte_prompt_file_and_char_model(tmp_path, capsys):
    """A prompt file is read as UTF-8; characters beyond ASCII work when the vocabulary has them."""
    vocab = VOCAB + "éü"
    torch.manual_seed(0)
    config = GPTConfig(block_size=16, vocab_size=len(vocab), n_layer=1, n_head=1, n_embd=16)
    save_checkpoint({"model": GPT(config).state_dict(), "model_args": dataclasses.asdict(config), "config": {}},
                    str(tmp_path / "ckpt.pt"))
    tokenizer.write_meta(tmp_path, dict(tokenizer.char_meta(vocab), dtype="uint16"))
    (tmp_path / "prompt.txt").write_text("Café über\n", encoding="utf-8")
    out, _ = run_sample(capsys, f"--out_dir={tmp_path}", f"--start=FILE:{tmp_path / 'prompt.txt'}",
                        "--num_samples=1", "--max_new_tokens=5")
    assert samples_of(out)[0].startswith("Café über\n") and len(samples_of(out)[0]) == 10 + 5


# ---- bad input: one line on stderr, exit code 2, no traceback -------------------------------------

def test_weights_model_py_no_longer_builds_name_the_first_misfit(out_dir):
    """A checkpoint saved before model.py changed (here: its MLP 2x wide, not 4x; one gain renamed) is one
    line naming the weight that does not fit and both shapes, for sample.py and for train.py's resume."""
    ckpt = load_checkpoint(out_dir / "ckpt.pt")
    sd = ckpt["model"]
    for i in range(2):
        sd[f"transformer.h.{i}.mlp.c_fc.weight"] = sd[f"transformer.h.{i}.mlp.c_fc.weight"][:64]
        sd[f"transformer.h.{i}.mlp.c_proj.weight"] = sd[f"transformer.h.{i}.mlp.c_proj.weight"][:, :64]
    sd["transformer.ln_f.gain"] = sd.pop("transformer.ln_f.weight")
    save_checkpoint(ckpt, str(out_dir / "ckpt.pt"))
    result = subprocess.run([sys.executable, "sample.py", f"--out_dir={out_dir}", "--device=cpu"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert result.stderr.strip() == (
        f"error: {out_dir / 'ckpt.pt'} does not hold a model this code can build: transformer.h.0.mlp.c_fc.weight: "
        "saved (64, 32), model.py builds (128, 32); transformer.ln_f.weight: model.py builds it, none saved; "
        "transformer.ln_f.gain: saved, model.py builds none (and 3 more that do not fit)")
    (out_dir / "data").mkdir()
    tokenizer.write_dataset(out_dir / "data", [i % 60 for i in range(2000)], [i % 7 for i in range(400)],
                            tokenizer.char_meta(VOCAB))
    result = subprocess.run([sys.executable, "train.py", f"--out_dir={out_dir}", f"--data_dir={out_dir / 'data'}",
                             "--init_from=resume", "--device=cpu", "--compile=false"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: cannot build the model (resume): transformer.h.0.mlp.c_fc.weight: "
                                    "saved (64, 32), model.py builds (128, 32); "), result.stderr



def test_a_model_key_model_py_no_longer_has_is_refused(out_dir):
    """A fork added a switch with no weights (a logit scale), trained, then backed model.py out: the key was
    dropped in silence and every tool ran another model (val 2.96 read 3.83). Now it is one line, in sample.py
    and in train.py's resume alike."""
    ckpt = load_checkpoint(out_dir / "ckpt.pt")
    ckpt["model_args"]["logit_scale"] = 0.25
    save_checkpoint(ckpt, str(out_dir / "ckpt.pt"))
    why = "it was saved with logit_scale=0.25, a model key this model.py does not have: put the switch back in " \
          "model.py to use it"
    result = run_script("sample.py", f"--out_dir={out_dir}", "--device=cpu")
    assert (result.returncode, result.stderr) == (2, f"error: {out_dir / 'ckpt.pt'} does not hold a model this code "
                                                     f"can build: {why}\n")
    (out_dir / "data").mkdir()
    tokenizer.write_dataset(out_dir / "data", [i % 60 for i in range(2000)], [i % 7 for i in range(400)],
                            tokenizer.char_meta(VOCAB))
    result = run_script("train.py", f"--out_dir={out_dir}", f"--data_dir={out_dir / 'data'}", "--init_from=resume",
                        "--device=cpu", "--compile=false")
    assert (result.returncode, result.stderr) == (2, f"error: cannot build the model (resume): {why}\n")


def bad_cases(out_dir):
    (out_dir / "empty").mkdir()
    (out_dir / "corrupt").mkdir()
    whole = (out_dir / "ckpt.pt").read_bytes()  # a checkpoint cut short, as by a full disk
    (out_dir / "corrupt" / "ckpt.pt").write_bytes(whole[:len(whole) // 2])
    (out_dir / "garbage").mkdir()
    (out_dir / "garbage" / "best.pt").write_text("not a checkpoint at all")
    (out_dir / "empty_prompt.txt").write_text("")
    (out_dir / "zero").mkdir()
    (out_dir / "zero" / "ckpt.pt").write_bytes(b"")
    (out_dir / "previous" / "20261124-114329-iter4").mkdir(parents=True)  # as train.py keeps an earlier run
    (out_dir / "previous" / "20261124-114329-iter4" / "ckpt.pt").write_bytes(whole)
    (out_dir / "other").mkdir()  # another dataset's tokenizer, with more characters than the model has
    (out_dir / "alone").mkdir()  # a char model moved away from its data/: offline, GPT-2's BPE blamed tiktoken
    write_checkpoint(out_dir / "alone" / "ckpt.pt", dataset="nowhere")
    tokenizer.write_meta(out_dir / "other", dict(tokenizer.char_meta(VOCAB + "0123456789"), dtype="uint16"))
    (out_dir / "oneline").mkdir()  # a text with no line break: the default prompt, a newline, is not in it
    tokenizer.write_meta(out_dir / "oneline", dict(tokenizer.char_meta(VOCAB[1:]), dtype="uint16"))
    return {
        "missing out_dir": ([f"--out_dir={out_dir / 'nope'}"], f"out_dir {out_dir / 'nope'} does not exist: "
                            "expected a training run's folder there (its ckpt.pt or best.pt); train a model into it "
                            f"first (python train.py config/tiny.py --out_dir={out_dir / 'nope'})"),
        # "out_dir  does not exist ... (python train.py config/tiny.py --out_dir=)" (a fresh user's pass)
        "empty out_dir": (["--out_dir="], "out_dir is empty: pass a training run's folder, e.g. --out_dir=out-tiny"),
        # a checkpoint named as out_dir: the hint was to train into it, which train.py refuses
        "out_dir is a file": ([f"--out_dir={out_dir / 'ckpt.pt'}"], f"out_dir {out_dir / 'ckpt.pt'} is a file: out_dir "
                              f"is a run's folder; for that file pass --out_dir={out_dir} --ckpt=ckpt.pt"),
        # README.md as out_dir: the hint was --ckpt=README.md, which is refused; then to train into it, which
        # train.py refuses too (a fresh user's pass); the whole line, so no such hint can follow it
        "a non-checkpoint file as out_dir": ([f"--out_dir={REPO}/README.md"], f"out_dir {REPO}/README.md is a file, "
                                             "not a training run's folder (its ckpt.pt or best.pt): pass "
                                             "--out_dir=<its out_dir>"),
        # 0 printed the prompt back with a hint about line breaks; the other check did not give the value
        "no new tokens": ([f"--out_dir={out_dir}", "--max_new_tokens=0"], "max_new_tokens must be >= 1, got 0"),
        "no samples": ([f"--out_dir={out_dir}", "--num_samples=-1"], "num_samples must be >= 1, got -1"),
        "missing checkpoint": ([f"--out_dir={out_dir / 'empty'}"], f"no checkpoint at {out_dir / 'empty' / 'ckpt.pt'}"),
        # out_dir/previous: it said only "no checkpoint", not what the folder holds
        "a folder of runs": ([f"--out_dir={out_dir / 'previous'}"], f"no checkpoint at "
                             f"{out_dir / 'previous' / 'ckpt.pt'}, but {out_dir / 'previous'} holds 1 run "
                             f"(20261124-114329-iter4): pass one as out_dir, e.g. "
                             f"--out_dir={out_dir / 'previous' / '20261124-114329-iter4'}"),
        "corrupt checkpoint": ([f"--out_dir={out_dir / 'corrupt'}"], "cannot read checkpoint"),
        "garbage checkpoint": ([f"--out_dir={out_dir / 'garbage'}"], "cannot read checkpoint"),
        "char not in vocab": ([f"--out_dir={out_dir}", "--start=ROMEO: 1+1"], "character '1' is not in this char-level vocabulary"),
        # it said only that '\n' is not in the vocabulary, not where it came from (a fresh user's pass)
        "default prompt not in vocab": ([f"--out_dir={out_dir}", f"--meta={out_dir / 'oneline' / 'meta.json'}"],
                                        f"character '\\n' is not in this char-level vocabulary of {len(VOCAB) - 1} "
                                        "characters, which the default prompt ('\\n') uses: pass --start with text "
                                        "of its own characters"),
        "empty prompt file": ([f"--out_dir={out_dir}", f"--start=FILE:{out_dir / 'empty_prompt.txt'}"], "is empty"),
        "missing prompt file": ([f"--out_dir={out_dir}", f"--start=FILE:{out_dir / 'nope.txt'}"], "cannot read prompt file"),
        # the prompt is read before any model is loaded: no wait for GPT-2's weights to find a typo
        "missing prompt file, gpt2": (["--init_from=gpt2", f"--start=FILE:{out_dir / 'nope.txt'}"], "cannot read prompt file"),
        "zero-byte checkpoint": ([f"--out_dir={out_dir / 'zero'}"], "cannot read checkpoint"),
        "another model's tokenizer": ([f"--out_dir={out_dir}", f"--meta={out_dir / 'other' / 'meta.json'}"],
                                      f"the tokenizer from {out_dir / 'other' / 'meta.json'} has {len(VOCAB) + 10} "
                                      f"tokens but the model only {len(VOCAB)}: not this model's; name its meta.json "
                                      "(or nanoGPT's meta.pkl) with --meta=PATH"),
        "no tokenizer anywhere": ([f"--out_dir={out_dir / 'alone'}"], f"no meta.json or meta.pkl for "
                                  f"{out_dir / 'alone'} (looked in it and in data/nowhere beside it, here and in this "
                                  f"repo), and its {len(VOCAB)} ids are too few for GPT-2's BPE: name its tokenizer "
                                  "with --meta=PATH"),
        # it was unpickled, and said "not plain data (UnpicklingError ...)"
        "not a tokenizer file": ([f"--out_dir={out_dir}", f"--meta={REPO}/README.md"],
                                 f"--meta wants a meta.json, nanoGPT's meta.pkl or the folder holding one, got "
                                 f"{REPO}/README.md"),
        "bad key": ([f"--out_dir={out_dir}", "--temprature=0.5"], "unknown config key 'temprature' on the command line (did you mean temperature?)"),
        "bad value": ([f"--out_dir={out_dir}", "--top_p=1.5"], "top_p must be a number in [0, 1]"),
        "bad init_from": (["--init_from=llama"], "init_from folder llama does not exist; init_from takes resume, gpt2"),
        "made-up GPT-2 size": (["--init_from=gpt2-xxl"], "init_from takes resume, gpt2, gpt2-medium, gpt2-large, gpt2-xl"),
        "missing init_from folder": ([f"--init_from={out_dir / 'nope'}"], f"init_from folder {out_dir / 'nope'} does not "
                                     "exist; init_from takes resume, gpt2, gpt2-medium, gpt2-large, gpt2-xl, or a Hugging "
                                     "Face model folder (config.json and model.safetensors, as export.py writes)"),
        "a run's folder as init_from": ([f"--init_from={out_dir}"], f"init_from folder {out_dir} has no config.json: "
                                        "expected a Hugging Face model folder (config.json and model.safetensors, as "
                                        f"export.py writes); it holds a training run, which --init_from=resume "
                                        f"--out_dir={out_dir} reads"),
    }


def test_bad_inputs_in_process(out_dir, capsys):
    """Every case through configurator.run, as the script runs main: SystemExit(2), one line, no stdout."""
    from configurator import run
    for name, (args, message) in bad_cases(out_dir).items():
        with pytest.raises(SystemExit) as e:
            run(lambda: sample.main(["--max_new_tokens=3", *args]))
        out, err = capsys.readouterr()
        err = err.strip().splitlines()
        assert e.value.code == 2 and out == "", (name, out)
        assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], (name, err)
        assert "train a model into" not in err[0] or "does not exist" in err[0], (name, err)


# two that get as far as torch.load, where a library's noise would show; every case is checked in process above
@pytest.mark.parametrize("name", ["corrupt checkpoint", "char not in vocab"])
def test_bad_inputs_as_a_user_sees_them(out_dir, name):
    args, message = bad_cases(out_dir)[name]
    proc = subprocess.run([sys.executable, "sample.py", "--max_new_tokens=3", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def timed(cmd, env, cwd=REPO):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return proc, time.perf_counter() - t0


@pytest.mark.parametrize("how", ["unreachable", "offline"])
def test_gpt2_without_network_is_one_line_at_once(how, offline_hf):
    """Hugging Face's client retries an unreachable hub for ~25 s (1+2+4+8+8 s of sleeps), printing each
    failure: checked first, it is one line that says how to use a local folder, in no more time than
    rejecting a bad name takes (the torch import)."""
    pytest.importorskip("transformers")
    env = offline_hf(how)
    _, baseline = timed([sys.executable, "sample.py", "--init_from=gpt2-xxl"], env)
    proc, seconds = timed([sys.executable, "sample.py", "--init_from=gpt2", "--max_new_tokens=3"], env)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot load gpt2: "), proc.stderr
    assert "--init_from=FOLDER" in lines[0] and ("not reachable" if how == "unreachable" else "HF_HUB_OFFLINE") in lines[0]
    assert seconds < baseline + 10, (seconds, baseline)


def test_default_prompt_leaves_no_blank_lines_at_a_samples_start(out_dir, capsys):
    """The default prompt is a newline: it conditions the model, but a sample opens with its first text."""
    for seed in range(3):
        out, _ = run_sample(capsys, f"--out_dir={out_dir}", "--num_samples=2", "--max_new_tokens=20", f"--seed={seed}")
        for s in samples_of(out):
            assert s and not s.startswith("\n"), repr(s)


def test_a_sample_of_nothing_but_line_breaks_says_so(out_dir, capsys, monkeypatch):
    """Greedy from the default prompt (a newline), a small model can repeat the newline: with leading
    newlines left out that printed an empty sample and its token count. It says what happened instead."""
    newline = VOCAB.index("\n")
    monkeypatch.setattr(GPT, "generate_tokens", lambda self, x, n, *a: (torch.tensor(newline) for _ in range(n)))
    out, _ = run_sample(capsys, f"--out_dir={out_dir}", "--num_samples=2", "--max_new_tokens=30", "--temperature=0")
    assert samples_of(out) == ["(nothing but line breaks in 30 new token(s): a model sampled greedily or nearly so can "
                               'repeat one; a prompt such as --start="ROMEO:", or more choice (a higher temperature, '
                               "top_k, top_p), gives text)"] * 2


@pytest.mark.parametrize("signum, code, said, started_ignoring", [
    (signal.SIGINT, 130, "interrupted", False), (signal.SIGTERM, 143, "terminated", False),
    (signal.SIGINT, 130, "interrupted", True)])  # started as a script's `cmd &`, whose shell ignores SIGINT
def test_a_stop_mid_sample_ends_the_line_and_says_so(out_dir, signum, code, said, started_ignoring):
    """Ctrl-C, or timeout's SIGTERM (which used to end the process mid-word, with no newline and no word).
    The stop is heard whatever SIGINT's disposition was at start (the runner's own, else ignored), as
    train.py hears it."""
    disposition = signal.SIG_IGN if started_ignoring else signal.SIG_DFL
    proc = subprocess.Popen([sys.executable, "sample.py", f"--out_dir={out_dir}", "--num_samples=1",
                             "--max_new_tokens=1000000", "--start=ROMEO:"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, disposition))
    try:
        assert proc.stdout.read(40)  # sampling has begun
        proc.send_signal(signum)
        rest, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code and err.endswith(f"\n{said}\n") and "Traceback" not in err, err
    assert rest.endswith("\n")  # the text's line is ended: the stop's word gets a line of its own


# each script run up to its `import torch`, where OpenMP reads OMP_WAIT_POLICY as torch loads it: a meta path
# finder notes the variable there and stops the script (torch is never loaded, so one process checks them all)
SPY_ON_TORCH_IMPORT = """\
import os, runpy, sys
class TorchImported(Exception):
    pass
class Spy:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            raise TorchImported(str(os.environ.get("OMP_WAIT_POLICY")))
sys.meta_path.insert(0, Spy())
preset = dict(os.environ)
for script in sys.argv[1:]:
    sys.argv = [script, "--help"]
    try:
        runpy.run_path(script, run_name="__main__")
        print(script, "torch not imported")
    except TorchImported as e:
        print(script, e)
    os.environ.clear()
    os.environ.update(preset)
"""
SCRIPTS = ["sample.py", "train.py", "bench.py", "lens.py", "export.py"]


def test_idle_threads_sleep_rather_than_spin():
    """Every script that runs the model asks OpenMP, before torch starts it, to let idle threads sleep
    (OMP_WAIT_POLICY=PASSIVE) unless the user chose otherwise: with other work on the cores, spinning
    threads made generation 8-23x and training steps up to 15x slower (docs/cpu.md); a fresh user's
    lens.py --eval ran 7-16x slower before lens.py did it too. bench.py too, so that it times what they run
    (without it, the tiny step measured 16x slower than train.py's)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    for preset, expected in ((None, "PASSIVE"), ("ACTIVE", "ACTIVE")):
        run_env = dict(env, OMP_WAIT_POLICY=preset) if preset else env
        out = subprocess.run([sys.executable, "-c", SPY_ON_TORCH_IMPORT, *SCRIPTS], cwd=REPO, env=run_env,
                             capture_output=True, text=True, timeout=120)
        assert out.stdout.splitlines() == [f"{script} {expected}" for script in SCRIPTS], (preset, out.stdout, out.stderr)


def test_compile_says_it_is_compiling_and_falls_back_when_it_fails(out_dir, capsys, monkeypatch):
    """--compile=true says so before the wait; a compiler that fails leaves the eager model, and the same text."""
    import torch

    def broken(fn, *a, **k):
        def call(*args, **kwargs):
            raise RuntimeError("no C++ compiler")
        return call
    eager, _ = run_sample(capsys, f"--out_dir={out_dir}", "--num_samples=1", "--max_new_tokens=8", "--temperature=0")
    monkeypatch.setattr(torch, "compile", broken)
    sample.main([f"--out_dir={out_dir}", "--num_samples=1", "--max_new_tokens=8", "--temperature=0",
                 "--compile=true"])
    captured = capsys.readouterr()
    assert "compiling the model (torch.compile)" in captured.err
    assert "warning: torch.compile failed (RuntimeError), running uncompiled" in captured.err
    assert captured.out == eager
