"""Whether the Hugging Face hub may be reached, and whether an error was a failed connection.

The one place that reads the offline switches. ``HF_HUB_OFFLINE`` turns every Hugging Face
library offline; ``HF_DATASETS_OFFLINE`` only ``datasets`` and ``TRANSFORMERS_OFFLINE`` only
``transformers``, so the check names the library it guards. :func:`hub_reachable` asks the hub one
HTTP question with a short total timeout; :func:`offline_mode` switches the libraries offline for a
block when it does not answer, so nothing waits on their retries.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

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


#: endpoint -> why it cannot be used ("" when it answered); filled by :func:`hub_reachable`
_REACHABLE: dict[str, str] = {}


def hub_endpoint() -> str:
    """The hub's address, as the Hugging Face libraries read it (``HF_ENDPOINT``)."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def _ask_hub(endpoint: str, timeout: float) -> str:
    """Send one HTTP HEAD request to ``endpoint``; "" when it answers within ``timeout`` seconds in all
    (connecting, TLS and the reply together), else why not."""

    answer: list[str] = []

    silent = f"{endpoint} did not answer an HTTP request within {timeout:g} s"

    def ask() -> None:
        try:
            with urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout):
                answer.append("")
        except urllib.error.HTTPError as exc:  # it answered; a 5xx means it cannot serve files now
            answer.append("" if exc.code < 500 else f"{endpoint} answered HTTP {exc.code}")
        except Exception as exc:  # noqa: BLE001 - refused, no route, DNS, TLS, timeout: all "not usable"
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):  # its own timeout can fire before join() returns
                answer.append(silent)
            else:
                answer.append(f"{endpoint} could not be reached ({reason})")

    thread = threading.Thread(target=ask, name="primebench-hub-check", daemon=True)
    thread.start()
    thread.join(timeout)
    return answer[0] if answer else silent


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers an HTTP request within ``timeout`` seconds in all (cached
    per endpoint).

    Checked before anything asks the hub for a file: the libraries retry a dead connection for tens
    of seconds before they fail, and an endpoint that accepts the connection but never answers would
    hang them for minutes; an offline user should hear the offline fix at once. A TCP connection
    alone is not an answer: the check waits for the HTTP reply (any status below 500)."""
    endpoint = hub_endpoint()
    if endpoint not in _REACHABLE:
        _REACHABLE[endpoint] = _ask_hub(endpoint, timeout)
    return not _REACHABLE[endpoint]


def hub_unreachable_reason() -> str:
    """Why :func:`hub_reachable` said no, for error messages (the endpoint and what happened)."""
    endpoint = hub_endpoint()
    return _REACHABLE.get(endpoint) or f"{endpoint} could not be reached"


def hub_available(library: str = "datasets") -> bool:
    """Not switched offline for ``library`` and the hub answers."""
    return not hf_offline(library) and hub_reachable()


def hf_home() -> Path:
    """The Hugging Face home folder, as the libraries read it now (``HF_HOME``, else
    ``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``)."""
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "huggingface"
    return Path(home).expanduser()


def hub_cache_dir() -> Path:
    """The hub's file cache, as huggingface_hub reads it now (``HF_HUB_CACHE``, else ``HF_HOME/hub``)."""
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or hf_home() / "hub"
    return Path(cache).expanduser()


def datasets_cache_dir() -> Path:
    """The ``datasets`` library's cache, as it reads it now (``HF_DATASETS_CACHE``, else ``HF_HOME/datasets``)."""
    return Path(os.environ.get("HF_DATASETS_CACHE") or hf_home() / "datasets").expanduser()


def hf_cache_holds_datasets() -> bool:
    """Whether the Hugging Face caches hold any dataset (a ``datasets--*`` folder in the hub cache, or
    anything in the ``datasets`` cache): offline, only a cached dataset can load."""

    hub = hub_cache_dir()
    data = datasets_cache_dir()
    try:
        if hub.is_dir() and any(p.name.startswith("datasets--") for p in hub.iterdir()):
            return True
        return data.is_dir() and any(not p.name.startswith(".") for p in data.iterdir())
    except OSError:
        return False


@contextlib.contextmanager
def offline_mode():
    """Switch the Hugging Face libraries offline for the block, whatever the environment says, so a
    dataset comes from the cache or fails at once (no retries against an unreachable hub).

    The libraries read ``HF_HUB_OFFLINE`` when they are imported, so besides the environment the
    already-imported flags (``huggingface_hub.constants``, ``datasets.config``) are set; all are
    restored afterwards."""

    with contextlib.suppress(ImportError):  # imported here so that its flag is saved and restored
        importlib.import_module("huggingface_hub.constants")
    env = {name: os.environ.get(name) for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    flags = [
        (module, name)
        for module, names in (
            ("huggingface_hub.constants", ("HF_HUB_OFFLINE",)),
            ("datasets.config", ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")),
        )
        if module in sys.modules
        for name in names
        if hasattr(sys.modules[module], name)
    ]
    saved = [(sys.modules[module], name, getattr(sys.modules[module], name)) for module, name in flags]
    os.environ.update(dict.fromkeys(env, "1"))
    for module, name, _ in saved:
        setattr(module, name, True)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
