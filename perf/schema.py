"""The fabrix-perf JSON schema (perf/README.md), as a checker shared by the
tests, compare.sh and plot.py. validate(doc) returns a list of problems."""

TOP = {"schema": str, "provider": str, "transport": str, "device": str, "domain": str,
       "memory": str, "gpu_path": str, "options": dict, "results": list}
# Added later: checked when present (older files lack them).
OPTIONAL = {"provider_choice": str, "provider_reason": str, "passed_over": str, "allocated_by": str,
            "dispatch": str, "remote_keys": str}
OPTIONS = {"qps": int, "tx_depth": int, "post_list": int, "bidirectional": bool}
TESTS = {"write", "read", "write_imm", "send", "fetch_add", "compare_swap"}
COMMON = {"test": str, "mode": str, "bytes": int, "iterations": int, "verified": bool}
BW = ["seconds", "bw_peak_MBps", "bw_avg_MBps", "bw_avg_Gbps", "msg_rate_Mpps"]
LAT = ["t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "t_stdev_us", "t_p99_us", "t_p999_us"]


def _typed(obj, spec, where, out):
    for key, typ in spec.items():
        if key not in obj:
            out.append(f"{where}: missing '{key}'")
        elif typ is int and (isinstance(obj[key], bool) or not isinstance(obj[key], int)):
            out.append(f"{where}: '{key}' is not an integer")
        elif typ is not int and not isinstance(obj[key], typ):
            out.append(f"{where}: '{key}' is not {typ.__name__}")


def validate(doc):
    out = []
    if not isinstance(doc, dict):
        return ["top level is not an object"]
    _typed(doc, TOP, "top", out)
    if out:
        return out
    if doc["schema"] != "fabrix-perf/1":
        out.append(f"unknown schema {doc['schema']!r}")
    _typed(doc, {k: t for k, t in OPTIONAL.items() if k in doc}, "top", out)
    if doc.get("provider_choice", "auto") not in ("auto", "asked"):
        out.append(f"top: unknown provider_choice {doc['provider_choice']!r}")
    if doc.get("allocated_by", "provider") not in ("provider", "fabrix-perf"):
        out.append(f"top: unknown allocated_by {doc['allocated_by']!r}")
    _typed(doc["options"], OPTIONS, "options", out)
    for i, r in enumerate(doc["results"]):
        where = f"results[{i}]"
        if not isinstance(r, dict):
            out.append(f"{where}: not an object")
            continue
        _typed(r, COMMON, where, out)
        if r.get("test") not in TESTS:
            out.append(f"{where}: unknown test {r.get('test')!r}")
        if r.get("mode") not in ("bw", "lat"):
            out.append(f"{where}: unknown mode {r.get('mode')!r}")
            continue
        for key in BW if r["mode"] == "bw" else LAT:
            v = r.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                out.append(f"{where}: '{key}' is not a number >= 0")
        if r["mode"] == "lat" and not out:
            if not r["t_min_us"] <= r["t_typical_us"] <= r["t_p99_us"] <= r["t_p999_us"] <= r["t_max_us"]:
                out.append(f"{where}: latency percentiles out of order")
        if r.get("verified") is not True:
            out.append(f"{where}: not verified")
        if isinstance(r.get("bytes"), int) and r["bytes"] <= 0:
            out.append(f"{where}: bytes <= 0")
        if isinstance(r.get("iterations"), int) and r["iterations"] <= 0:
            out.append(f"{where}: no iterations")
    return out
