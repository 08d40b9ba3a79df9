#!/usr/bin/env python3
"""Keep docs/status.md's "Works and is tested" checkable: every bullet names the tests that
cover it, and every name is a test the build registers.

    python3 tools/status_check.py docs/status.md BUILDDIR
    python3 tools/status_check.py --self-test

Each bullet of the section (a line starting "- ", up to the next bullet or heading) must
hold "Tests:" followed by backquoted names: `agree`, `mp_basic_np*` (a shell pattern must
match at least one test). The registered tests are BUILDDIR/meson-info/intro-tests.json,
meson's own list of what tests/meson.build and its subdirectories define, so a test that is
renamed or removed fails this check until the bullet follows. Tests defined only where an
optional tool is found (nvcc) are not registered on every machine: a bullet names the ones
that always are. Exit status 1 with every problem listed, 2 on bad usage.
"""
import fnmatch
import json
import os
import re
import sys

SECTION = "## Works and is tested"


def bullets(text):
    """The section's bullets as (line number, text)."""
    out, cur, start, inside = [], [], 0, False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            if inside:
                break
            inside = line.strip() == SECTION
            continue
        if not inside:
            continue
        if line.startswith("- "):
            if cur:
                out.append((start, " ".join(cur)))
            cur, start = [line[2:].strip()], n
        elif cur and line.strip():
            cur.append(line.strip())
    if cur:
        out.append((start, " ".join(cur)))
    return out if inside or out else None


def problems(text, tests):
    found = bullets(text)
    if found is None:
        return [f'no "{SECTION}" section']
    if not found:
        return ["the section has no bullets"]
    errs = []
    for line, body in found:
        title = re.match(r"\*\*(.+?)\*\*", body)
        title = title.group(1) if title else body[:40]
        at = body.find("Tests:")
        if at < 0:
            errs.append(f"line {line} ({title}): names no test (Tests: `name`, ...)")
            continue
        names = re.findall(r"`([^`]+)`", body[at:])
        if not names:
            errs.append(f"line {line} ({title}): 'Tests:' with no `name` after it")
        for name in names:
            if not any(fnmatch.fnmatchcase(t, name) for t in tests):
                errs.append(f"line {line} ({title}): no test '{name}' is registered")
    return errs


def self_test():
    tests = {"api", "mp_basic_np2", "mp_basic_np4"}
    good = (f"x\n{SECTION}\n\n- **A**: a. Tests: `api`,\n  `mp_basic_np*`.\n"
            "- **B**: b.\n  Tests: `api`.\n## Not yet\n- c\n")
    cases = [
        (good, 0),
        (good.replace("`api`,", "`apx`,"), 1),  # a test gone
        (good.replace("`mp_basic_np*`", "`mp_tcp_*`"), 1),  # a pattern that matches none
        (good.replace("  Tests: `api`.\n", ""), 1),  # a bullet that names none
        (good.replace(SECTION, "## Works"), 1),  # no section
    ]
    for i, (text, want) in enumerate(cases):
        got = len(problems(text, tests))
        if (got > 0) != (want > 0):
            print(f"self-test case {i}: {got} problems, expected {'some' if want else 'none'}")
            return 1
    print("self-test: ok")
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[3], file=sys.stderr)
        return 2
    intro = os.path.join(argv[2], "meson-info", "intro-tests.json")
    try:
        with open(argv[1], encoding="utf-8") as f:
            text = f.read()
        with open(intro, encoding="utf-8") as f:
            tests = {t["name"] for t in json.load(f)}
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"status_check: {e}", file=sys.stderr)
        return 1
    errs = problems(text, tests)
    for e in errs:
        print(f"{argv[1]}: {e}")
    if errs:
        return 1
    print(f"{argv[1]}: every bullet names registered tests ({len(bullets(text))} bullets)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
