"""Checks of what a user names before any work starts: an output folder that can be written and a
torch device this machine has. Each raises :class:`harness.errors.PrimebenchError` naming the problem
and the fix."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from harness.errors import PrimebenchError


def check_out_folder(path) -> None:
    """Refuse an output folder that cannot be written before any work starts: an empty name (which
    would mean the current folder), a path too long for the file system, a path that is a file, sits
    under a file, or lies in a folder this user cannot write."""
    if path is None:
        return
    if isinstance(path, str) and not path.strip():
        raise PrimebenchError(
            f"--out {path!r} is an empty folder name, which would write into the current folder",
            fix="pass a folder name, e.g. --out results/runs/NAME (--out . for the current folder)",
        )
    _check_path_length(str(path))
    path = Path(path)
    try:
        if path.exists() and not path.is_dir():
            raise PrimebenchError(
                f"--out {str(path)!r} is a file, not a folder", fix="pass a folder (it is created if missing)"
            )
        probe = path
        while not probe.exists():
            probe = probe.parent
    except OSError as exc:  # a loop of links, a folder that cannot be searched, ...
        raise PrimebenchError(
            f"--out {str(path)!r} cannot be used: {exc.strerror or exc}", fix="pass a folder path you can write"
        ) from None
    if not probe.is_dir():
        raise PrimebenchError(f"--out {str(path)!r} lies under the file {str(probe)!r}", fix="pass a folder path")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PrimebenchError(f"--out {str(path)!r}: {str(probe)!r} is not writable", fix="pass a folder you can write")


def _check_path_length(path: str) -> None:
    """Refuse a path the file system cannot hold (ENAMETOOLONG): a name longer than NAME_MAX bytes
    (255 on most) or a whole path longer than PATH_MAX (4096 on Linux), with room for a record's name."""

    def limit(name: str, default: int) -> int:
        try:
            return int(os.pathconf(".", name))
        except (OSError, ValueError, AttributeError):
            return default

    name_max, path_max = limit("PC_NAME_MAX", 255), limit("PC_PATH_MAX", 4096)
    too_long = next((part for part in Path(path).parts if len(os.fsencode(part)) > name_max), None)
    fix = f"use a shorter path (names of at most {name_max} bytes, the whole path well under {path_max})"
    if too_long is not None:
        raise PrimebenchError(
            f"--out {path!r} has a name of {len(os.fsencode(too_long))} bytes ({too_long[:24]!r}...), "
            f"longer than the file system allows ({name_max}): File name too long",
            fix=fix,
        )
    length = len(os.fsencode(os.path.abspath(path)))
    if length + name_max > path_max:  # the files written inside need room for their names
        raise PrimebenchError(
            f"--out {path!r} is {length} bytes long; with the names of the files written inside it "
            f"would pass the file system's limit of {path_max}: File name too long",
            fix=fix,
        )


def check_device(value: str) -> str:
    """Refuse a ``--device`` this machine cannot run on (``cuda`` without a GPU or driver, ``cuda:3``
    with two GPUs, a name torch does not know) before anything loads; returns ``value``."""
    if value == "cpu":
        return value  # the default: no need to import torch while parsing

    fix = "use --device cpu, cuda or cuda:N (N a GPU index)"
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError, TypeError):
        raise PrimebenchError(f"--device {value!r} is not a torch device", fix=fix) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                "this torch build has no CUDA support"
                if torch.version.cuda is None
                else "no CUDA GPU is visible (no NVIDIA driver, or CUDA_VISIBLE_DEVICES hides them)"
            )
            raise PrimebenchError(f"--device {value!r}: {why}", fix="use --device cpu, or run on a machine with a GPU")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise PrimebenchError(
                f"--device {value!r}: this machine has {count} GPU{'s' if count != 1 else ''} "
                f"(cuda:0 to cuda:{count - 1})",
                fix=f"use --device cuda:N with N < {count}",
            )
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise PrimebenchError(f"--device {value!r}: Apple's MPS backend is not available here", fix=fix)
    elif device.type != "cpu":
        raise PrimebenchError(f"--device {value!r}: primebench runs on cpu, cuda or mps devices", fix=fix)
    return value
