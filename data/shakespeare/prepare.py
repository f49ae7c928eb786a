"""
Tiny Shakespeare in GPT-2's BPE (about 302K train / 36K val tokens), e.g. to fine-tune GPT-2:

    python data/shakespeare/prepare.py [--input PATH]

The text comes from the same places, in the same order, as data/shakespeare_char (see there).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # the repo root
from configurator import run  # noqa: E402
from data.shakespeare_char.prepare import shakespeare_text  # noqa: E402  (one home for fetching it)
from tokenizer import prepare_text  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--input", help="a tiny Shakespeare input.txt you already have")
    parser.add_argument("--out_dir", default=os.path.dirname(os.path.abspath(__file__)))
    args = parser.parse_args()
    text, source = shakespeare_text(os.path.dirname(os.path.abspath(__file__)), args.input)
    print(f"source: {source}")
    prepare_text(text, "gpt2", args.out_dir, val_fraction=0.1, source=source)


if __name__ == "__main__":
    run(main)
