#!/usr/bin/env python3
"""guide_numbers.py - the guides' outputs and numbers, taken from the tools themselves.

    bench/guide_numbers.py [--build DIR] [--check] [FILE.md ...]

A guide marks what a tool printed, so that it can be rerun:

    <!-- output: COMMAND -->
    ```
    (COMMAND's standard output, replaced on every run)
    ```

and, in the text, a number taken from a command's output by a regular expression (its
first group):

    ring <!-- n: COMMAND ;; REGEX -->107 us<!-- /n --> against ...

A command used several times can be named once, anywhere in the page, and then stand for
the command in either mark:

    <!-- cmd NAME: COMMAND -->

Markdown shows none of these comments. COMMAND runs under bash in the source tree, with the build
directory (default: build) first on PATH, no COLL_* variable but those it sets, no
calibration file, and $T a scratch directory. Without --check the files are rewritten;
with --check nothing is written, the differences are printed, and the exit status is 1 when
a page no longer says what its commands print (tests/test_docs_guides.sh runs it so).
Default files: docs/teaching.md and docs/training.md.
"""
import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"(<!-- output: (?P<cmd>.+?) -->\n```[a-z]*\n)(?P<body>.*?)(^```$)",
                   re.S | re.M)
DEFINE = re.compile(r"<!-- cmd (?P<name>[\w.-]+): (?P<cmd>.+?) -->")
INLINE = re.compile(r"(<!-- n: (?P<cmd>.+?) ;; (?P<re>.+?) -->)(?P<val>.*?)(<!-- /n -->)",
                    re.S)


class Runner:
    def __init__(self, build):
        self.cache = {}
        self.tmp = tempfile.TemporaryDirectory(prefix="guide_numbers.")
        env = {k: v for k, v in os.environ.items() if not k.startswith("COLL_")}
        env["PATH"] = os.path.abspath(build) + os.pathsep + env.get("PATH", "")
        env["XDG_CACHE_HOME"] = os.path.join(self.tmp.name, "cache")
        env["T"] = self.tmp.name
        env["LC_ALL"] = "C"
        self.env = env

    def run(self, cmd):
        if cmd not in self.cache:
            p = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=self.env,
                               capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                raise SystemExit(f"guide_numbers: `{cmd}` failed ({p.returncode}):\n{p.stderr}")
            self.cache[cmd] = p.stdout
        return self.cache[cmd]


def render(text, runner, path):
    names = {m.group("name"): m.group("cmd") for m in DEFINE.finditer(text)}

    def block(m):
        out = runner.run(names.get(m.group("cmd"), m.group("cmd"))).rstrip("\n")
        return m.group(1) + out + "\n" + m.group(4)

    def inline(m):
        out = runner.run(names.get(m.group("cmd"), m.group("cmd")))
        found = re.search(m.group("re"), out, re.M)
        if not found:
            raise SystemExit(f"guide_numbers: {path}: /{m.group('re')}/ matches nothing in "
                             f"the output of `{m.group('cmd')}`")
        return m.group(1) + found.group(1) + m.group(5)

    return INLINE.sub(inline, BLOCK.sub(block, text))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="build directory whose tools run (default: build)")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 when a page differs from its commands' output")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    files = a.files or [os.path.join(ROOT, "docs", f) for f in ("teaching.md", "training.md")]
    if not os.path.isdir(a.build):
        raise SystemExit(f"guide_numbers: no build directory {a.build} (meson setup build && "
                         f"meson compile -C build, or --build DIR)")
    runner = Runner(a.build)
    stale = 0
    for path in files:
        old = open(path, encoding="utf-8").read()
        new = render(old, runner, path)
        marks = len(BLOCK.findall(old)) + len(INLINE.findall(old))
        if new == old:
            print(f"{path}: {marks} outputs and numbers as the tools print them")
            continue
        if a.check:
            stale += 1
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), new.splitlines(True), path, path + " (as the tools print)"))
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print(f"{path}: rewritten ({marks} outputs and numbers)")
    if stale:
        print(f"guide_numbers: {stale} page(s) no longer say what their commands print; rerun "
              f"bench/guide_numbers.py --build BUILD to rewrite them, then reread the prose "
              f"around the changes")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
