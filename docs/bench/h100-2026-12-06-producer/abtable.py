import json, glob, collections, os, statistics
us = collections.defaultdict(list); plan = {}
for f in sorted(glob.glob("/tmp/ab/ab-*.json")):
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
                    plan[(r["name"], v)] = (r.get("plan") or r.get("note") or "")[:90]
vs = ["A", "B"]
print("%-24s%26s%26s  B/A   %s" % ("row", "A us", "B us", "B's plan"))
rat = []
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    rat.append(m["B"] / m["A"])
    print("%-24s" % n + "".join("%26s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs) + " %6.3f  %s" % (rat[-1], plan.get((n, "B"), "")))
r = [x for x in rat if x == x]
print("median B/A %.3f max %.3f min %.3f" % (statistics.median(r), max(r), min(r)) if r else "no rows")
