"""Die with the parent: a rank whose torchrun is killed (even with kill -9) must not live on holding
its GPU.

    die_with_parent()   # first in a rank's main; torchrun's preexec_fn in megalab.jobs.launch

Linux only (prctl(2) PR_SET_PDEATHSIG): the kernel sends the signal when the thread that forked this
process ends. Elsewhere it does nothing and returns False; the launcher's time limit stays the
guard.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send `sig` to this process when its parent dies; True where it could
    (Linux).

    A parent already gone is not noticed by the kernel (its death came before the request), so the
    parent is read before and after: if it changed, or if a rank of torchrun or of
    megalab.jobs.spawn finds itself adopted by init (neither is ever pid 1), `sig` is sent now."""
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):  # no C library to call (a static or unusual interpreter)
        return False
    launched = "TORCHELASTIC_RUN_ID" in os.environ or "MEGALAB_SPAWNED" in os.environ
    if os.getppid() != parent or (parent == 1 and launched):
        os.kill(os.getpid(), sig)
    return True
