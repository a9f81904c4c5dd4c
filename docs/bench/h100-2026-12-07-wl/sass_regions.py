"""sass_regions.py FILE.csv.gz: ncu's per-instruction source page (--page source
--csv --print-source sass) of one decode launch, cut at its first
griddepcontrol.wait (ACQBULK) and its first wgmma (HGMMA): the warp
instructions executed and the PC samples of each region, and the stall reasons
of the samples between the two."""
import collections
import csv
import gzip
import sys

rows = list(csv.reader(gzip.open(sys.argv[1], "rt")))
hdr, data = rows[1], rows[2:]
ix = {h: i for i, h in enumerate(hdr)}


def val(r, col):
    return int(r[ix[col]] or 0)


src = [r[ix["Source"]].strip() for r in data]
wait = next(n for n, s in enumerate(src) if "ACQBULK" in s)
mma = next(n for n, s in enumerate(src) if "HGMMA" in s)
total = sum(val(r, "# Samples") for r in data)
print("%s: %d instructions, first wait at %d, first wgmma at %d, %d samples" % (sys.argv[1], len(data), wait, mma, total))
for name, lo, hi in (("to the first wait", 0, wait + 1), ("wait to first wgmma", wait + 1, mma), ("from the first wgmma", mma, len(data))):
    part = data[lo:hi]
    print("  %-22s warp instructions %8d  samples %4d" % (name, sum(val(r, "Instructions Executed") for r in part),
                                                        sum(val(r, "# Samples") for r in part)))
why = collections.Counter()
for r in data[wait + 1:mma]:
    for c in hdr:
        if c.startswith("stall_") and "Not Issued" not in c:
            why[c[6:]] += val(r, c)
print("  stalls, wait to first wgmma:", ", ".join("%s %d" % kv for kv in why.most_common(8) if kv[1]))
