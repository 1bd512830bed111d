"""Opening weight files without running code from them.

A ``.pt``/``.pth``/``.bin`` file is a pickle, and unpickling can call any function the file names.
Every such file the harness reads, or lets a library read, first goes through
:func:`load_torch_file` (``torch.load(weights_only=True)``: tensors and plain containers only).
A file that needs more is refused with an :class:`UnsafeFileError` that says why; a file that is
merely damaged gets a "corrupt" error. Libraries that would unpickle a file themselves with
``weights_only=False`` (torch-fidelity's Inception) are handed :func:`plain_tensor_copy` instead:
a copy we wrote from the safely loaded tensors.
"""

from __future__ import annotations

import atexit
import io
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any

from harness.errors import PrimebenchError

#: file endings that are pickles (safetensors, GGUF, JSON and numpy's .npz without pickles are not)
PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pkl")


class UnsafeFileError(PrimebenchError):
    """A weights file holds objects beyond tensors; opening it could execute code."""


def load_torch_file(path: str | Path, *, what: str, fix: str, mmap: bool = False) -> Any:
    """``torch.load(path, weights_only=True)`` on CPU, with clear errors.

    ``what`` names the file for messages ("trainer state", "Inception weights"); ``fix`` says what to
    do when the file is damaged. Raises :class:`UnsafeFileError` for a pickle that needs anything but
    tensors and plain containers, and :class:`PrimebenchError` for a missing or corrupt file.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise PrimebenchError(f"{what} {str(path)!r} does not exist", fix=fix)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        # torch reports a refused class or function as a "global"; anything else is a damaged file
        detail = next((line.strip() for line in str(exc).splitlines() if "global" in line.lower()), "")
        if detail:
            raise UnsafeFileError(
                f"{what} {str(path)!r} holds pickled objects other than tensors ({detail}); "
                "unpickling it could run arbitrary code, so it is refused",
                fix="use a file saved as plain tensors (a state_dict) or as safetensors, from a source you trust",
            ) from exc
        raise PrimebenchError(f"{what} {str(path)!r} is corrupt (not a readable torch file)", fix=fix) from exc
    except Exception as exc:  # noqa: BLE001 - a damaged file fails in many ways (struct, zip, EOF, ...)
        if mmap and "mmap" in str(exc).lower():
            return load_torch_file(path, what=what, fix=fix, mmap=False)  # legacy (non-zip) format
        raise PrimebenchError(f"{what} {str(path)!r} is corrupt or truncated ({type(exc).__name__}: {exc})".splitlines()[0],
                              fix=fix) from exc


def check_pickles_in_folder(folder: str | Path, *, what: str) -> list[Path]:
    """Load every pickle weights file directly in ``folder`` with :func:`load_torch_file` (memory
    mapped), so a library that opens them later opens only plain tensors. Returns the files."""
    files = sorted(p for p in Path(folder).iterdir() if p.is_file() and p.suffix in PICKLE_SUFFIXES)
    for path in files:
        load_torch_file(path, what=what, fix=f"re-download {path.name}, or use the model's safetensors files", mmap=True)
    return files


_COPIES: list[Path] = []


def _remove_copies() -> None:
    for folder in _COPIES:
        shutil.rmtree(folder, ignore_errors=True)


def plain_tensor_copy(path: str | Path, *, what: str, fix: str) -> Path:
    """A private copy of a weights file written from its safely loaded contents.

    For libraries that call ``torch.load(..., weights_only=False)`` on a path we pass: the copy holds
    only what :func:`load_torch_file` accepted, so unpickling it cannot run code. Removed at exit."""
    import torch

    contents = load_torch_file(path, what=what, fix=fix)
    if not _COPIES:
        atexit.register(_remove_copies)
    folder = Path(tempfile.mkdtemp(prefix="primebench-weights-"))
    _COPIES.append(folder)
    copy = folder / Path(path).name
    buffer = io.BytesIO()
    torch.save(contents, buffer)
    copy.write_bytes(buffer.getvalue())
    return copy


__all__ = ["UnsafeFileError", "load_torch_file", "check_pickles_in_folder", "plain_tensor_copy", "PICKLE_SUFFIXES"]
