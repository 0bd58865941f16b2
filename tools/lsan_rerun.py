#!/usr/bin/env python3
"""LeakSanitizer tracer crashes in tools/test.sh's ASan+UBSan run (see there).
  lsan_rerun.py list TESTLOG     names of the failed tests to run again: all of
                                 them where every failure is that crash, else none
  lsan_rerun.py merge TESTLOG RERUN
                                 the rerun's results replace those tests' first
                                 ones in TESTLOG (meson's JSON lines); each first
                                 result is kept beside it, in TESTLOG + ".lsan-crashes"
"""
import json
import sys

CRASH = "LeakSanitizer has encountered a fatal error"
TRACER = "Tracer caught signal"


def results(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def bare(name):  # "fabrix:plugin+unit / loader-v2" -> "loader-v2", as meson test takes it
    return name.split(" / ")[-1]


def is_tracer_crash(r):
    err = (r.get("stderr") or "") + (r.get("stdout") or "")
    return CRASH in err and TRACER in err and "ERROR: AddressSanitizer" not in err and "runtime error:" not in err


def main(argv):
    if argv[1] == "list":
        failed = [r for r in results(argv[2]) if r["result"] not in ("OK", "SKIP", "EXPECTEDFAIL")]
        if failed and all(is_tracer_crash(r) for r in failed):
            for r in failed:
                print(bare(r["name"]))
        return 0
    if argv[1] == "merge":
        first, again = results(argv[2]), {r["name"]: r for r in results(argv[3])}
        with open(argv[2] + ".lsan-crashes", "w") as f:
            for r in first:
                if r["name"] in again:
                    f.write(json.dumps(r) + "\n")
        with open(argv[2], "w") as f:
            for r in first:
                f.write(json.dumps(again.get(r["name"], r)) + "\n")
        for name in again:
            print(f"ASan+UBSan: {name} passed when run again after LeakSanitizer's tracer crashed at its exit")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
