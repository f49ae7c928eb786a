"""
OpenWebText (an open copy of GPT-2's WebText: 8M documents, ~9B GPT-2 tokens) for train_gpt2.py:

    pip install datasets && python data/openwebtext/prepare.py [--num_proc=8]

Downloads ~55 GB into the Hugging Face cache and writes train.bin (~17 GB) and val.bin (~8.5 MB) here.
Each document's GPT-2 tokens are followed by <|endoftext|> (50256), so the model sees where one
document ends and the next begins, as GPT-2 did. --key value, with a space, works too (--num_proc 8).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # the repo root
if __name__ == "__main__":  # before numpy loads: a Ctrl-C meanwhile is one line, not a traceback
    from configurator import quit_quietly_on_early_ctrl_c
    quit_quietly_on_early_ctrl_c()
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from configurator import ConfigError, configure, run, spaced_values  # noqa: E402
from tokenizer import bin_dtype, check_dataset_folder, dataset_files, gpt2_encoding, gpt2_meta  # noqa: E402

DATASET = "Skylion007/openwebtext"  # Parquet files on the Hub: no loading script, datasets >= 4 reads it
DEFAULTS = dict(
    num_proc=max(1, (os.cpu_count() or 2) // 2),  # processes tokenizing (default: half the cores)
    dataset=DATASET,  # a Hugging Face dataset id with a 'text' column
    out_dir=os.path.dirname(os.path.abspath(__file__)),  # where train.bin, val.bin and meta.json go
    val_size=0.0005,  # the fraction of documents held out for val.bin (nanoGPT's: about 4K of 8M)
)


def tokenize(example):
    """One document -> its GPT-2 ids and <|endoftext|>. encode_ordinary: text that spells a special token is text."""
    enc = gpt2_encoding()
    ids = enc.encode_ordinary(example["text"])
    ids.append(enc.eot_token)
    return {"ids": ids, "len": len(ids)}


def write_bin(path, batches, total, dtype, desc=None):
    """
    Write total token ids, given as batches (each a list of id arrays), to path through a memmap:
    the whole split never has to fit in memory, only one batch.
    """
    arr = np.memmap(path, dtype=dtype, mode="w+", shape=(total,))
    pos = 0
    for batch in tqdm(batches, desc=desc, disable=desc is None):
        chunk = np.concatenate([np.asarray(ids, dtype=dtype) for ids in batch]) if len(batch) else []
        arr[pos:pos + len(chunk)] = chunk
        pos += len(chunk)
    if pos != total:
        raise ValueError(f"{path}: wrote {pos} tokens, expected {total}")
    arr.flush()
    del arr


def write_docs(splits, out_dir):
    """Tokenize and write in-memory documents, {split: [text, ...]}: the same steps main() runs at scale."""
    dtype = bin_dtype(gpt2_meta()["vocab_size"])
    with dataset_files(out_dir, dict(gpt2_meta(), dtype=dtype, source="in-memory documents")) as path:
        for split, docs in splits.items():
            rows = [tokenize({"text": d}) for d in docs]
            write_bin(path(split), [[r["ids"] for r in rows]], sum(r["len"] for r in rows), dtype)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    cfg = configure(DEFAULTS, spaced_values(argv, DEFAULTS), files=False)  # --num_proc 8: argparse's style
    if os.environ.get("GLASSGPT_PREPARE_FROM_TRAIN"):  # train.py found no bins and ran this: not unasked
        raise ConfigError("prepare.py does not start OpenWebText's ~55 GB download (~17 GB written here) from train.py: run "
                          "it yourself (pip install datasets && python data/openwebtext/prepare.py), or train on "
                          "Shakespeare in minutes: python train.py config/tiny.py")
    if cfg["num_proc"] < 1:
        raise ConfigError(f"num_proc must be >= 1, got {cfg['num_proc']}")
    if not 0.0 < cfg["val_size"] < 1.0:
        raise ConfigError(f"val_size must be between 0 and 1, got {cfg['val_size']}")
    try:
        from datasets import load_dataset
    except ImportError:
        raise ConfigError("OpenWebText needs Hugging Face datasets: pip install datasets") from None
    gpt2_encoding()  # fail now, not in a worker process, if tiktoken's files are not reachable
    check_dataset_folder(cfg["out_dir"])  # and where the bins go, now, not after the download
    try:
        os.makedirs(cfg["out_dir"], exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot write to {cfg['out_dir']}: {e.strerror}") from None

    dataset = load_dataset(cfg["dataset"], split="train", num_proc=cfg["num_proc"])
    # nanoGPT's split: 0.05% of the documents (about 4K) for validation, shuffled with a fixed seed
    splits = dataset.train_test_split(test_size=cfg["val_size"], seed=2357, shuffle=True)
    splits["val"] = splits.pop("test")
    tokenized = splits.map(tokenize, remove_columns=["text"], desc="tokenizing", num_proc=cfg["num_proc"])

    dtype = bin_dtype(gpt2_meta()["vocab_size"])
    # written beside their place and renamed in at the end: a Ctrl-C hours in leaves no half-written bin
    meta = dict(gpt2_meta(), dtype=dtype, source=f"Hugging Face dataset {cfg['dataset']}")
    with dataset_files(cfg["out_dir"], meta) as path:
        for split, dset in tokenized.items():
            total = int(np.sum(dset["len"], dtype=np.uint64))
            n_batches = min(1024, len(dset))  # contiguous shards, one at a time
            batches = (dset.shard(num_shards=n_batches, index=i, contiguous=True).with_format("numpy")["ids"]
                       for i in range(n_batches))
            write_bin(path(split), batches, total, dtype, desc=f"writing {split}.bin")
            print(f"{split}: {len(dset):,} documents, {total:,} tokens")


if __name__ == "__main__":
    run(main)
