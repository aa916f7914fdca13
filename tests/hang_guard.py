"""One limit for everything a test waits on (a program, a ``make`` target, a notebook cell, a
worker): it exists only to catch a hang, never to time the work.

The longest wait of the suite, a whole ``make distill`` chain on tiny models, takes under three
minutes on an idle 2-core AVX-512 machine; on the slowest kind in use (2 cores, AVX2 only, one
core kept busy by another process) it ran past the ten minutes its old limit allowed. The limit
is six times those ten minutes. ``KT_TEST_HANG_TIMEOUT`` (seconds) overrides it, e.g. to find a
hang sooner on a fast machine.
"""

import os

HANG_TIMEOUT = float(os.environ.get("KT_TEST_HANG_TIMEOUT", 3600))
