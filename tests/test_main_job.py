"""The README's first command, as a fresh machine runs it: the main job trains, then samples."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHAKESPEARE = next((p for p in (ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt",
                                 ROOT / "data" / "shakespeare_char" / "input.txt") if p.is_file()), ROOT / "nowhere")


@pytest.mark.slow
@pytest.mark.skipif(not SHAKESPEARE.is_file(), reason="needs tiny Shakespeare: ../shared/data/tinyshakespeare/input.txt or "
                    "data/shakespeare_char/input.txt (no network here)")
def test_the_readme_main_job_trains_and_samples(tmp_path):
    """A copy of the checkout's files (none of its data or runs), given tiny Shakespeare where prepare.py looks
    for it first (this machine has no network to fetch it), runs the README's first line after its pip install."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copy(SHAKESPEARE, tmp_path / "data" / "shakespeare_char" / "input.txt")
    line = next(line for line in (ROOT / "README.md").read_text().splitlines()
                if line.startswith("pip install -r requirements.txt") and "python train.py" in line)
    command = line.split(" && ", 1)[1]
    result = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    val = [float(v) for v in re.findall(r"val loss (\d+\.\d+)", result.stdout)]
    assert val[0] > 4.0 and min(val) < 2.0  # it learned: from chance (ln 65 = 4.17) to Shakespeare's shape
    assert os.path.isfile(tmp_path / "out-tiny" / "ckpt.pt")
    samples = result.stdout.split("done: iter", 1)[1]
    assert samples.count("---------------") >= 2 and len(samples) > 1000  # three samples of 500 characters
