"""Strict reading of the values in a release's ``config.json`` (``mdlm-hf:`` folders and the folders
``primebench import`` writes).

A hand-edited value must never be coerced into a different meaning: ``bool("false")`` is True, so
``"time_conditioning": "false"`` would turn MDLM's time conditioning on and silently change every
number, and ``int(2.5)`` is 2. A flag is a JSON boolean (or 0/1); a size is a JSON integer. Anything
else is a :class:`~harness.errors.CheckpointError` that names the file and the key.
"""

from __future__ import annotations

from typing import Any

from harness.errors import CheckpointError

#: the Hydra ``algo.name`` of BD3-LM's release checkpoints (what tells its ``.ckpt`` from MDLM's layout)
BD3LM_RELEASE_ALGO = "bd3lm"


def config_flag(config: dict[str, Any], key: str, *, where: str, default: bool, label: str | None = None) -> bool:
    """``config[key]`` as a boolean: ``true``/``false`` (or the numbers 0/1); ``default`` when absent.

    ``where`` names the file in the error; ``label`` the key as the user sees it (``prime.carry_over``)."""
    if key not in config:
        return default
    value = config[key]
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    name = label or key
    raise CheckpointError(
        f"{where}: {name!r} is {value!r} ({type(value).__name__}); it must be the JSON boolean true or false",
        fix=f'write "{name.rsplit(".", 1)[-1]}": true or false (no quotes) in {where}',
    )


def config_size(config: dict[str, Any], key: str, *, where: str, minimum: int = 1, label: str | None = None) -> int:
    """``config[key]`` as an integer >= ``minimum`` (a JSON integer; a float only when whole, e.g. 1024.0)."""
    name = label or key
    if key not in config:
        raise CheckpointError(f"{where}: {name!r} is missing", fix=f"add {name!r} (an integer >= {minimum}) to {where}")
    value = config[key]
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or value < minimum:
        raise CheckpointError(
            f"{where}: {name!r} is {value!r} ({type(value).__name__}); it must be an integer >= {minimum}",
            fix=f"set {name!r} in {where} to the release's value (an integer >= {minimum}, no quotes)",
        )
    return int(value)


__all__ = ["config_flag", "config_size"]
