"""
A run's files as the tools meet them: a checkpoint asked for by a wrong name, a corrupt one, a run
that has saved none yet, a dataset name mistyped; a disk that fills while saving; a new run moving
the earlier one (its lens pages too) aside; loss.png showing every eval.
"""

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoint import load_checkpoint, load_model
from configurator import ConfigError
from rundir import move_aside, plot_losses
from test_train import TINY, assert_one_line_error, make_dataset, run_train

ROOT = Path(__file__).resolve().parent.parent
WIDE = ["--n_embd=128", "--eval_interval=2"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A trained run's folder (ckpt.pt, best.pt, log.jsonl, meta.json) beside its dataset, data/.
    Its checkpoint is a few MB, as a real run's: torch's zip writer then meets a failed write while
    it writes its records, and raises a RuntimeError over the OSError."""
    tmp = tmp_path_factory.mktemp("run")
    make_dataset(tmp / "data")
    assert run_train("--max_iters=2", *WIDE, data=tmp / "data", out=tmp / "out").returncode == 0
    return tmp / "out"


def suggested_ckpt(error):
    """The --ckpt=NAME an error suggests."""
    [word] = [w for w in str(error).split() if w.startswith("--ckpt=")]
    return word.removeprefix("--ckpt=").rstrip("?)")


def test_a_wrong_or_corrupt_checkpoint_suggests_one_that_loads(run, tmp_path):
    with pytest.raises(ConfigError) as e:
        load_model(out_dir=str(run), ckpt="best")  # best.pt, without its .pt
    assert load_model(out_dir=str(run), ckpt=suggested_ckpt(e.value))[0] is not None
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for name in ("ckpt.pt", "meta.json"):
        (corrupt / name).write_bytes((run / name).read_bytes())
    (corrupt / "best.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError) as e:
        load_model(out_dir=str(corrupt))  # best.pt first: corrupt
    assert suggested_ckpt(e.value) == "ckpt.pt"
    assert load_model(out_dir=str(corrupt), ckpt="ckpt.pt")[0] is not None


def test_a_run_that_has_saved_nothing_yet_is_named_not_the_other_runs(run, tmp_path, monkeypatch):
    started = tmp_path / "started"
    started.mkdir()
    (started / "log.jsonl").write_bytes((run / "log.jsonl").read_bytes())
    os.symlink(run, tmp_path / "another")  # another run beside it
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        load_model(out_dir="started")
    assert "another" not in str(e.value) and "started" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_model(out_dir="nowhere")  # no such run: the runs here are named
    assert "another" in str(e.value)


def test_a_mistyped_dataset_gets_the_name_that_trains(run, tmp_path):
    line = assert_one_line_error(run_train("--max_iters=0", data=run.parent / "dat", out=tmp_path))
    [near] = [w.rstrip("?):") for w in line.split() if w.rstrip("?):") in os.listdir(run.parent)]
    assert run_train("--max_iters=0", data=run.parent / near, out=tmp_path).returncode == 0


def test_a_full_disk_while_saving_is_one_line_and_the_last_checkpoint_stands(run, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("ckpt.pt", "best.pt", "log.jsonl", "meta.json"):
        (out / name).write_bytes((run / name).read_bytes())
    limit = os.path.getsize(out / "ckpt.pt") // 2  # the next save cannot fit; the log and meta can

    def limited():  # Python ignores SIGXFSZ, so a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    cmd = [sys.executable, "train.py", f"--data_dir={run.parent / 'data'}", f"--out_dir={out}",
           *TINY, *WIDE,
           "--init_from=resume", "--max_iters=4"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, preexec_fn=limited)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == 2  # the earlier one, whole
    assert not [n for n in os.listdir(out) if ".tmp." in n]


def test_a_new_run_moves_every_page_and_export_of_the_earlier_one(run, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    files = {"ckpt.pt": (run / "ckpt.pt").read_bytes(), "log.jsonl": b"{}\n", "loss.png": b"png",
             "lens.html": b"<html>", "lens.png": b"png", "romeo.html": b"<html>",
             "hf/config.json": b"{}"}
    for name, data in files.items():
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_bytes(data)
    moved = Path(move_aside(str(out)))
    assert {name: (moved / name).read_bytes() for name in files} == files  # nothing lost
    assert os.listdir(out) == ["previous"]  # nothing of the old model left beside the new one


def test_loss_png_shows_every_eval(tmp_path, monkeypatch):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    records = [{"iter": i, "loss": 4.2 - i / 100} for i in range(250)]
    records += [{"iter": i, "train_loss": 4.3 - i / 90, "val_loss": 4.3 - i / 100}
                for i in (0, 100, 200)]
    shown = []
    savefig = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda fig, *a, **k: shown.append(fig.axes[0].get_ylim()) or savefig(fig, *a, **k))
    assert plot_losses(records, tmp_path / "loss.png")
    [(low, high)] = shown
    losses = [r[k] for r in records for k in ("loss", "train_loss", "val_loss") if k in r]
    assert low <= min(losses) and max(losses) <= high
    assert (tmp_path / "loss.png").stat().st_size > 0
