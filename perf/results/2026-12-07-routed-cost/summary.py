# Medians and per-round ratios of run.sh output: lat8 = typical half round trip (us), bw8l32 = message rate (Mpps).
import re,statistics,collections,sys
d=collections.defaultdict(dict)
for line in open(sys.argv[1]):
    m=re.match(r'round (\d+) (\S+) (\S+): +(.*)',line)
    if not m: continue
    r,who,test,rest=m.groups(); f=rest.split()
    val=float(f[4]) if test.startswith('lat') else float(f[4])  # lat: typical us; bw: Mpps column
    d[test].setdefault(int(r),{})[who]=val
for test,rounds in d.items():
    whos=sorted({w for v in rounds.values() for w in v})
    med={w:statistics.median([v[w] for v in rounds.values() if w in v]) for w in whos}
    print(test, {w:round(x,3) for w,x in med.items()}, 'rounds', len(rounds))
    for w in whos:
        if w=='any': continue
        rs=sorted(v[w]/v['any'] for v in rounds.values() if w in v and 'any' in v)
        print(f"  {w}/any median {statistics.median(rs):.3f} [{rs[0]:.3f}-{rs[-1]:.3f}]")
    if 'routed-before' in whos:
        rs=sorted(v['routed-after']/v['routed-before'] for v in rounds.values())
        print(f"  after/before median {statistics.median(rs):.3f} [{rs[0]:.3f}-{rs[-1]:.3f}]")
