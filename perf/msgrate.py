#!/usr/bin/env python3
"""Message rate of 8-byte writes over UCX shared memory (issue 16's first
target): fabrix-perf with post lists of 32, signaled (--cq-mod 1: a
completion per write), fabrix-perf's default (--cq-mod 100, as perftest)
and --unsignaled (operations on imported keys, the default), and --unsignaled with
--remote-keys buffer (a key lookup per operation), against ucx_perftest
ucp_put_bw -s 8, interleaved (the order reverses every other round). Prints each round and the median of per-round ratios.
  python3 perf/msgrate.py [ITERATIONS=2000000] [ROUNDS=5] [FABRIX_PERF]"""
import json, os, socket, statistics, subprocess, sys, tempfile, time
FP = sys.argv[3] if len(sys.argv) > 3 else "build/perf/fabrix-perf"
OUT = tempfile.mkdtemp(prefix="msgrate-")
N=int(sys.argv[1]) if len(sys.argv)>1 else 2000000
PAIRS=int(sys.argv[2]) if len(sys.argv)>2 else 5
env=dict(os.environ, UCX_TLS="sysv,posix,cma", UCX_WARN_UNUSED_ENV_VARS="n")
def port():
    s=socket.socket(); s.bind(("127.0.0.1",0)); p=s.getsockname()[1]; s.close(); return p
def fabrix(unsig, keys="import", cq_mod=None):
    out=os.path.join(OUT, f"f{int(time.time()*1000)}.json")
    cmd=[FP,"--loopback","--provider","ucx","--transport","sysv,posix,cma","write","bw","-s","8","-l","32","-n",str(N),"--out_json",out,"--remote-keys",keys]+(["--unsignaled"] if unsig else [])+(["--cq-mod",str(cq_mod)] if cq_mod else [])
    subprocess.run(cmd,env=env,check=True,capture_output=True,timeout=300)
    d=json.load(open(out)); return d["results"][0]["msg_rate_Mpps"]
def perftest():
    p=str(port())
    srv=subprocess.Popen(["ucx_perftest","-p",p],env=env,stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
    for _ in range(50):
        r=subprocess.run(["ucx_perftest","127.0.0.1","-p",p,"-t","ucp_put_bw","-s","8","-n",str(N),"-w","1000","-v"],env=env,capture_output=True,text=True,timeout=300)
        if r.returncode==0: break
        time.sleep(0.1)
    srv.wait(timeout=30)
    lines=[l for l in r.stdout.splitlines() if l.strip() and l.strip()[0].isdigit()]
    f=[x.strip() for x in lines[-1].split(",")] if "," in lines[-1] else lines[-1].split()
    return float(f[-1])/1e6
rows=[]
for i in range(PAIRS):
    seq=[("sig",lambda:fabrix(False,cq_mod=1)),("default",lambda:fabrix(False)),("unsig",lambda:fabrix(True)),("unsig-buffer",lambda:fabrix(True,"buffer")),
         ("raw",perftest)]
    if i%2: seq.reverse()
    r={k:f() for k,f in seq}
    r["load"]=open("/proc/loadavg").read().split()[0]
    rows.append(r); print(r, flush=True)
for k in ("sig","default","unsig","unsig-buffer"):
    ratios=[r[k]/r["raw"] for r in rows]
    print(k, "median ratio %.2f min %.2f max %.2f; fabrix median %.1f M/s; raw median %.1f M/s"%(statistics.median(ratios),min(ratios),max(ratios),statistics.median(r[k] for r in rows),statistics.median(r["raw"] for r in rows)))
