"""Whether the Hugging Face hub may be reached, and whether an error was a failed connection.

The one place that reads the offline switches. ``HF_HUB_OFFLINE`` turns every Hugging Face
library offline; ``HF_DATASETS_OFFLINE`` only ``datasets`` and ``TRANSFORMERS_OFFLINE`` only
``transformers``, so the check names the library it guards.
"""

from __future__ import annotations

import os

OFFLINE_FLAGS = {
    "datasets": ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"),
    "transformers": ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"),
}


def env_flag(name: str) -> bool:
    """Whether an environment flag such as ``HF_HUB_OFFLINE`` is set to a true value."""
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def hf_offline(library: str = "datasets") -> bool:
    """Whether the offline switches of ``library`` ("datasets" or "transformers") are on."""
    return any(env_flag(flag) for flag in OFFLINE_FLAGS[library])


def is_network_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or anything in its cause chain) looks like a failed connection."""
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names = [cls.__name__ for cls in type(current).__mro__]
        if isinstance(current, (ConnectionError, TimeoutError)) or any(
            key in name for name in names for key in ("Connect", "Timeout", "Offline", "Resolution")
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


_REACHABLE: dict[str, bool] = {}


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers a TCP connection within ``timeout`` seconds (cached).

    Checked before anything asks the hub for a file: the libraries retry a dead connection for tens
    of seconds before they fail, and an offline user should hear the offline fix at once."""
    import socket
    from urllib.parse import urlparse

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if endpoint not in _REACHABLE:
        url = urlparse(endpoint)
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout):
                _REACHABLE[endpoint] = True
        except OSError:
            _REACHABLE[endpoint] = False
    return _REACHABLE[endpoint]


def hub_available(library: str = "datasets") -> bool:
    """Not switched offline for ``library`` and the hub answers."""
    return not hf_offline(library) and hub_reachable()
