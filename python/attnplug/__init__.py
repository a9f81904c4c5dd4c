"""attnplug from Python: a client of ``attnplug serve`` and, in
attnplug.sglang, a drop-in for sglang's AttentionBackendRegistry.

Start with Client (client.py) or attnplug.sglang.install(); docs/python.md
in the repository describes the package.
"""

from attnplug.client import (
    Answer,
    Client,
    Description,
    KernelModule,
    NoPlan,
    Plan,
    Reads,
    ReadsCondition,
    Route,
    ServerError,
    ServerUnavailable,
    UntrustedServer,
    default_address,
)

__version__ = "0.1.0"

__all__ = [
    "Answer",
    "Client",
    "Description",
    "KernelModule",
    "NoPlan",
    "Plan",
    "Reads",
    "ReadsCondition",
    "Route",
    "ServerError",
    "ServerUnavailable",
    "UntrustedServer",
    "default_address",
    "__version__",
]
