#!/usr/bin/env python3
"""Summarize a meson test log: failed test names, skips, and "N passed, N failed" last.

    python3 tests/summarize.py build/meson-logs/testlog.json

The log holds one JSON object per line, one per test run, with "name" and "result". Exit
status 1 when any test failed, or when the log is missing, empty or unreadable (a run that
tested nothing must not look green).
"""
import json
import sys

PASSED = {"OK", "EXPECTEDFAIL"}
SKIPPED = {"SKIP"}
# Anything else fails: FAIL, TIMEOUT, ERROR, UNEXPECTEDPASS, and results newer meson
# versions may add (INTERRUPT, ...).


def main(argv):
    if len(argv) != 2:
        print("usage: summarize.py path/to/testlog.json", file=sys.stderr)
        return 2
    path = argv[1]
    passed, skipped, failed = 0, 0, []
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    entry = json.loads(line)
                    name, result = str(entry["name"]), str(entry["result"])
                except (ValueError, KeyError, TypeError) as e:
                    print(f"summarize: {path}:{lineno}: bad entry ({e})", file=sys.stderr)
                    failed.append(f"<line {lineno} of {path}>")
                    continue
                if result in PASSED:
                    passed += 1
                elif result in SKIPPED:
                    skipped += 1
                else:
                    failed.append(f"{name} ({result})")
    except OSError as e:
        print(f"summarize: cannot read {path}: {e.strerror}", file=sys.stderr)
        print("0 passed, 1 failed")
        return 1

    if passed + skipped + len(failed) == 0:
        print(f"summarize: {path} holds no test results", file=sys.stderr)
        print("0 passed, 1 failed")
        return 1
    for name in failed:
        print(f"FAILED: {name}")
    if skipped:
        print(f"{skipped} skipped")
    print(f"{passed} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
