"""Text <-> token ids, and a dataset's files: train.bin and val.bin (token ids back to back, uint16,
or uint32 past 65536 tokens) and meta.json ({"tokenizer": "char" | "gpt2", "vocab_size", "dtype",
"itos": the characters (char only), "source"}). "char" is one id per distinct character, sorted
(nanoGPT's shakespeare_char); "gpt2" is GPT-2's BPE from tiktoken. nanoGPT's meta.pkl is read as
plain data only: no pickle can run code here."""

import codecs
import functools
import json
import os
import pickle

import numpy as np

from configurator import ConfigError

EOT = "<|endoftext|>"


@functools.lru_cache(maxsize=None)
def gpt2_encoding():
    """tiktoken's GPT-2 BPE: downloaded once and cached (or read from TIKTOKEN_CACHE_DIR)."""
    import tiktoken
    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:  # offline: tiktoken downloads it once
        raise ConfigError("cannot load tiktoken's gpt2 encoding (set TIKTOKEN_CACHE_DIR?): "
                          f"{str(e)[:160]}") from None


def bin_dtype(vocab_size):
    """The smallest unsigned type that holds every id: 2 bytes a token for GPT-2."""
    return "uint16" if vocab_size <= 2 ** 16 else "uint32"


def char_meta(text):
    chars = sorted(set(text))
    return {"tokenizer": "char", "vocab_size": len(chars), "itos": chars,
            "dtype": bin_dtype(len(chars))}


def gpt2_meta():
    return {"tokenizer": "gpt2", "vocab_size": gpt2_encoding().n_vocab, "dtype": "uint16"}


def load_tokenizer(meta):  # (encode, decode): str -> ids, ids -> str
    if meta["tokenizer"] == "gpt2":
        enc = gpt2_encoding()  # <|endoftext|> in a text is GPT-2's document separator: allowed
        return (lambda s: enc.encode(s, allowed_special={EOT})), (lambda ids: enc.decode(list(ids)))
    itos, stoi = meta["itos"], {ch: i for i, ch in enumerate(meta["itos"])}

    def encode(s):
        try:
            return [stoi[ch] for ch in s]
        except KeyError as e:
            raise ConfigError(f"character {e.args[0]!r} is not in this char-level vocabulary "
                              f"of {len(itos)}") from None
    return encode, lambda ids: "".join(itos[i] for i in ids)


def stream_decode(meta, ids):
    """Yield each id's text as it comes (U+FFFD past the vocabulary): a character split across GPT-2
    tokens waits."""
    if meta["tokenizer"] == "char":
        return (yield from (meta["itos"][i] if i < meta["vocab_size"] else "\ufffd" for i in ids))
    enc, utf8 = gpt2_encoding(), codecs.getincrementaldecoder("utf-8")(errors="replace")
    for i in ids:
        piece = enc.decode_single_token_bytes(i) if i < enc.n_vocab else "\ufffd".encode()
        yield utf8.decode(piece)
    yield utf8.decode(b"", final=True)


def replace_file(path, write):
    """write(f) into a file beside path, fsynced, then renamed over it: a crash leaves the old file
    or the new one. Where the file cannot be written (a full disk, a file-size limit, no
    permission), a one-line ConfigError names it, the reason, and the file that stands."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX and Windows
    except Exception as e:
        # torch's zip writer raises a RuntimeError while handling the OSError of a failed write
        cause = e if isinstance(e, OSError) else e.__context__
        if not isinstance(cause, OSError):
            raise
        raise ConfigError(f"cannot write {path}: {cause.strerror or cause}; "
                          f"{path} is as it was") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_meta(folder, meta):
    os.makedirs(folder, exist_ok=True)
    replace_file(os.path.join(folder, "meta.json"),
                 lambda f: f.write((json.dumps(meta, indent=1) + "\n").encode()))


def read_meta(folder_or_json):
    """The meta.json in a folder (or the .json file named), checked; else a one-line ConfigError."""
    path = folder_or_json
    if not str(path).endswith(".json"):
        path = os.path.join(path, "meta.json")
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    ok = isinstance(meta, dict) and meta.get("tokenizer") in ("char", "gpt2")
    ok = ok and type(meta.get("vocab_size")) is int
    if ok and meta["tokenizer"] == "char":
        ok = isinstance(meta.get("itos"), list) and len(meta["itos"]) == meta["vocab_size"]
    if ok:
        meta.setdefault("dtype", bin_dtype(meta["vocab_size"]))
    if not ok or meta["dtype"] not in ("uint16", "uint32"):
        raise ConfigError(f"{path} is not a dataset's meta.json "
                          "(tokenizer char or gpt2, vocab_size, itos, dtype)")
    return meta


class PlainDataUnpickler(pickle.Unpickler):
    """Dicts, lists, strings and numbers: a pickle that names code is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names {module}.{name}")


def read_nanogpt_meta(path):
    """nanoGPT's meta.pkl ({vocab_size, itos {id: char}, stoi}) as a char meta dict; else a
    ConfigError."""
    try:
        with open(path, "rb") as f:
            data = PlainDataUnpickler(f).load()
    except Exception as e:  # refused, truncated, not a pickle, unreadable
        raise ConfigError(f"refused {path}: not plain data "
                          f"({str(e)[:120] or type(e).__name__})") from None
    itos = data.get("itos") if isinstance(data, dict) else None
    itos = [itos.get(i) for i in range(len(itos))] if isinstance(itos, dict) else itos
    if not isinstance(itos, list) or data.get("vocab_size") != len(itos) or \
            not all(isinstance(c, str) and len(c) == 1 for c in itos):
        raise ConfigError(f"{path} is not nanoGPT's char vocabulary "
                          "(vocab_size and itos, one character per id)")
    return {"tokenizer": "char", "vocab_size": len(itos), "itos": itos,
            "dtype": bin_dtype(len(itos))}


def find_meta(path):
    """(meta, its file) from a folder's meta.json, else its meta.pkl (nanoGPT's), or from the file
    named; or None."""
    files = [path]
    if not os.path.isfile(path):
        files = [os.path.join(path, "meta.json"), os.path.join(path, "meta.pkl")]
    for file in map(os.fspath, files):
        if os.path.isfile(file) and file.endswith(".json"):
            return read_meta(file), file
        if os.path.isfile(file) and file.endswith(".pkl"):
            return read_nanogpt_meta(file), file
    return None


def padded_vocab(meta):
    """A new model's vocabulary: GPT-2's BPE padded to a multiple of 64 (50304, as nanoGPT) puts the
    head's matmul, a quarter of GPT-2 124M's FLOPs, on fast GPU kernels; the padded ids are never
    sampled or decoded."""
    return -(-meta["vocab_size"] // 64) * 64 if meta["tokenizer"] == "gpt2" else meta["vocab_size"]


def same_tokenizer(a, b):  # whether two meta dicts' ids mean the same characters or tokens
    return all(a.get(k) == b.get(k) for k in ("tokenizer", "vocab_size", "itos"))


def read_bin(path, meta):
    """A split (train.bin, val.bin), memory-mapped in its meta's dtype; a missing or ragged file is
    a ConfigError."""
    size = os.path.getsize(path) if os.path.isfile(path) else -1
    if size < 0 or size % np.dtype(meta["dtype"]).itemsize:
        raise ConfigError(f"{path} is missing, or not a whole number of {meta['dtype']} tokens")
    if size == 0:  # numpy cannot map an empty file
        return np.zeros(0, dtype=meta["dtype"])
    return np.memmap(path, dtype=meta["dtype"], mode="r")


def read_text(path):
    """A UTF-8 text file (a byte-order mark dropped, CR LF read as LF); else a one-line
    ConfigError."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read {path}: "
                          f"{getattr(e, 'strerror', None) or 'not UTF-8 text'}") from None


def prepare_text(text, tokenizer, out_dir, val_fraction=0.1, source=None):
    """Tokenize text into a dataset in out_dir: the first 1 - val_fraction of the characters train,
    the rest validate (split before encoding, as nanoGPT). Each bin is renamed into place, meta.json
    last."""
    if tokenizer not in ("char", "gpt2") or not 0.0 < val_fraction < 1.0:
        raise ConfigError("tokenizer must be char or gpt2, val_fraction in (0, 1); "
                          f"got {tokenizer!r}, {val_fraction}")
    n = int(len(text) * (1 - val_fraction))
    if "\0" in text or len(set(text)) < 2 or n in (0, len(text)):
        raise ConfigError("the text is too short, one character repeated, or binary (it holds NUL)")
    meta = char_meta(text) if tokenizer == "char" else gpt2_meta()
    if source:
        meta["source"] = source
    encode, _ = load_tokenizer(meta)
    splits = {"train": encode(text[:n]), "val": encode(text[n:])}
    try:
        os.makedirs(out_dir, exist_ok=True)
        if os.path.exists(os.path.join(out_dir, "meta.json")):
            os.remove(os.path.join(out_dir, "meta.json"))  # never an old one over new bins
        for split, ids in splits.items():
            ids = np.asarray(ids, dtype=meta["dtype"])
            replace_file(os.path.join(out_dir, f"{split}.bin"), ids.tofile)
        write_meta(out_dir, meta)
    except OSError as e:  # read-only, a file in the way, a full disk
        raise ConfigError(f"cannot write a dataset to {out_dir}: {e.strerror or e}") from None
    print(f"{out_dir}: vocab {meta['vocab_size']:,}, train {len(splits['train']):,} tokens, "
          f"val {len(splits['val']):,}")
    return meta
