"""mkvariants.py DIR V:NAME=val[,NAME=val...] ...: DIR/<V>/ as copies of DIR/B/'s
binaries (plugins/, gpucheck.test, gen) with the named #define values of the
embedded kernel source rewritten in place. The binaries carry the kernel source
verbatim (go:embed) and hash it when they run, so a same-length rewrite of its
#define lines is the build of that variant (bar the Go build ID)."""
import os
import re
import shutil
import sys

root = sys.argv[1]
base = os.path.join(root, "B")
files = ["plugins/attnplug-backend-fa3", "plugins/attnplug-backend-dsa", "gpucheck.test", "gen"]
blobs = {f: open(os.path.join(base, f), "rb").read() for f in files}
for spec in sys.argv[2:]:
    v, sets = spec.split(":")
    sets = [kv.split("=") for kv in sets.split(",")]
    out = os.path.join(root, v)
    os.makedirs(os.path.join(out, "plugins"), exist_ok=True)
    for f, b in blobs.items():
        for name, val in sets:
            pat = re.compile(rb"#define " + name.encode() + rb" (\d+)")
            hits = pat.findall(b)
            if len(hits) != 1 or len(hits[0]) != len(val):
                sys.exit("%s: %s: %d definitions, value %r, want one of %d digits" % (f, name, len(hits), hits, len(val)))
            b = pat.sub(("#define %s %s" % (name, val)).encode(), b)
        p = os.path.join(out, f)
        open(p, "wb").write(b)
        shutil.copymode(os.path.join(base, f), p)
    print(v, " ".join("%s=%s" % tuple(nv) for nv in sets))
