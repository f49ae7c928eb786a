"""
OpenWebText (an open copy of GPT-2's WebText: 8M documents, ~9B GPT-2 tokens), as nanoGPT prepares it:

    pip install datasets && python data/openwebtext/prepare.py [--num_proc=8]

Downloads ~55 GB into the Hugging Face cache and writes train.bin (~17 GB) and val.bin (~8.5 MB) here.
Each document's tokens end with <|endoftext|>, so the model sees where one document ends and the next begins.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # the repo root
from configurator import ConfigError, configure, run  # noqa: E402
from tokenizer import gpt2_encoding, gpt2_meta, replace_file, write_meta  # noqa: E402

DATASET = "Skylion007/openwebtext"
DEFAULTS = dict(
    num_proc=max(1, (os.cpu_count() or 2) // 2),  # processes tokenizing (default: half the cores)
    out_dir=os.path.dirname(os.path.abspath(__file__)),  # where train.bin, val.bin and meta.json go
)


def tokenize(example):
    enc = gpt2_encoding()
    ids = enc.encode_ordinary(example["text"]) + [enc.eot_token]  # ordinary: text spelling a special token is text
    return {"ids": ids, "len": len(ids)}


def write_ids(dset, f):
    """The documents' ids into the open file f as uint16, one contiguous shard in memory at a time."""
    shards = min(1024, len(dset))
    for i in range(shards):
        shard = dset.shard(num_shards=shards, index=i, contiguous=True).with_format("numpy")
        np.concatenate(shard["ids"]).astype(np.uint16).tofile(f)


def main():
    cfg = configure(DEFAULTS)
    if os.environ.get("GLASSGPT_PREPARE_FROM_TRAIN"):  # train.py found no bins and ran this: not unasked
        raise ConfigError("OpenWebText's ~55 GB download is not started from train.py: run "
                          "python data/openwebtext/prepare.py yourself (after pip install datasets)")
    try:
        from datasets import load_dataset
    except ImportError:
        raise ConfigError("OpenWebText needs Hugging Face datasets: pip install datasets") from None
    gpt2_encoding()  # fails here, not in every worker, if tiktoken's files cannot be had
    dataset = load_dataset(DATASET, split="train", num_proc=cfg["num_proc"])
    splits = dataset.train_test_split(test_size=0.0005, seed=2357, shuffle=True)  # nanoGPT's: ~4K documents
    splits["val"] = splits.pop("test")
    tokenized = splits.map(tokenize, remove_columns=["text"], desc="tokenizing", num_proc=cfg["num_proc"])
    os.makedirs(cfg["out_dir"], exist_ok=True)
    for split, dset in tokenized.items():
        path = os.path.join(cfg["out_dir"], f"{split}.bin")
        # Renamed into place once whole: a stop hours in leaves no half-written bin.
        replace_file(path, lambda f: write_ids(dset, f))
        tokens = int(np.sum(dset["len"], dtype=np.uint64))
        print(f"{split}.bin: {len(dset):,} documents, {tokens:,} tokens")
    write_meta(cfg["out_dir"], dict(gpt2_meta(), source=f"Hugging Face dataset {DATASET}"))


if __name__ == "__main__":
    run(main)
