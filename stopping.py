"""
Stopping a training run on a signal: Ctrl-C (SIGINT) and SIGTERM are acknowledged at once and
honoured where train.py's loop asks (requested), between iterations and between eval batches, so
that it saves the state of the last complete iteration within seconds and exits 128 + the signal's
number (130, 143), as an interrupted command does. Before the first iteration it saves nothing.

The handler only sets a flag: nothing is ever cut off half done. After the first signal, the same
one again (Ctrl-C twice) quits at once, ckpt.pt as last saved; another one is the same stop, told
twice (torchrun passes a SIGTERM on after the terminal's SIGINT).
"""

import contextlib
import os
import signal
import sys
import time

ECHO = 0.5  # the same signal again within this many seconds is the same stop, sent twice


class Stopper:

    def __init__(self, master=True):
        self.master = master  # under torchrun only rank 0 speaks
        self.signum = None  # the signal that asked for the stop, once one has
        self.heard = 0.0
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, self.handle)

    def handle(self, signum, frame):
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum = signum
            self.heard = time.monotonic()
            self.tell(f"{name}: stopping after the iteration under way, saving ckpt.pt "
                      f"({name} again quits at once)")
        elif signum == self.signum and time.monotonic() - self.heard > ECHO:
            self.tell(f"{name}: quitting at once; ckpt.pt stays as last saved")
            os._exit(128 + signum)

    @property
    def requested(self):
        return self.signum is not None

    def tell(self, message):
        # os.write: the signal may have come in the middle of a print; its reader may have gone
        if self.master:
            with contextlib.suppress(OSError):
                os.write(sys.stderr.fileno(), f"{message}\n".encode())
