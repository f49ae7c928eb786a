"""
sample.py and checkpoint.py on tiny random-weight runs written as train.py writes them (GPT + save_checkpoint):
the samples and tokens asked for, greedy and cached decoding equal to the model's own, the checkpoint and
tokenizer it picks, GPT-2 and Arcee folders in, atomic saves, and one line with exit 2 for bad input.
"""

import dataclasses
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import checkpoint
import tokenizer
from checkpoint import load_checkpoint, load_model, save_checkpoint
from configurator import ConfigError
from conftest import run_script
from model import GPT, GPTConfig
from sample import sampling_dtype

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEP = "\n---------------\n"
VOCAB = "\n ,.:;!?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # no '-': the separator stays unambiguous


def write_checkpoint(path, seed=0, dataset="shakespeare_char", **model_args):
    """A ckpt.pt with the keys train.py saves."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.manual_seed(seed)
    config = GPTConfig(**{**dict(block_size=32, vocab_size=len(VOCAB), n_layer=2, n_head=2, n_embd=32), **model_args})
    model = GPT(config)
    save_checkpoint({"model": model.state_dict(), "optimizer": {}, "model_args": dataclasses.asdict(config),
                     "config": {"dataset": dataset}, "iter_num": 7, "best_val_loss": 4.25, "trained_seconds": 1.0,
                     "rng": {}, "sampler": {}}, path)
    return model.eval()


@pytest.fixture
def run(tmp_path):
    """A training run's out_dir: ckpt.pt and the char-level meta.json beside it."""
    write_checkpoint(tmp_path / "ckpt.pt")
    tokenizer.write_meta(tmp_path, tokenizer.char_meta(VOCAB))
    return tmp_path


def sample(*args, cwd=None):
    result = run_script("sample.py", "--device=cpu", "--dtype=float32", *args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith(SEP)
    return result.stdout[:-len(SEP)].split(SEP), result.stderr


def test_samples_and_tokens_asked_for(run):
    samples, err = sample(f"--out_dir={run}", "--start=ROMEO:", "--num_samples=3", "--max_new_tokens=25")
    assert len(samples) == 3 and len(set(samples)) > 1  # temperature 0.8: they differ
    for s in samples:  # char-level: one character per token, after the prompt
        assert s.startswith("ROMEO:") and len(s) == len("ROMEO:") + 25 and set(s) <= set(VOCAB)
    assert str(run / "ckpt.pt") in err and str(run / "meta.json") in err and "75 tokens" in err


@pytest.mark.parametrize("prompt_len, new", [(5, 20), (40, 30)])  # the second goes past block_size (32)
def test_greedy_is_the_models_argmax_with_and_without_the_cache(run, prompt_len, new):
    prompt = ("To be or not to be, that is the question. " * 2)[:prompt_len]
    args = [f"--out_dir={run}", f"--start={prompt}", "--num_samples=2", f"--max_new_tokens={new}", "--temperature=0"]
    cached, err = sample(*args, "--use_cache=true")
    uncached, _ = sample(*args, "--use_cache=false", "--seed=99")
    assert cached == uncached and len(cached) == 1 and "greedy" in err  # greedy: every sample would be the same
    model = write_checkpoint(run / "same.pt")  # the same weights, decoded here without sample.py
    encode, decode = tokenizer.load_tokenizer(tokenizer.char_meta(VOCAB))
    ids = model.generate(torch.tensor([encode(prompt)]), new, temperature=0, use_cache=False)[0].tolist()
    assert cached[0] == decode(ids)


def test_seed_top_k_and_top_p(run):
    base = [f"--out_dir={run}", "--num_samples=1", "--max_new_tokens=30", "--start=A"]
    a, b, c = (sample(*base, "--temperature=1.0", "--top_k=None", f"--seed={s}")[0] for s in (1, 1, 2))
    assert a == b and a != c
    greedy = sample(*base, "--temperature=0")[0]
    assert greedy == sample(*base, "--top_k=1")[0] == sample(*base, "--top_k=None", "--top_p=0")[0]


def test_best_pt_unless_ckpt_is_named(run):
    write_checkpoint(run / "best.pt", seed=1)
    args = [f"--out_dir={run}", "--num_samples=1", "--max_new_tokens=30", "--temperature=0"]
    best, err = sample(*args)
    assert str(run / "best.pt") in err
    latest, err = sample(*args, "--ckpt=ckpt.pt")
    assert str(run / "ckpt.pt") in err and best != latest


def test_tokenizer_from_the_training_dataset_and_a_prompt_file(tmp_path):
    """No meta.json in out_dir: data/<the config's dataset>/ from here; a prompt file is UTF-8."""
    vocab = VOCAB + "éü"
    write_checkpoint(tmp_path / "run" / "ckpt.pt", dataset="mine", vocab_size=len(vocab))
    tokenizer.write_meta(tmp_path / "data" / "mine", tokenizer.char_meta(vocab))
    (tmp_path / "prompt.txt").write_text("Café über\n", encoding="utf-8")
    samples, err = sample("--out_dir=run", "--start=FILE:prompt.txt", "--num_samples=1", "--max_new_tokens=5",
                          cwd=tmp_path)
    assert os.path.join("data", "mine", "meta.json") in err
    assert samples[0].startswith("Café über\n") and len(samples[0]) == 10 + 5


def test_dtype_auto_samples_in_bfloat16_only_from_512_wide(tmp_path, monkeypatch):
    """A token at a time, bf16 ran 0.43x as fast as float32 at width 128 on a CPU with native bf16, 1.02x at 512."""
    import device
    monkeypatch.setattr(device, "native_bf16", lambda device_type: device_type == "cpu")  # what this test asks of the CPU
    for width, dtype in ((128, "float32"), (512, "bfloat16")):
        write_checkpoint(tmp_path / str(width) / "ckpt.pt", n_layer=1, n_embd=width)
        tokenizer.write_meta(tmp_path / str(width), tokenizer.char_meta(VOCAB))
        result = run_script("sample.py", f"--out_dir={tmp_path / str(width)}", "--num_samples=1", "--max_new_tokens=2")
        assert result.returncode == 0 and f"cpu {dtype}" in result.stderr, result.stderr


def test_sampling_dtype_is_float32_on_a_cpu_below_512_wide(monkeypatch):
    """sample.py's choice, and bench.py's: "auto" is bf16 where it is native, but float32 on a CPU below 512 wide;
    a dtype asked for is kept."""
    import device
    monkeypatch.setattr(device, "native_bf16", lambda device_type: True)
    narrow, wide, asked = (GPT(GPTConfig(block_size=8, vocab_size=11, n_layer=1, n_head=2, n_embd=w))
                           for w in (32, 512, 32))
    assert [sampling_dtype(m, "cpu", d) for m, d in ((narrow, "auto"), (wide, "auto"), (asked, "bfloat16"))] == \
        ["float32", "bfloat16", "bfloat16"]


def test_compile_falls_back_to_the_same_text(run, monkeypatch):
    args = [f"--out_dir={run}", "--num_samples=1", "--max_new_tokens=8", "--temperature=0"]
    eager, _ = sample(*args)

    def broken(fn, *a, **k):
        def call(*args, **kwargs):
            raise RuntimeError("no C++ compiler")
        return call
    monkeypatch.setattr(torch, "compile", broken)
    compiled, err = sample(*args, "--compile=true")
    assert compiled == eager and "RuntimeError" in err


@pytest.mark.parametrize("prompt, new, warm_up", [(5, 20, [(1, True)]), (5, 50, [(1, True), (32, False)])])
def test_compile_warms_up_only_the_steps_the_sample_takes(run, monkeypatch, prompt, new, warm_up):
    """Before sampling, a token through the cache and, only where the sample moves the window (block_size 32), the
    whole window: the shapes the sample will use, not a throwaway sample. A stand-in for torch.compile counts."""
    calls = []

    def counting(model, **kwargs):
        def step(idx, kv_cache=None):
            calls.append((idx.size(1), kv_cache is not None))
            return model(idx, kv_cache=kv_cache)
        return step
    monkeypatch.setattr(torch, "compile", counting)
    args = [f"--out_dir={run}", f"--start={'A' * prompt}", "--num_samples=1", f"--max_new_tokens={new}",
            "--temperature=0"]
    eager, _ = sample(*args)
    compiled, err = sample(*args, "--compile=true")
    assert compiled == eager and "compiled in" in err
    # the sample's own: after the prompt a token at a time through the cache until the window is full, then the window
    steps = [(1, True)] * (min(prompt + new - 1, 32) - prompt) + [(32, False)] * max(prompt + new - 1 - 32, 0)
    assert calls == warm_up + steps


@pytest.mark.slow
def test_compiled_steps_give_the_same_samples(run):
    """sample.py --compile=true, for real, past block_size (32): the eager run's text, sampled as well as greedy."""
    for args in (["--temperature=0"], ["--num_samples=2"]):
        args = [f"--out_dir={run}", "--max_new_tokens=50", *args]
        eager, _ = sample(*args)
        compiled, err = sample(*args, "--compile=true")
        assert compiled == eager and "compiled in" in err and "warning" not in err, err


def test_help():
    result = run_script("sample.py", "--help")
    assert result.returncode == 0 and "--temperature=0.8" in result.stdout and "--top_k=200" in result.stdout


def bad_cases(run):
    whole = (run / "ckpt.pt").read_bytes()
    for name, content in (("corrupt", whole[: len(whole) // 2]), ("garbage", b"not a checkpoint"), ("zero", b"")):
        (run / name).mkdir()
        (run / name / "ckpt.pt").write_bytes(content)
    (run / "empty").mkdir()
    (run / "empty_prompt.txt").write_text("")
    write_checkpoint(run / "alone" / "ckpt.pt", dataset="nowhere")  # a char model away from its tokenizer
    tokenizer.write_meta(run / "other", tokenizer.char_meta(VOCAB + "0123456789"))  # more ids than the model
    tokenizer.write_meta(run / "fewer", tokenizer.char_meta(VOCAB[:-5]))  # fewer: its ids mean other characters
    ckpt = load_checkpoint(run / "ckpt.pt")
    save_checkpoint({**ckpt, "model_args": {**ckpt["model_args"], "logit_scale": 0.25}}, run / "forked.pt")
    sd = dict(ckpt["model"], **{"transformer.ln_f.gain": ckpt["model"]["transformer.ln_f.weight"]})
    save_checkpoint({**ckpt, "model": sd}, run / "misfit.pt")
    return [  # (the arguments, a word the one line has)
        ([f"--out_dir={run / 'nope'}"], "no checkpoint"), ([f"--out_dir={run / 'empty'}"], "no checkpoint"),
        ([f"--out_dir={run / 'corrupt'}"], "cannot read"), ([f"--out_dir={run / 'garbage'}"], "cannot read"),
        ([f"--out_dir={run / 'zero'}"], "cannot read"), ([f"--out_dir={run / 'alone'}"], "--meta"),
        ([f"--out_dir={run}", "--ckpt=forked.pt"], "logit_scale"), ([f"--out_dir={run}", "--ckpt=misfit.pt"], "ln_f"),
        ([f"--out_dir={run}", "--start=ROMEO: 1+1"], "'1'"),
        ([f"--out_dir={run}", f"--start=FILE:{run / 'nope.txt'}"], "nope.txt"),
        ([f"--out_dir={run}", f"--start=FILE:{run / 'empty_prompt.txt'}"], "empty"),
        ([f"--out_dir={run}", f"--meta={run / 'other'}"], "70"), ([f"--out_dir={run}", f"--meta={run / 'fewer'}"], "55"),
        ([f"--out_dir={run}", "--init_from=resme"], "resume"),
        ([f"--out_dir={run}", f"--meta={REPO}/README.md"], "README"),
        ([f"--out_dir={run}", "--temprature=0.5"], "temprature"), ([f"--out_dir={run}", "--top_p=1.5"], "top_p"),
        ([f"--out_dir={run}", "--max_new_tokens=0"], "max_new_tokens"), (["--init_from=llama"], "llama"),
        ([f"--out_dir={run}", "--use_cache=false", "--compile=true"], "use_cache"),
        ([f"--init_from={run}"], "config.json"), ([f"--out_dir={run}", "--device=cuda:7"], "cuda:7")]


def test_bad_input_is_one_line_and_exit_2(run):
    for args, word in bad_cases(run):
        result = run_script("sample.py", "--max_new_tokens=3", *args)
        assert (result.returncode, result.stdout) == (2, ""), (args, result.stdout)
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, (args, result.stderr)
        assert word in result.stderr, (args, result.stderr)


def test_a_run_folder_as_init_from_is_one_line_whose_suggestion_works(run):
    result = run_script("sample.py", "--max_new_tokens=3", f"--init_from={run}")
    assert (result.returncode, result.stdout) == (2, "") and result.stderr.count("\n") == 1, result.stderr
    sample(*[w.rstrip("?)") for w in result.stderr.split() if w.startswith("--")], "--max_new_tokens=3")


def test_save_checkpoint_that_fails_midway_leaves_the_old_file(run, monkeypatch):
    before = (run / "ckpt.pt").read_bytes()

    def full_disk(obj, f):
        f.write(b"half a checkpoint")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(ConfigError, match="No space left"):
        save_checkpoint({"model": {}}, run / "ckpt.pt")
    assert (run / "ckpt.pt").read_bytes() == before
    assert sorted(os.listdir(run)) == ["ckpt.pt", "meta.json"]  # no temporary left


ATOMIC_WRITER = """
import sys, torch
from checkpoint import save_checkpoint
for i in range(10 ** 6):
    save_checkpoint({"model": {"w": torch.full((2_000_000,), float(i))}, "model_args": {}, "i": i}, sys.argv[1])
    print(i, flush=True)
"""


@pytest.mark.slow
def test_a_kill_9_at_any_moment_leaves_a_loadable_checkpoint(tmp_path):
    path, cut_short = tmp_path / "ckpt.pt", 0
    for delay in (0.0, 0.05, 0.11, 0.17, 0.23, 0.31):
        proc = subprocess.Popen([sys.executable, "-c", ATOMIC_WRITER, str(path)], cwd=REPO, stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout.readline()  # one save done
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        cut_short += len(os.listdir(tmp_path)) > 1  # killed mid-save: its temporary is left
        ckpt = load_checkpoint(path)  # whole, one version or the next
        assert torch.equal(ckpt["model"]["w"], torch.full((2_000_000,), float(ckpt["i"])))
    assert cut_short  # some kills did land mid-save
    save_checkpoint({"model": {}, "model_args": {}}, path)  # and the dead saves' temporaries are swept
    assert os.listdir(tmp_path) == ["ckpt.pt"]


@pytest.mark.slow
def test_bad_input_as_a_user_sees_it(run):
    """A real process: torch's and Python's own noise would show here."""
    bad_cases(run)
    for args in ([f"--out_dir={run / 'corrupt'}"], [f"--out_dir={run}", "--start=ROMEO: 1+1"]):
        proc = subprocess.run([sys.executable, "sample.py", *args], cwd=REPO, capture_output=True, text=True)
        assert (proc.returncode, proc.stdout) == (2, "") and "Traceback" not in proc.stderr
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.slow
def test_a_stop_mid_sample_ends_the_line_and_says_so(run):
    proc = subprocess.Popen([sys.executable, "sample.py", f"--out_dir={run}", "--num_samples=1",
                             "--max_new_tokens=1000000", "--start=ROMEO:"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.read(40)  # sampling has begun
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err.endswith("\ninterrupted\n") and "Traceback" not in err, err
    assert rest.endswith("\n")


# ---- Hugging Face folders: GPT-2 (through transformers) and Arcee (read here), as save_pretrained writes them

def hf_folder(path, kind):
    transformers = pytest.importorskip("transformers")
    checkpoint.quiet_transformers()
    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(n_positions=32, vocab_size=len(VOCAB), n_layer=2, n_head=2, n_embd=32)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.ArceeConfig(vocab_size=len(VOCAB), hidden_size=32, intermediate_size=128,
                                          num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                          max_position_embeddings=32, hidden_act="gelu_pytorch_tanh",
                                          rms_norm_eps=1e-5, tie_word_embeddings=False)
        model = transformers.ArceeForCausalLM(config)
    model.eval().save_pretrained(path)
    tokenizer.write_meta(path, tokenizer.char_meta(VOCAB))  # as export.py writes it beside the weights
    return model


@pytest.mark.parametrize("kind", ["gpt2", "arcee"])
def test_hugging_face_folders_give_their_logits_and_sample(tmp_path, kind):
    theirs = hf_folder(tmp_path / kind, kind)
    ours, meta, loaded = load_model(str(tmp_path / kind))
    assert meta["itos"] == sorted(VOCAB) and kind in loaded
    idx = torch.randint(0, len(VOCAB), (2, 32))
    with torch.no_grad():
        assert torch.allclose(ours(idx, idx)[0], theirs(idx).logits, atol=1e-5)
    samples, _ = sample(f"--init_from={tmp_path / kind}", "--start=A", "--num_samples=1", "--max_new_tokens=40",
                        "--temperature=0")  # past block_size: the window slides
    encode, decode = tokenizer.load_tokenizer(meta)
    assert samples[0] == decode(ours.generate(torch.tensor([encode("A")]), 40, temperature=0)[0].tolist())


@pytest.mark.slow
@pytest.mark.parametrize("how", ["unreachable", "offline"])
def test_gpt2_without_network_is_one_line_at_once(how, offline_hf):
    """The hub's client would retry for ~25 s, printing each failure."""
    pytest.importorskip("transformers")
    t0 = time.time()
    proc = subprocess.run([sys.executable, "sample.py", "--init_from=gpt2"], cwd=REPO, env=offline_hf(how),
                          capture_output=True, text=True, timeout=300)
    assert (proc.returncode, proc.stdout) == (2, "") and proc.stderr.count("\n") == 1, proc.stderr
    assert "--init_from=FOLDER" in proc.stderr and time.time() - t0 < 60


@pytest.mark.slow
def test_train_then_sample(tmp_path):
    """The README's path end to end, in real processes: prepare a text, train a tiny model, sample from it."""
    (tmp_path / "notes.txt").write_text("To be, or not to be, that is the question.\n" * 200)
    steps = [["data/text/prepare.py", f"--input={tmp_path / 'notes.txt'}", f"--out_dir={tmp_path / 'data'}"],
             ["train.py", f"--data_dir={tmp_path / 'data'}", f"--out_dir={tmp_path / 'out'}", "--n_layer=1",
              "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=4", "--max_iters=20", "--eval_interval=10",
              "--eval_iters=2", "--compile=false", "--device=cpu", "--dtype=float32"],
             ["sample.py", f"--out_dir={tmp_path / 'out'}", "--start=To be", "--num_samples=2", "--max_new_tokens=30"]]
    for step in steps:
        proc = subprocess.run([sys.executable, *step], cwd=REPO, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
    samples, chars = proc.stdout[:-len(SEP)].split(SEP), set((tmp_path / "notes.txt").read_text())
    assert len(samples) == 2 and all(s.startswith("To be") and set(s) <= chars for s in samples)
    assert str(tmp_path / "out") in proc.stderr
