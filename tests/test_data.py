"""
The data pipeline: tokenizer.py's formats, and each data/*/prepare.py on small input (the real tiny
Shakespeare and GPT-2's BPE files come from ../shared when present; those tests skip without them).
"""

import io
import os
import urllib.error

import pytest

import tokenizer
from configurator import ConfigError
import conftest
from conftest import run_script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared", "data")
TINY = next((p for p in (os.path.join(SHARED, "tinyshakespeare", "input.txt"),  # or where the main job put it
                          os.path.join(REPO, "data", "shakespeare_char", "input.txt")) if os.path.isfile(p)), "../shared")
TIKTOKEN_DIR = str(conftest.TIKTOKEN_DIR)
PREPARES = ("shakespeare_char", "shakespeare", "openwebtext", "text")

needs_tiny = pytest.mark.skipif(not os.path.isfile(TINY), reason=f"tiny Shakespeare not found at {TINY}")
needs_bpe = pytest.mark.skipif(not os.path.isdir(TIKTOKEN_DIR), reason=f"tiktoken's gpt2 files not at {TIKTOKEN_DIR}")


@pytest.fixture
def bpe(monkeypatch):
    """GPT-2's BPE from the offline tiktoken cache (TIKTOKEN_CACHE_DIR or ../shared)."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", TIKTOKEN_DIR)
    tokenizer.gpt2_encoding.cache_clear()
    yield tokenizer.gpt2_encoding()
    tokenizer.gpt2_encoding.cache_clear()


def prepare(name, *args):
    """python data/<name>/prepare.py <args>, from the repo root, in this process."""
    return run_script(os.path.join("data", name, "prepare.py"), *args)


def split(folder, name):
    meta = tokenizer.read_meta(folder)
    return tokenizer.read_bin(os.path.join(folder, f"{name}.bin"), meta).tolist(), meta


def assert_one_line_error(result):
    assert (result.returncode, result.stdout) == (2, "") and result.stderr.startswith("error: "), result
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr


# ---- tokenizer.py -------------------------------------------------------------------------------------

def test_char_round_trip_and_a_character_outside_the_vocabulary():
    meta = tokenizer.char_meta("hello world\n")
    encode, decode = tokenizer.load_tokenizer(meta)
    assert meta["vocab_size"] == 9 and encode("\n ") == [0, 1]  # sorted: newline, space, then letters
    assert decode(encode("low world")) == "low world"
    with pytest.raises(ConfigError, match="'z'"):
        encode("hello z")
    assert "".join(tokenizer.stream_decode(tokenizer.char_meta("ab"), [1, 0, 5])) == "ba\ufffd"  # 5: past the vocab


@needs_bpe
def test_gpt2_ids_endoftext_and_characters_split_across_tokens(bpe):
    encode, decode = tokenizer.load_tokenizer(tokenizer.gpt2_meta())
    assert encode("Hello world<|endoftext|>") == [15496, 995, 50256]  # GPT-2's own ids
    text = "naïve café 日本語 🙂!"
    ids = encode(text)
    pieces = list(tokenizer.stream_decode(tokenizer.gpt2_meta(), ids))
    assert "".join(pieces) == text == decode(ids) and len(ids) > len(text.split())  # no half character printed


def test_tiktoken_that_cannot_load_is_one_line(monkeypatch):
    import tiktoken
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: (_ for _ in ()).throw(ConnectionError("a\nb")))
    tokenizer.gpt2_encoding.cache_clear()
    try:
        with pytest.raises(ConfigError, match="TIKTOKEN_CACHE_DIR"):
            tokenizer.gpt2_encoding()
    finally:
        tokenizer.gpt2_encoding.cache_clear()


def test_prepare_text_splits_90_10_and_replaces_a_dataset_whole(tmp_path, capsys):
    text = "abcdefghij" * 10
    meta = tokenizer.prepare_text(text, "char", tmp_path, val_fraction=0.1, source="test")
    train, read = split(tmp_path, "train")
    val, _ = split(tmp_path, "val")
    decode = tokenizer.load_tokenizer(meta)[1]
    assert (len(train), len(val), read) == (90, 10, meta) and decode(train) + decode(val) == text
    tokenizer.prepare_text("xy" * 50, "char", tmp_path)  # again, another text: nothing of the first is left
    assert tokenizer.load_tokenizer(tokenizer.read_meta(tmp_path))[1](split(tmp_path, "train")[0]) == "xy" * 45
    assert sorted(os.listdir(tmp_path)) == ["meta.json", "train.bin", "val.bin"]
    for bad in ("a", "aaaa" * 10, "ab\0" * 10):  # too short, one character, binary
        with pytest.raises(ConfigError):
            tokenizer.prepare_text(bad, "char", tmp_path / "bad")
    assert not (tmp_path / "bad" / "meta.json").exists()


def test_bin_dtype_and_read_bin(tmp_path):
    assert tokenizer.bin_dtype(65536) == "uint16" and tokenizer.bin_dtype(65537) == "uint32"
    meta = {"dtype": "uint16"}
    (tmp_path / "empty.bin").write_bytes(b"")
    (tmp_path / "ragged.bin").write_bytes(b"abc")
    assert len(tokenizer.read_bin(tmp_path / "empty.bin", meta)) == 0
    for name in ("ragged.bin", "missing.bin"):
        with pytest.raises(ConfigError):
            tokenizer.read_bin(tmp_path / name, meta)


@pytest.mark.parametrize("content", [None, "{not json", '{"tokenizer": "bpe", "vocab_size": 3}',
                                     '{"tokenizer": "char", "vocab_size": 3, "itos": ["a"]}',
                                     '{"tokenizer": "gpt2", "vocab_size": 50257, "dtype": "int8"}'])
def test_read_meta_refuses_a_bad_meta_json(tmp_path, content):
    if content is not None:
        (tmp_path / "meta.json").write_text(content)
    with pytest.raises(ConfigError):
        tokenizer.read_meta(tmp_path)


def test_find_meta_json_first_then_nanogpts_pkl(tmp_path):
    import pickle
    (tmp_path / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 2, "itos": {0: "a", 1: "b"}, "stoi": {}}))
    assert tokenizer.find_meta(tmp_path) == (tokenizer.char_meta("ab"), str(tmp_path / "meta.pkl"))
    tokenizer.write_meta(tmp_path, tokenizer.char_meta("xyz"))
    assert tokenizer.find_meta(tmp_path)[0]["itos"] == ["x", "y", "z"]
    assert tokenizer.find_meta(tmp_path / "meta.pkl")[0]["itos"] == ["a", "b"]  # a file named: that one
    assert tokenizer.find_meta(tmp_path / "nowhere") is None
    assert tokenizer.same_tokenizer(tokenizer.char_meta("ba"), tokenizer.char_meta("ab"))
    assert not tokenizer.same_tokenizer(tokenizer.char_meta("ab"), tokenizer.char_meta("ac"))


# ---- data/*/prepare.py ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PREPARES)
def test_every_prepare_answers_help(name):
    result = prepare(name, "--help")
    assert result.returncode == 0 and "--out_dir=" in result.stdout and result.stderr == ""


@needs_tiny
def test_shakespeare_char_gives_nanogpts_numbers(tmp_path):
    result = prepare("shakespeare_char", f"--input={TINY}", f"--out_dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    train, meta = split(tmp_path, "train")
    val, _ = split(tmp_path, "val")
    assert (meta["vocab_size"], len(train), len(val)) == (65, 1_003_854, 111_540)
    with open(TINY, encoding="utf-8") as f:
        text = f.read()
    decode = tokenizer.load_tokenizer(meta)[1]
    assert decode(train[:200]) == text[:200] and decode(val[-200:]) == text[-200:]


@needs_tiny
@needs_bpe
def test_shakespeare_bpe_gives_nanogpts_numbers(tmp_path, bpe):
    result = prepare("shakespeare", f"--input={TINY}", f"--out_dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    train, meta = split(tmp_path, "train")
    val, _ = split(tmp_path, "val")
    assert (meta["tokenizer"], meta["vocab_size"], len(train), len(val)) == ("gpt2", 50257, 301_966, 36_059)
    assert tokenizer.load_tokenizer(meta)[1](train[:5]) == "First Citizen:\nBefore"


@pytest.fixture
def shakespeare(tmp_path, monkeypatch):
    """data/shakespeare_char/prepare.py's module with its folder (and data/shakespeare beside it) in tmp_path."""
    import data.shakespeare_char.prepare as prep
    for name in ("shakespeare_char", "shakespeare"):
        (tmp_path / name).mkdir()
    monkeypatch.setattr(prep, "HERE", str(tmp_path / "shakespeare_char"))
    return prep


def test_shakespeare_text_kept_by_either_folder_is_used_before_downloading(shakespeare, tmp_path, monkeypatch):
    monkeypatch.setattr(shakespeare.urllib.request, "urlopen", lambda *a, **k: pytest.fail("downloaded"))
    (tmp_path / "shakespeare" / "input.txt").write_text("First Citizen:\nSpeak.\n")
    assert shakespeare.shakespeare_text()[0] == "First Citizen:\nSpeak.\n"
    (tmp_path / "shakespeare_char" / "input.txt").write_text("ROMEO:\nHa.\n")
    assert shakespeare.shakespeare_text()[0] == "ROMEO:\nHa.\n"


@needs_tiny
def test_shakespeare_download_is_checked_and_kept(shakespeare, tmp_path, monkeypatch):
    with open(TINY, "rb") as f:
        canonical = f.read()
    for body in (b"a proxy's page, not Shakespeare", canonical):
        monkeypatch.setattr(shakespeare.urllib.request, "urlopen", lambda *a, **k: io.BytesIO(body))
        if body != canonical:
            with pytest.raises(ConfigError):
                shakespeare.shakespeare_text()
            assert not (tmp_path / "shakespeare_char" / "input.txt").exists()
    assert shakespeare.shakespeare_text()[0] == canonical.decode()
    assert (tmp_path / "shakespeare_char" / "input.txt").read_bytes() == canonical


def test_shakespeare_without_network_is_one_line(shakespeare, monkeypatch):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("Temporary failure in name resolution")
    monkeypatch.setattr(shakespeare.urllib.request, "urlopen", offline)
    with pytest.raises(ConfigError, match="--input") as e:
        shakespeare.shakespeare_text()
    assert "\n" not in str(e.value)
    assert os.path.join("shakespeare_char", "input.txt") in str(e.value)  # the plainest way, named too


def test_text_prepare_of_a_folder_drops_a_bom_and_windows_line_ends(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "b.txt").write_bytes("\ufeffsecond file\r\n".encode("utf-8"))
    (tmp_path / "in" / "a.txt").write_text("first file\n")
    (tmp_path / "in" / "skip.md").write_text("not a .txt\n")
    result = prepare("text", f"--input={tmp_path / 'in'}", f"--out_dir={tmp_path / 'o'}", "--val_fraction=0.25")
    assert result.returncode == 0, result.stderr
    train, meta = split(tmp_path / "o", "train")
    val, _ = split(tmp_path / "o", "val")
    text = "first file\n\nsecond file\n"  # sorted, joined by a blank line
    assert tokenizer.load_tokenizer(meta)[1](train + val) == text and len(train) == int(len(text) * 0.75)


@needs_bpe
def test_text_prepare_gpt2(tmp_path, bpe):
    (tmp_path / "in.txt").write_text("The quick brown fox jumps over the lazy dog. " * 20)
    result = prepare("text", f"--input={tmp_path / 'in.txt'}", "--tokenizer=gpt2", f"--out_dir={tmp_path / 'o'}")
    assert result.returncode == 0, result.stderr
    train, meta = split(tmp_path / "o", "train")
    val, _ = split(tmp_path / "o", "val")
    assert meta["tokenizer"] == "gpt2"
    assert tokenizer.load_tokenizer(meta)[1](train + val) == (tmp_path / "in.txt").read_text()


def test_text_prepare_names_a_next_step_with_a_run_folder_of_its_own(tmp_path):
    """Not config/tiny.py's out-tiny, which holds the Shakespeare run: the user's would move it to previous/."""
    import train
    from configurator import configure
    (tmp_path / "in.txt").write_text("some text\n" * 10)
    done = prepare("text", f"--input={tmp_path / 'in.txt'}", f"--out_dir={tmp_path / 'o'}").stdout
    helped = prepare("text", "--help").stdout
    for said, data in ((done, {"data_dir": str(tmp_path / "o")}), (helped, {"dataset": "text"})):
        argv = said[said.rindex("python train.py"):].splitlines()[0].split()[2:]  # run from the repo's root
        argv = [os.path.join(REPO, a) if a.endswith(".py") else a for a in argv]
        cfg = configure(train.config_keys(vars(train)), argv)
        assert cfg["out_dir"] not in ("out", "out-tiny") and cfg.items() >= data.items(), said


def test_text_prepare_reads_a_path_given_to_it_as_the_text_and_never_runs_it(tmp_path):
    """A .py file given as the text is read as text: its side effect never happens. A .txt works as well."""
    script = tmp_path / "myscript.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\nprint('I was executed')\n" * 3)
    (tmp_path / "notes.txt").write_text("some text to read\n" * 10)
    for path in (script, tmp_path / "notes.txt"):
        out = tmp_path / path.stem
        result = prepare("text", str(path), f"--out_dir={out}")
        assert result.returncode == 0, result.stderr
        train, meta = split(out, "train")
        assert "".join(meta["itos"][i] for i in train) == path.read_text()[:len(train)]
    assert not (tmp_path / "ran").exists()


def test_text_prepare_bad_input_is_one_line(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    (tmp_path / "utf16.txt").write_bytes("To be, or not to be\n".encode("utf-16"))
    (tmp_path / "ok.txt").write_text("some text\n" * 10)
    (tmp_path / "a_file").write_text("")
    ok = f"--input={tmp_path / 'ok.txt'}"
    given = lambda name: [f"--input={tmp_path / name}"]  # noqa: E731
    for args, word in (([], "--input"), (given("nope.txt"), "nope.txt"), (given("empty.txt"), "empty.txt"),
                       (given("empty_dir"), "empty_dir"), (given("latin1.txt"), "UTF-8"), (given("utf16.txt"), "UTF-8"),
                       ([ok, "--tokenizer=bpe"], "bpe"), ([ok, "--val_fraction=2"], "val_fraction"),
                       (["--inptu=x"], "inptu"), ([ok, f"--out_dir={tmp_path / 'a_file' / 'o'}"], "a_file")):
        result = prepare("text", f"--out_dir={tmp_path / 'o'}", *args)
        assert_one_line_error(result)
        assert word in result.stderr, (args, result.stderr)
    assert not (tmp_path / "o").exists()


@needs_bpe
def test_openwebtext_tokenize_ends_each_document(bpe):
    import data.openwebtext.prepare as owt
    assert owt.tokenize({"text": "Hello world."}) == {"ids": [15496, 995, 13, 50256], "len": 4}
    assert owt.tokenize({"text": "<|endoftext|>"})["ids"].count(50256) == 1  # in the text, only text


def test_openwebtext_bins_are_written_whole_through_replace_file(tmp_path):
    """Each split's ids, shard by shard, into one file renamed into place: the documents' ids in order."""
    import numpy as np
    import data.openwebtext.prepare as owt
    docs = [[1, 2, 3], [4], [5, 6]]

    class Shards:  # as much of a Hugging Face dataset as write_ids reads
        def __init__(self, rows):
            self.rows = rows

        def __len__(self):
            return len(self.rows)

        def shard(self, num_shards, index, contiguous):
            return Shards(self.rows[index::num_shards][:1] if num_shards == len(self.rows) else self.rows)

        def with_format(self, kind):
            return {"ids": [np.asarray(r) for r in self.rows]}
    path = tmp_path / "val.bin"
    tokenizer.replace_file(path, lambda f: owt.write_ids(Shards(docs), f))
    assert np.fromfile(path, dtype=np.uint16).tolist() == [1, 2, 3, 4, 5, 6]
    assert os.listdir(tmp_path) == ["val.bin"]


def test_openwebtext_refuses_its_download_from_train_and_needs_datasets(tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSGPT_PREPARE_FROM_TRAIN", "1")
    assert_one_line_error(prepare("openwebtext", f"--out_dir={tmp_path}"))
    monkeypatch.delenv("GLASSGPT_PREPARE_FROM_TRAIN")
    try:
        import datasets  # noqa: F401
    except ImportError:
        result = prepare("openwebtext", f"--out_dir={tmp_path}")
        assert_one_line_error(result)
        assert "datasets" in result.stderr
    assert os.listdir(tmp_path) == []
