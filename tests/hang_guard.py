"""One limit for everything a test waits on (a program, a ``make`` target, a notebook cell, a
worker): it exists only to catch a hang, never to time the work.

The slowest CPU kind in use (2 cores, AVX2 only, one core kept busy by another process) runs the
longest wait of the suite, a whole ``make distill`` chain on tiny models, in a few minutes; the
limit is far above five times that. ``KT_TEST_HANG_TIMEOUT`` (seconds) overrides it, e.g. to
find a hang sooner on a fast machine.
"""

import os

HANG_TIMEOUT = float(os.environ.get("KT_TEST_HANG_TIMEOUT", 2400))
