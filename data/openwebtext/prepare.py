"""
OpenWebText (an open copy of GPT-2's WebText), as nanoGPT prepares it:

    pip install datasets && python data/openwebtext/prepare.py [--num_proc=8]

It downloads the dataset into the Hugging Face cache and writes train.bin and val.bin here (sizes in
nanoGPT's README). Each document's tokens end with <|endoftext|>, so the model sees where one
document ends and the next begins.
"""

import os
import sys

import numpy as np

# The repo root, so that its modules import from here.
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, REPO)
from configurator import ConfigError, configure, run  # noqa: E402
from tokenizer import gpt2_encoding, gpt2_meta, replace_file, write_meta  # noqa: E402

DATASET = "Skylion007/openwebtext"
DEFAULTS = dict(
    num_proc=max(1, (os.cpu_count() or 2) // 2),  # processes tokenizing (default: half the cores)
    out_dir=os.path.dirname(os.path.abspath(__file__)),  # where train.bin, val.bin and meta.json go
)


def tokenize(example):
    enc = gpt2_encoding()
    # Ordinary encoding: a text that spells a special token is read as text.
    ids = enc.encode_ordinary(example["text"]) + [enc.eot_token]
    return {"ids": ids, "len": len(ids)}


def write_ids(dset, f):
    """The documents' ids into the open file f as uint16, one shard in memory at a time."""
    shards = min(1024, len(dset))
    for i in range(shards):
        shard = dset.shard(num_shards=shards, index=i, contiguous=True).with_format("numpy")
        np.concatenate(shard["ids"]).astype(np.uint16).tofile(f)


def main():
    cfg = configure(DEFAULTS)
    # train.py found no bins and ran this, but a download this large must be asked for.
    if os.environ.get("GLASSGPT_PREPARE_FROM_TRAIN"):
        raise ConfigError("OpenWebText's large download is not started from train.py: run "
                          "python data/openwebtext/prepare.py yourself "
                          "(after pip install datasets)")
    try:
        from datasets import load_dataset
    except ImportError:
        raise ConfigError("OpenWebText needs Hugging Face datasets: pip install datasets") from None
    # This fails here, not in every worker, if tiktoken's files cannot be had.
    gpt2_encoding()
    dataset = load_dataset(DATASET, split="train", num_proc=cfg["num_proc"])
    # nanoGPT's split, so that its validation documents are ours.
    splits = dataset.train_test_split(test_size=0.0005, seed=2357, shuffle=True)
    splits["val"] = splits.pop("test")
    num_proc = cfg["num_proc"]
    tokenized = splits.map(tokenize, remove_columns=["text"], desc="tokenizing", num_proc=num_proc)
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
