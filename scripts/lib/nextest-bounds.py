"""Writes a copy of .config/nextest.toml whose every test bound is at most SECONDS (scripts/test's
ACCEL_TEST_TIMEOUT): each `slow-timeout = { period = "Ps", terminate-after = K ... }` whose P*K is
above it becomes `period = "SECONDSs", terminate-after = 1`.

usage: nextest-bounds.py SECONDS IN OUT
"""
import re
import sys

limit = int(sys.argv[1])
text = open(sys.argv[2]).read()
pat = re.compile(r'slow-timeout = \{ period = "(\d+)s", terminate-after = (\d+)')


def lower(m):
    period, after = int(m.group(1)), int(m.group(2))
    if period * after <= limit:
        return m.group(0)
    return 'slow-timeout = { period = "%ds", terminate-after = 1' % limit


out, n = pat.subn(lower, text)
if n == 0:
    sys.exit("nextest-bounds.py: no slow-timeout found in " + sys.argv[2])
open(sys.argv[3], "w").write(out)
