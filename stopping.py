"""
Stopping a training run on a signal: Ctrl-C (SIGINT) and SIGTERM are acknowledged at once and honoured at the
next safe point, between micro-batches or eval batches, so that train.py saves the state of the last complete
iteration within seconds and exits 128 + the signal's number (130, 143), as an interrupted command does.

Before the first iteration there is nothing to save: a signal ends the run there and then. After the first
signal, the same one again (Ctrl-C twice) quits at once, ckpt.pt as last saved; another one is the same stop,
told twice (torchrun passes a SIGTERM on after the terminal's SIGINT).
"""

import contextlib
import os
import signal
import sys
import time

ECHO = 0.5  # the same signal again within this many seconds is the same stop, sent twice (timeout, a launcher)


class Stopper:

    def __init__(self, master=True):
        self.master = master  # under DDP only rank 0 speaks
        self.signum = None  # the signal that asked for the stop, once one has
        self.armed = False  # True from the first complete iteration: a stop then saves
        self.heard = 0.0
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, self.handle)

    def handle(self, signum, frame):
        name = signal.Signals(signum).name
        if not self.armed:
            self.tell(f"{name}: stopped before the first iteration; nothing trained, nothing saved")
            raise SystemExit(128 + signum)
        if self.signum is None:
            self.signum, self.heard = signum, time.monotonic()
            self.tell(f"{name}: stopping; saving ckpt.pt as it was after the last complete iteration "
                      f"({name} again quits at once)")
        elif signum == self.signum and time.monotonic() - self.heard > ECHO:
            self.tell(f"{name}: quitting at once; ckpt.pt stays as last saved")
            os._exit(128 + signum)

    @property
    def requested(self):
        return self.signum is not None

    def tell(self, message):
        if self.master:  # os.write: the signal may have come in the middle of a print; its reader may have gone
            with contextlib.suppress(OSError):
                os.write(sys.stderr.fileno(), f"{message}\n".encode())
