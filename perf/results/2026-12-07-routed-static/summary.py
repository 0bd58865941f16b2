# Medians and per-round ratios of run.sh output: lat8 = typical half round
# trip (us), bw8l32 = message rate (Mpps).
import collections
import re
import statistics
import sys

d = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    m = re.match(r'round (\d+) (\S+) (\S+): +(.*)', line)
    if not m:
        continue
    r, who, test, rest = m.groups()
    d[test].setdefault(int(r), {})[who] = float(rest.split()[4])  # lat: typical us; bw: Mpps
for test, rounds in d.items():
    whos = sorted({w for v in rounds.values() for w in v})
    med = {w: statistics.median([v[w] for v in rounds.values() if w in v]) for w in whos}
    print(test, {w: round(x, 3) for w, x in med.items()}, 'rounds', len(rounds))
    for a, b in (('routed-static', 'ucx'), ('routed-any', 'ucx'), ('routed-static', 'routed-any')):
        rs = sorted(v[a] / v[b] for v in rounds.values() if a in v and b in v)
        if rs:
            print(f"  {a}/{b} median {statistics.median(rs):.3f} [{rs[0]:.3f}-{rs[-1]:.3f}]")
