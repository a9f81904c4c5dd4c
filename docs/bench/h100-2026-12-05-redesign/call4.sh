#!/bin/bash
# Call 4: bench --gpu of the tree before the redesign (fcec6f3) and of main,
# twice each, alternating, on the same GPU in one call.
set -u
S=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/dev.tar.xz && tar -C /tmp/d -xJf .device/old.tar.xz || exit 1
nvidia-smi --query-gpu=name --format=csv,noheader
for i in 1 2; do
  timeout 120 /tmp/d/old/attnplug bench --gpu --json --plugin-dir /tmp/d/old/plugins > $OUT/old$i.json 2>/dev/null; echo "old$i rc=$? at $(( $(date +%s) - S ))s"
  timeout 120 /tmp/d/bin/attnplug bench --gpu --json --plugin-dir /tmp/d/bin/plugins > $OUT/new$i.json 2>/dev/null; echo "new$i rc=$? at $(( $(date +%s) - S ))s"
done
python3 - <<'P'
import json, os
o = os.environ["OUT"]
def rows(f):
    r = json.load(open(f)); out = {}
    for sec in ("decode", "prefill", "sparse_fp8"):
        for row in r.get(sec) or []:
            out[row["name"]] = row["us"]
    return r.get("floors", {}), out
runs = {k: rows("%s/%s.json" % (o, k)) for k in ("old1", "new1", "old2", "new2")}
for k, (f, _) in runs.items():
    print(k, f)
names = [n for n in runs["new1"][1] if n in runs["old1"][1]]
print("%-28s %9s %9s %9s %9s %7s" % ("shape", "old1", "old2", "new1", "new2", "new/old"))
for n in names:
    o1, o2, n1, n2 = (runs[k][1].get(n, float("nan")) for k in ("old1", "old2", "new1", "new2"))
    print("%-28s %9.1f %9.1f %9.1f %9.1f %7.3f" % (n, o1, o2, n1, n2, min(n1, n2) / min(o1, o2)))
P
echo "call4 done at $(( $(date +%s) - S ))s"
