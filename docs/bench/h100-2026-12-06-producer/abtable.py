"""abtable.py BASE V...: the best of each row's rounds, per variant, from /tmp/ab/ab-<V>-<round>.json,
as times and ratios to BASE; the last line names the variant of the lowest median ratio, the base's own being 1."""
import collections
import glob
import json
import os
import statistics
import sys

vs = sys.argv[1:] or ["A", "B"]
us = collections.defaultdict(list)
plan = {}
for f in sorted(glob.glob("/tmp/ab/ab-*.json")):
    v = os.path.basename(f).split("-")[1]
    try:
        j = json.load(open(f))
    except Exception as e:
        print(f, e)
        continue
    for rows in j.values():
        if isinstance(rows, list):
            for r in rows:
                if isinstance(r, dict) and "us" in r and "name" in r:
                    us[(r["name"], v)].append(r["us"])
                    plan[(r["name"], v)] = (r.get("plan") or r.get("note") or "")[:70]
names = sorted({n for n, _ in us})
print("%-22s" % "row" + "".join("%24s" % (v + " us") for v in vs) + "".join("%8s" % (v + "/" + vs[0]) for v in vs[1:]))
ratios = collections.defaultdict(list)
for n in names:
    best = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    line = "%-22s" % n + "".join("%24s" % " ".join("%7.2f" % x for x in us.get((n, v), [])) for v in vs)
    for v in vs[1:]:
        r = best[v] / best[vs[0]]
        if r == r:
            ratios[v].append(r)
        line += "%8.3f" % r
    print(line)
for v in vs[1:]:
    print("%s's plans: %s" % (v, "; ".join(sorted({plan.get((n, v), "") for n in names if (n, v) in plan}))[:300]))
med = {v: statistics.median(r) for v, r in ratios.items() if r}
for v, m in med.items():
    print("%s/%s median %.3f min %.3f max %.3f" % (v, vs[0], m, min(ratios[v]), max(ratios[v])))
if med:
    med[vs[0]] = 1.0  # the base against itself: a variant slower than it is not the fastest
    print("fastest %s" % min(med, key=med.get))
