import json, glob, collections, os, statistics, sys
d = sys.argv[1]
us = collections.defaultdict(list); chk = {}
for f in sorted(glob.glob(d + "/ab-*.json")):
    v = os.path.basename(f).split("-")[1]
    try:
        j = json.load(open(f))
    except Exception as e:
        print(f, e); continue
    for sec, rows in j.items():
        if isinstance(rows, list):
            for r in rows:
                if isinstance(r, dict) and "us" in r and "name" in r:
                    us[(r["name"], v)].append(r["us"])
                    chk[(r["name"], v)] = (r.get("check") or "")[:60]
vs = sorted({v for _, v in us})
print("%-26s" % "row" + "".join("%26s" % (v + " us") for v in vs) + "  " + "  ".join("%s/A" % v for v in vs[1:]) + "   check")
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    print("%-26s" % n + "".join("%26s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs)
          + "  " + "  ".join("%5.3f" % (m[v] / m["A"]) for v in vs[1:]) + "   " + chk.get((n, vs[-1]), ""))
