#!/usr/bin/env python3
"""Medians and per-round fabrix/perftest ratios of a rounds file: summary.py rounds-21.txt"""
import collections,statistics,sys
v=collections.defaultdict(dict)
for l in open(sys.argv[1]):
    p=l.split(); r=int(p[0]); tool=p[1]; test=p[3]; v[test].setdefault(r,{})[tool]=float(p[5])
for test,rounds in v.items():
    pairs=[(x['fabrix-perf'], [x[k] for k in x if k!='fabrix-perf'][0]) for x in rounds.values() if len(x)==2]
    fab=[a for a,b in pairs]; raw=[b for a,b in pairs]
    ratios=[a/b for a,b in pairs]
    print(test, "fabrix median %.2f [%.2f-%.2f]"%(statistics.median(fab),min(fab),max(fab)), "raw median %.2f [%.2f-%.2f]"%(statistics.median(raw),min(raw),max(raw)), "ratio median %.3f [%.3f-%.3f] n=%d"%(statistics.median(ratios),min(ratios),max(ratios),len(ratios)))
