"""Prints the N slowest tests of a nextest JUnit report (scripts/test, at the end of a run), with
their times and outcome, and the suite's total.

usage: slowest.py JUNIT.xml [N]
"""
import sys
import xml.etree.ElementTree as ET

path = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 15
root = ET.parse(path).getroot()
cases = []
for case in root.iter("testcase"):
    outcome = "ok"
    for child in case:
        if child.tag in ("failure", "error"):
            outcome = "FAIL" if child.tag == "failure" else "ERROR"
        elif child.tag == "skipped":
            outcome = "skipped"
    cases.append((float(case.get("time", "0")), case.get("name", "?"), outcome))
cases.sort(reverse=True)
total = sum(t for t, _, _ in cases)
print("\n%d slowest of %d tests (test time summed over all: %.0f s):" % (min(n, len(cases)), len(cases), total))
print("%9s  %-7s  %s" % ("seconds", "result", "test"))
for t, name, outcome in cases[:n]:
    print("%9.1f  %-7s  %s" % (t, outcome, name))
