"""The Python launcher's two launches of an eager decode layer, on the CPU,
with libcuda's cuLaunchKernel stood in by a C function of the same
signature that returns at once (built here with cc): called through ctypes
with argtypes (the launcher before 2026-12-06 11:40) and without (after).
Run from python/ with PYTHONPATH=.:testing:tests; it reuses the launcher
setup of docs/bench/cpu-2026-12-05-eager-host/host_cost.py (a plan shaped
as the decode's: a launch of 22 parameters and a combine of 7, q nope and q
rope strided, a new q nope and output each layer)."""
import ctypes, os, subprocess, sys, tempfile

here = os.path.dirname(os.path.abspath(__file__))
src = open(os.path.join(here, "..", "cpu-2026-12-05-eager-host", "host_cost.py")).read()
g = {"__name__": "host_cost"}
exec(compile(src[:src.index("proc, tmp, address")], "host_cost", "exec"), g)

tmp = tempfile.mkdtemp()
with open(os.path.join(tmp, "stub.c"), "w") as f:
    f.write("int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,"
            " unsigned bz, unsigned sh, void* s, void** p, void** e) { return 0; }\n")
subprocess.check_call(["cc", "-O2", "-shared", "-fPIC", "-o", os.path.join(tmp, "stub.so"), os.path.join(tmp, "stub.c")])
lib = ctypes.CDLL(os.path.join(tmp, "stub.so"))
vp, u32 = ctypes.c_void_p, ctypes.c_uint
typed = lib["cuLaunchKernel"]
typed.argtypes = [vp, u32, u32, u32, u32, u32, u32, u32, vp, ctypes.POINTER(vp), ctypes.POINTER(vp)]
typed.restype = ctypes.c_int
bare = lib["cuLaunchKernel"]
bare.restype = ctypes.c_int

# The layer closure of host_cost's launcher_us, caught instead of timed.
median_us, layers = g["median_us"], []
g["median_us"] = lambda fn, n=2000, reps=15: layers.append(fn) or 0
g["launcher_us"](16)
layer = layers[0]
prepared = [c.cell_contents for c in layer.__closure__ if type(c.cell_contents).__name__ == "Prepared"][0]
for st in prepared._steps:
    st.fn = vp(0x7F0000001000)  # a function handle, as the driver's

res = {"argtypes": [], "none": []}
for _ in range(5):  # interleaved rounds
    for name, f in (("argtypes", typed), ("none", bare)):
        type(prepared._drv).cuLaunchKernel = staticmethod(f)
        res[name].append(median_us(layer, 2000, 5))
for name, us in res.items():
    print("cuLaunchKernel %-16s a layer's two launches %.2f us (best round; rounds %s)"
          % ("with argtypes:" if name == "argtypes" else "without:", min(us), " ".join("%.2f" % u for u in us)))
