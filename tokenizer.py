"""
Text <-> token ids, and the files a dataset is made of. Every data/*/prepare.py writes through here,
and sample.py reads through here, so the format has one home:

    data/<name>/train.bin, val.bin   token ids back to back, uint16 (or uint32 for vocabularies > 65536)
    data/<name>/meta.json            {"tokenizer": "char" | "gpt2", "vocab_size": 65, "dtype": "uint16",
                                      "itos": ["\\n", " ", "!", ...] (char only), "source": "where the text came from"}

"char" maps each distinct character of the text to an id (sorted, as nanoGPT's shakespeare_char);
"gpt2" is OpenAI's GPT-2 BPE from tiktoken (50257 tokens, <|endoftext|> = 50256).
nanoGPT's meta.pkl (a pickle of {"vocab_size", "itos", "stoi"}) is read too, as plain data only.
"""

import codecs
import contextlib
import functools
import io
import json
import os
import pickle

import numpy as np

from configurator import (ConfigError, code_in, held_work, library_help, new_parents, remove_empty, replacing,
                          uninterrupted, unwritable)

if __name__ == "__main__":  # imported, not run: say what this module is and which commands use it
    library_help(__file__)
TOKENIZERS = ("char", "gpt2")
EOT = "<|endoftext|>"


@functools.lru_cache(maxsize=None)
def gpt2_encoding():
    """tiktoken's GPT-2 BPE. tiktoken downloads its merges file once and caches it (TIKTOKEN_CACHE_DIR)."""
    import tiktoken
    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:
        why = str(e) if len(str(e)) <= 160 else str(e)[:160].rsplit(" ", 1)[0] + " ..."  # not cut mid-word
        raise ConfigError(f"cannot load tiktoken's gpt2 encoding ({type(e).__name__}: {why}); "
                          "it is downloaded once, or read from a folder named by TIKTOKEN_CACHE_DIR") from None


def bin_dtype(vocab_size):
    """The smallest unsigned type that holds every id below vocab_size: 2 bytes per token for GPT-2."""
    return "uint16" if vocab_size <= 2 ** 16 else "uint32"


def char_meta(text):
    """A character-level vocabulary: the sorted distinct characters of text."""
    chars = sorted(set(text))
    return {"tokenizer": "char", "vocab_size": len(chars), "itos": chars}


def gpt2_meta():
    return {"tokenizer": "gpt2", "vocab_size": gpt2_encoding().n_vocab}


def load_tokenizer(meta):
    """(encode, decode) for a meta dict: encode(str) -> list of ids, decode(ids) -> str."""
    if meta["tokenizer"] == "char":
        itos = meta["itos"]
        stoi = {ch: i for i, ch in enumerate(itos)}

        def encode(s):
            try:
                return [stoi[ch] for ch in s]
            except KeyError as e:
                raise ConfigError(f"character {e.args[0]!r} is not in this char-level vocabulary "
                                  f"of {len(itos)} characters") from None

        def decode(ids):
            return "".join(itos[i] for i in ids)

        return encode, decode
    enc = gpt2_encoding()
    # <|endoftext|> in the text is the document separator GPT-2 was trained with, so it may appear
    return (lambda s: enc.encode(s, allowed_special={EOT})), (lambda ids: enc.decode(list(ids)))


def stream_decode(meta, ids):
    """
    Yield the text of each id in ids as it arrives. A GPT-2 token is bytes, and one character can be
    split across tokens (an emoji, a Chinese character), so bytes wait in an incremental UTF-8
    decoder until they form whole characters. An id the vocabulary lacks (a padded model vocab) is U+FFFD.
    """
    if meta["tokenizer"] == "char":
        itos = meta["itos"]
        for i in ids:
            yield itos[i] if i < len(itos) else "\ufffd"
        return
    enc = gpt2_encoding()
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for i in ids:
        yield utf8.decode(enc.decode_single_token_bytes(i) if i < enc.n_vocab else "\ufffd".encode())
    yield utf8.decode(b"", final=True)


def write_meta(out_dir, meta):
    """out_dir/meta.json, whole or not at all (written beside it, then renamed over it)."""
    os.makedirs(out_dir, exist_ok=True)
    with replacing(os.path.join(out_dir, "meta.json")) as tmp, open(tmp, "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


def check_dataset_folder(out_dir):
    """A prepare script writes train.bin, val.bin and meta.json into out_dir, over a dataset a prepare wrote
    before and nothing else: not into a training run's folder or a Hugging Face model's, where meta.json is
    the only record of the model's tokenizer, nor over a meta.json or bins of some other kind. Raises ConfigError."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ConfigError(f"cannot prepare a dataset in {out_dir}: it is a file, not a folder; choose another --out_dir")
    why = unwritable(out_dir)  # read-only, /proc, a file on its path: said before the text is read and reported
    if why:
        raise ConfigError(f"cannot prepare a dataset in {out_dir}: {why}; choose another --out_dir")
    held = held_work(out_dir, ("a training run", "a Hugging Face model"))
    if held:
        raise ConfigError(f"cannot prepare a dataset in {out_dir}: it holds {held}, whose meta.json would be "
                          "replaced; choose another --out_dir")
    code = code_in(out_dir, besides=("prepare.py",))  # a dataset's own folder holds its prepare.py, and only that
    if code:  # the checkout, config/, data/: the bins would land among the code (and in git add -A)
        raise ConfigError(f"cannot prepare a dataset in {out_dir}: it holds {code}; a dataset goes in a folder "
                          "of its own, such as data/<name>; choose another --out_dir")
    if os.path.exists(os.path.join(out_dir, "meta.json")):
        try:
            read_meta(out_dir)
        except ConfigError:
            raise ConfigError(f"cannot prepare a dataset in {out_dir}: its meta.json is not a dataset's, and would "
                              "be replaced; remove it or choose another --out_dir") from None
    elif held_work(out_dir, ("a dataset",)):  # a prepare writes meta.json with its bins, last
        raise ConfigError(f"cannot prepare a dataset in {out_dir}: it holds train.bin or val.bin with no meta.json, "
                          "not a dataset a prepare script wrote; remove them or choose another --out_dir")


@contextlib.contextmanager
def dataset_files(out_dir, meta):
    """
    Yields split -> the temporary path to write that split's bin at (beside its place). When the block ends,
    the bins are renamed into place together and meta.json, which marks a finished dataset, comes last; on
    an error or a Ctrl-C the temporaries go, and a dataset there before stays whole (a training reading it
    keeps the files it mapped), never bins of two texts under one meta.json.
    """
    check_dataset_folder(out_dir)
    made = ([] if os.path.exists(out_dir) else [out_dir]) + new_parents(out_dir)  # innermost first
    os.makedirs(out_dir, exist_ok=True)
    tmps = {}

    def path(split):
        tmps[split] = os.path.join(out_dir, f"{split}.bin.tmp.{os.getpid()}")
        return tmps[split]
    try:
        yield path
        with uninterrupted():  # a Ctrl-C waits for these few renames: both datasets never mix
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(out_dir, "meta.json"))
            for split, tmp in tmps.items():
                os.replace(tmp, os.path.join(out_dir, f"{split}.bin"))  # a symlink there: replaced, not written through
            write_meta(out_dir, meta)
    finally:
        for tmp in tmps.values():
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
        remove_empty(made)  # the folders this prepare made go again if it stopped before filling them


def write_dataset(out_dir, train_ids, val_ids, meta):
    """Write train.bin, val.bin and (last, so it marks a finished dataset) meta.json. Returns the meta written."""
    meta = dict(meta, dtype=bin_dtype(meta["vocab_size"]))
    with dataset_files(out_dir, meta) as path:
        for split, ids in (("train", train_ids), ("val", val_ids)):
            np.asarray(ids, dtype=meta["dtype"]).tofile(path(split))
    return meta


def read_meta(folder):
    """The meta.json in folder (or the .json file folder names), checked; a missing or malformed file is a one-line ConfigError."""
    path = os.fspath(folder)
    path = path if path.endswith(".json") else os.path.join(path, "meta.json")
    if not os.path.isfile(path):
        raise ConfigError(f"no meta.json in {folder}")
    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None
    if not isinstance(meta, dict) or meta.get("tokenizer") not in TOKENIZERS:
        raise ConfigError(f"{path}: 'tokenizer' must be one of {', '.join(TOKENIZERS)}")
    if not isinstance(meta.get("vocab_size"), int) or meta["vocab_size"] < 1:
        raise ConfigError(f"{path}: 'vocab_size' must be a positive integer")
    if meta["tokenizer"] == "char" and (not isinstance(meta.get("itos"), list) or len(meta["itos"]) != meta["vocab_size"]):
        raise ConfigError(f"{path}: a char tokenizer needs 'itos', a list of vocab_size characters")
    meta.setdefault("dtype", bin_dtype(meta["vocab_size"]))
    if meta["dtype"] not in ("uint16", "uint32"):
        raise ConfigError(f"{path}: 'dtype' must be uint16 or uint32")
    return meta


def not_utf8(path, error):
    """The one-line error for a text file that does not decode as UTF-8; one in UTF-16 or UTF-32 (Windows'
    Notepad saves "Unicode" so) is named by its byte-order mark, the one thing to change."""
    with open(path, "rb") as f:
        head = f.read(4)
    marks = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"), (codecs.BOM_UTF16_LE, "UTF-16"),
             (codecs.BOM_UTF16_BE, "UTF-16"))
    found = next((name for mark, name in marks if head.startswith(mark)), None)
    why = (f"it is {found}, by the byte-order mark it starts with: save it as UTF-8" if found else
           f"{error.reason} at byte {error.start}")
    return ConfigError(f"{path} is not UTF-8 text ({why})")


def check_prepare(tokenizer, val_fraction):
    """prepare_text's settings, checked: a prepare script checks them before it reads any text, too."""
    if tokenizer not in TOKENIZERS:
        raise ConfigError(f"unknown tokenizer {tokenizer!r}: choose one of {', '.join(TOKENIZERS)}")
    if not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"val_fraction must be between 0 and 1, got {val_fraction}")


def prepare_text(text, tokenizer, out_dir, val_fraction=0.1, source=None):
    """
    Tokenize text and write a dataset: the first 1 - val_fraction of the characters train, the rest
    validate (split before encoding, as nanoGPT, so both tokenizers see the same text in each split).
    """
    check_prepare(tokenizer, val_fraction)
    if "\0" in text:  # valid UTF-8, but no text holds NUL: an image of zeros, a binary format
        raise ConfigError(f"the text holds NUL characters (the first at character {text.index(chr(0)):,}): "
                          "a binary file, not text")
    n = int(len(text) * (1 - val_fraction))
    if n == 0 or n == len(text):
        raise ConfigError(f"{len(text)} characters are too few to split into train and val")
    meta = char_meta(text) if tokenizer == "char" else gpt2_meta()
    if meta["vocab_size"] < 2:  # char's: the distinct characters, counted once
        raise ConfigError(f"the text is one character ({text[:1]!r}) repeated: a model of it has nothing to learn")
    if source:
        meta["source"] = source
    encode, _ = load_tokenizer(meta)
    train_ids, val_ids = encode(text[:n]), encode(text[n:])
    meta = write_dataset(out_dir, train_ids, val_ids, meta)
    print(f"{tokenizer} tokens: vocab {meta['vocab_size']:,}, train {len(train_ids):,}, val {len(val_ids):,} "
          f"({meta['dtype']}) -> {out_dir}")
    return meta


class PlainDataUnpickler(pickle.Unpickler):
    """
    An unpickler that builds only what pickle builds by itself (dicts, lists, tuples, strings, numbers,
    booleans, None). Anything that names a class or function, the way a pickle runs code, is refused
    before it is imported or called.
    """

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("it holds a persistent reference")


def read_nanogpt_meta(path):
    """nanoGPT's meta.pkl (vocab_size, itos {id: char}, stoi {char: id}) as a char meta dict; one-line errors."""
    try:
        with open(path, "rb") as f:
            data = PlainDataUnpickler(io.BytesIO(f.read())).load()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    except Exception as e:  # refused, truncated, not a pickle
        raise ConfigError(f"refused {path}: not plain data ({type(e).__name__}: {str(e)[:120]}); "
                          "only dicts, lists, strings and numbers are read from a pickle") from None
    itos = data.get("itos") if isinstance(data, dict) else None
    if isinstance(itos, dict):  # nanoGPT's {0: "\n", 1: " ", ...}
        itos = [itos.get(i) for i in range(len(itos))]
    n = data.get("vocab_size") if isinstance(data, dict) else None
    if not isinstance(itos, list) or n != len(itos) or not all(isinstance(c, str) and len(c) == 1 for c in itos):
        raise ConfigError(f"{path} is not nanoGPT's char vocabulary (vocab_size and itos, one character per id)")
    stoi = data.get("stoi")
    if stoi is not None and stoi != {c: i for i, c in enumerate(itos)}:
        raise ConfigError(f"{path}: its stoi and itos disagree")
    return {"tokenizer": "char", "vocab_size": n, "itos": itos, "dtype": bin_dtype(n), "source": path}


def find_meta(folder):
    """(meta, path) from folder's meta.json, else its meta.pkl (nanoGPT's); None if it has neither."""
    for name, read in (("meta.json", read_meta), ("meta.pkl", read_nanogpt_meta)):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return read(path), path
    return None


def same_tokenizer(a, b):
    """Whether two meta dicts' ids mean the same characters or tokens."""
    return all(a.get(k) == b.get(k) for k in ("tokenizer", "vocab_size", "itos"))


def tokenizer_label(meta, other=None):
    """meta's tokenizer in a few words, "char, vocab 65"; told apart from other's, if given, where the two differ
    only in which character each id means."""
    alike = other is not None and all(meta.get(k) == other.get(k) for k in ("tokenizer", "vocab_size")) \
        and meta.get("itos") != other.get("itos")
    return f"{meta['tokenizer']}, vocab {meta['vocab_size']}" + (", other characters" if alike else "")


def read_bin(path, meta):
    """A split a prepare script wrote (train.bin, val.bin), memory-mapped in its meta's dtype; one-line errors."""
    if not os.path.isfile(path):
        raise ConfigError(f"no {os.path.basename(path)} in {os.path.dirname(path) or '.'}")
    size, itemsize = os.path.getsize(path), np.dtype(meta["dtype"]).itemsize
    if size % itemsize:
        raise ConfigError(f"{path} is {size} bytes, not a whole number of {meta['dtype']} tokens")
    if size == 0:  # np.memmap cannot map an empty file
        return np.zeros(0, dtype=meta["dtype"])
    return np.memmap(path, dtype=meta["dtype"], mode="r")
