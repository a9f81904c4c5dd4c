"""Test code of the attnplug Python package, never installed with it: the
stand-ins of exactly the sglang objects attnplug touches, in a process
without sglang (standins: ForwardMode, ForwardBatch, RadixAttention, the
pools, ModelRunner, a decode loop and a CUDA-graph runner; handlers:
sglang's dispatch handler module loaded with stand-in imports, generated
requests), the torch MLA backend that stands for sglang's own backend as
the fallback (torch_mla), and a launcher whose kernels are torch code
(fake_kernels).

The tests (make test-python) and python -m attnplug.bench put this folder
(python/testing) on sys.path."""
