#!/usr/bin/env python3
"""Splits the CI test command's work between its builds, from Meson's
introspection, so that no test is compiled and run twice for nothing.

  ci_plan.py covered BUILD SUITE... [-- EXCLUDED...]
      names of BUILD's tests in any SUITE and in no EXCLUDED suite: what a
      sanitizer build runs (its phase runs them with the same filter).
  ci_plan.py targets BUILD SUITE... [-- EXCLUDED...]
      the executables those tests run, as ninja targets (relative to BUILD),
      so that a sanitizer build compiles only what it runs.
  ci_plan.py rest-tests BUILD COVERED_FILE
      names of BUILD's tests not named in COVERED_FILE (one name a line).
  ci_plan.py rest-targets BUILD COVERED_FILE
      the ninja targets (paths relative to BUILD) that BUILD's default build
      makes, less the executables and modules that only covered tests use:
      installed targets, libraries and everything a remaining test runs or
      depends on stay.

Test names are unique in this project (Meson would run every test of a
repeated name); a repeat is refused here rather than guessed at.
"""
import json
import os
import subprocess
import sys


def introspect(build, what):
    out = subprocess.run(["meson", "introspect", what, build], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def tests_of(build):
    tests = introspect(build, "--tests")
    names = [t["name"] for t in tests]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        sys.exit(f"ci_plan.py: test names repeated in {build}: {', '.join(repeated)}")
    return tests


def suites_of(test):
    return {s.split(":", 1)[-1] for s in test["suite"]}


def read_names(path):
    with open(path) as f:
        return {line.strip() for line in f if line.strip()}


def selected(build, args):
    cut = args.index("--") if "--" in args else len(args)
    wanted, excluded = set(args[:cut]), set(args[cut + 1:])
    return [t for t in tests_of(build) if suites_of(t) & wanted and not suites_of(t) & excluded]


def covered(build, args):
    for t in selected(build, args):
        print(t["name"])


def targets(build, args):
    build = os.path.realpath(build)
    exes = {os.path.realpath(t["cmd"][0]) for t in selected(build, args)}
    for exe in sorted(e for e in exes if e.startswith(build + "/")):
        print(os.path.relpath(exe, build))


def rest_tests(build, covered_file):
    done = read_names(covered_file)
    for t in tests_of(build):
        if t["name"] not in done:
            print(t["name"])


def rest_targets(build, covered_file):
    done = read_names(covered_file)
    build = os.path.realpath(build)
    targets = introspect(build, "--targets")
    by_file = {os.path.realpath(f): t["id"] for t in targets for f in t["filename"]}

    def used_by(test):
        ids = set(test["depends"])
        exe = os.path.realpath(test["cmd"][0])
        if exe in by_file:
            ids.add(by_file[exe])
        return ids

    kept, dropped = set(), set()
    for t in tests_of(build):
        (dropped if t["name"] in done else kept).update(used_by(t))
    only_covered = dropped - kept
    for t in targets:
        if not t["build_by_default"] or t["type"] == "run":
            continue
        if t["id"] in only_covered and not t["installed"] and t["type"] in ("executable", "shared module"):
            continue
        for f in t["filename"]:
            print(os.path.relpath(os.path.realpath(f), build))


def main(argv):
    if len(argv) >= 3 and argv[1] == "covered":
        covered(argv[2], argv[3:])
    elif len(argv) >= 3 and argv[1] == "targets":
        targets(argv[2], argv[3:])
    elif len(argv) == 4 and argv[1] == "rest-tests":
        rest_tests(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == "rest-targets":
        rest_targets(argv[2], argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
