"""python -m attnplug.launch: sglang's processes started with spawn ask
attnplug too."""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import serve
from attnplug_testing import handlers as testing

# An sglang stand-in on disk, so that a spawned process imports it too:
# the registry module of attnplug_testing.handlers, and a launch_server that asks
# the registry here and in a child started with spawn.
_MODULES = {
    "sglang/srt/layers/attention/tbo_backend.py": "class TboAttnBackend:\n    primary = None\n",
    "sglang/srt/layers/utils/cp_utils.py": "def mla_use_prefill_cp(fb):\n    return False\n",
    "sglang/srt/model_executor/forward_context.py": "def get_attn_backend():\n    return None\n",
    "sglang/srt/model_executor/runner_backend_utils/breakable_cuda_graph.py":
        "def is_in_breakable_cuda_graph():\n    return False\n",
    "sglang/srt/model_executor/runner_backend_utils/tc_piecewise_cuda_graph.py":
        "def is_in_tc_piecewise_cuda_graph():\n    return False\n",
    "sglang/srt/models/deepseek_common/attention_forward_methods/forward_methods.py":
        "from attnplug._sglang import AttnForwardMethodMirror as AttnForwardMethod\n",
    "sglang/srt/models/deepseek_common/utils.py": "_is_hip = False\n",
    "sglang/srt/runtime_context.py":
        "import types\n\ndef get_server_args():\n    return types.SimpleNamespace(enable_deterministic_inference=False)\n",
    "sglang/srt/utils.py": "def use_intel_amx_backend(layer):\n    return False\n",
    "sglang/srt/models/deepseek_common/attention_backend_handler.py": testing._REGISTRY_ONLY,
    # As sglang's schedulers, the child's function lives in a module.
    "sglang/srt/managers/probe.py": textwrap.dedent("""\
        from sglang.srt.models.deepseek_common.attention_backend_handler import AttentionBackendRegistry

        def who(q):
            q.put(type(getattr(AttentionBackendRegistry.get_handler, "__self__", None)).__module__)
        """),
    "sglang/launch_server.py": textwrap.dedent("""\
        import multiprocessing as mp
        import sys
        from sglang.srt.models.deepseek_common.attention_backend_handler import AttentionBackendRegistry
        from sglang.srt.managers.probe import who

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            p = ctx.Process(target=who, args=(q,))
            p.start()
            print("parent", type(getattr(AttentionBackendRegistry.get_handler, "__self__", None)).__module__)
            print("child", q.get(timeout=60))
            p.join()
            print("args", sys.argv[1:])
        """),
}


class LaunchTest(unittest.TestCase):
    def test_spawned_processes_install_too(self):
        with serve.Server() as s, tempfile.TemporaryDirectory() as d:
            for path, src in _MODULES.items():
                full = os.path.join(d, path)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "w") as f:
                    f.write(src)
            pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            env = dict(os.environ, ATTNPLUG_ADDRESS=s.address,
                       PYTHONPATH=os.pathsep.join([d, pkg, os.environ.get("PYTHONPATH", "")]))
            out = subprocess.run([sys.executable, "-m", "attnplug.launch", "sglang.launch_server", "--model-path", "m"],
                                 env=env, capture_output=True, text=True, timeout=120, cwd=d)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("parent attnplug.sglang", out.stdout, out.stderr)
            self.assertIn("child attnplug.sglang", out.stdout, out.stderr)
            self.assertIn("args ['--model-path', 'm']", out.stdout)


if __name__ == "__main__":
    unittest.main()
