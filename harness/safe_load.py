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
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.serialization import get_unsafe_globals_in_checkpoint, safe_globals

from harness.errors import PrimebenchError
from harness.io import read_json

#: file endings that are pickles (safetensors, GGUF, JSON and numpy's .npz without pickles are not)
PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pkl")


class UnsafeFileError(PrimebenchError):
    """A weights file holds objects beyond tensors; opening it could execute code."""


def refused_pickle(what: str, path: str | Path, allowed: str, detail: str, fix: str) -> UnsafeFileError:
    """The error for a pickle that names more than ``allowed`` (``detail``: the refused global)."""
    return UnsafeFileError(
        f"{what} {str(path)!r} holds pickled objects other than {allowed} ({detail}); "
        "unpickling it could run arbitrary code, so it is refused",
        fix=fix,
    )


def load_torch_file(path: str | Path, *, what: str, fix: str, mmap: bool = False) -> Any:
    """``torch.load(path, weights_only=True)`` on CPU, with clear errors.

    ``what`` names the file for messages ("trainer state", "Inception weights"); ``fix`` says what to
    do when the file is damaged. Raises :class:`UnsafeFileError` for a pickle that needs anything but
    tensors and plain containers, and :class:`PrimebenchError` for a missing or corrupt file.
    """

    path = Path(path)
    if not path.is_file():
        raise PrimebenchError(f"{what} {str(path)!r} does not exist", fix=fix)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        # torch reports a refused class or function as a "global"; anything else is a damaged file
        detail = next((line.strip() for line in str(exc).splitlines() if "global" in line.lower()), "")
        if detail:
            raise refused_pickle(
                what,
                path,
                "tensors",
                detail,
                "use a file saved as plain tensors (a state_dict) or as safetensors, from a source you trust",
            ) from exc
        raise PrimebenchError(f"{what} {str(path)!r} is corrupt (not a readable torch file)", fix=fix) from exc
    except Exception as exc:  # noqa: BLE001 - a damaged file fails in many ways (struct, zip, EOF, ...)
        if mmap and "mmap" in str(exc).lower():
            return load_torch_file(path, what=what, fix=fix, mmap=False)  # legacy (non-zip) format
        raise PrimebenchError(
            f"{what} {str(path)!r} is corrupt or truncated ({type(exc).__name__}: {exc})".splitlines()[0], fix=fix
        ) from exc


def check_pickles_in_folder(folder: str | Path, *, what: str) -> list[Path]:
    """Load every pickle weights file directly in ``folder`` with :func:`load_torch_file` (memory
    mapped), so a library that opens them later opens only plain tensors: the files named ``.pt``,
    ``.bin``, ... and every shard an index names, whatever its name (:func:`check_indexed_shards`).
    Returns the files."""
    files = sorted(p for p in Path(folder).iterdir() if p.is_file() and p.suffix in PICKLE_SUFFIXES)
    for path in files:
        load_torch_file(
            path, what=what, fix=f"re-download {path.name}, or use the model's safetensors files", mmap=True
        )
    return files + check_indexed_shards(folder, what=what, checked=files)


#: Hugging Face's index files (``model.safetensors.index.json``, ``pytorch_model.bin.index.json``):
#: JSON whose ``weight_map`` names the shard file of every tensor
INDEX_SUFFIX = ".index.json"


def check_indexed_shards(folder: str | Path, *, what: str, checked: tuple[Path, ...] | list[Path] = ()) -> list[Path]:
    """Check every shard that an index in ``folder`` names, as transformers would open it.

    transformers opens a shard with safetensors only when its name ends in ``.safetensors``; any
    other name (``.bin``, ``.data``, none) it hands to ``torch.load``. So each such shard is loaded
    here with :func:`load_torch_file` (memory mapped) first, and one that unpickles code is refused
    with :class:`UnsafeFileError`. A shard outside ``folder``, a missing one, or an index that is not
    a ``weight_map`` is an error. Returns the shards that are neither safetensors nor in ``checked``
    (files already loaded this way)."""

    folder = Path(folder)
    shards: list[Path] = []
    for index in sorted(folder.glob(f"*{INDEX_SUFFIX}")):
        fix = f"restore {index.name} from the model's release, or remove it"
        doc = read_json(index, what="weights index", fix=fix)
        weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise PrimebenchError(
                f"weights index {str(index)!r} has no weight_map of tensor names to shard files", fix=fix
            )
        for name in sorted(set(weight_map.values())):
            shard = folder / name
            relative = os.path.normpath(name)  # lexical: the hub cache's files are links into its blobs
            if os.path.isabs(relative) or relative == ".." or relative.startswith(f"..{os.sep}"):
                raise UnsafeFileError(
                    f"weights index {str(index)!r} names the shard {name!r}, outside its folder; it is refused", fix=fix
                )
            if shard.suffix == ".safetensors" or shard in shards or shard in checked:
                continue
            load_torch_file(
                shard,
                what=f"{what} shard {name!r} (named in {index.name})",
                fix=f"re-download {name}, or use the model's safetensors files",
                mmap=True,
            )
            shards.append(shard)
    return shards


_COPIES: list[Path] = []


def _remove_copies() -> None:
    for folder in _COPIES:
        shutil.rmtree(folder, ignore_errors=True)


def plain_tensor_copy(path: str | Path, *, what: str, fix: str) -> Path:
    """A private copy of a weights file written from its safely loaded contents.

    For libraries that call ``torch.load(..., weights_only=False)`` on a path we pass: the copy holds
    only what :func:`load_torch_file` accepted, so unpickling it cannot run code. Removed at exit."""

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


#: where the classes of a Lightning checkpoint's hyper-parameters live (a Hydra/omegaconf config, a
#: saved tokenizer): read as inert records, never imported or run. Only class names (capitalised)
#: are accepted from these modules; a function named in one of them is refused like any other.
CONFIG_MODULES = ("omegaconf.", "typing.", "enum.", "pathlib.", "transformers.", "tokenizers.")

#: builtin types that a config names as values (omegaconf records each container's ``object_type``
#: and its key and element types): inert :class:`ConfigRecord` stand-ins, never the builtins
INERT_BUILTINS = frozenset(
    f"builtins.{name}"
    for name in (
        "dict",
        "list",
        "tuple",
        "set",
        "frozenset",
        "int",
        "float",
        "complex",
        "str",
        "bytes",
        "bytearray",
        "bool",
    )
)

#: mapping classes a config pickles with entries (omegaconf's resolver cache is a
#: ``defaultdict(dict)``): read back as plain dicts, their default factory dropped
MAPPING_CLASSES = frozenset({"collections.defaultdict", "collections.OrderedDict"})


class ConfigRecord:
    """An inert stand-in for a class named in a checkpoint: keeps the arguments and state it was
    built with and does nothing else. ``qualified`` is the name the file used."""

    qualified = ""

    def __new__(cls, *args, **kwargs):
        record = object.__new__(cls)
        record.args, record.state = args, None
        return record

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        self.state = state

    def __repr__(self) -> str:
        return f"<{self.qualified}>"


class _MappingRecord:
    """Stand-in for a dict subclass: building one gives a plain dict (its factory argument dropped)."""

    qualified = ""

    def __new__(cls, *args, **kwargs):
        return {}


def _stand_in(name: str) -> type:
    base = _MappingRecord if name in MAPPING_CLASSES else ConfigRecord
    return type(name.rsplit(".", 1)[-1], (base,), {"qualified": name})


def accepted_global(name: str) -> bool:
    """Whether a global named in a Lightning checkpoint may be read as an inert stand-in."""
    if name in INERT_BUILTINS or name in MAPPING_CLASSES:
        return True
    return name.startswith(CONFIG_MODULES) and name.rsplit(".", 1)[-1][:1].isupper()


def load_lightning_checkpoint(path: str | Path, *, what: str = "checkpoint", mmap: bool = False) -> Any:
    """A Lightning ``.ckpt`` loaded with ``weights_only=True``, the classes its hyper-parameters name
    (an omegaconf config, a pickled tokenizer, the builtin types omegaconf records as metadata)
    replaced by inert :class:`ConfigRecord` s; any other global (a function such as ``eval`` or
    ``os.system``, a class from elsewhere) gets the file refused with :class:`UnsafeFileError`
    before anything is unpickled. :func:`plain` turns the records into dicts and values. ``mmap``:
    map the tensors rather than read them (enough to look at the keys and the config)."""

    path = Path(path)
    fix = "re-download it from the release"
    if not path.is_file():
        raise PrimebenchError(f"{what} {str(path)!r} does not exist", fix=fix)
    try:
        names = get_unsafe_globals_in_checkpoint(str(path))
    except Exception as exc:  # noqa: BLE001 - not a zip, truncated, ...
        raise PrimebenchError(
            f"{what} {str(path)!r} is corrupt or not a torch checkpoint ({type(exc).__name__})", fix=fix
        ) from exc
    refused = sorted(n for n in names if not accepted_global(n))
    if refused:
        raise UnsafeFileError(
            f"{what} {str(path)!r} names {', '.join(refused[:4])}, which a checkpoint's weights and config do not "
            "need; unpickling it could run arbitrary code, so it is refused",
            fix="use a checkpoint from the original release, or its safetensors weights",
        )
    with safe_globals([(_stand_in(n), n) for n in names]):
        return load_torch_file(path, what=what, fix=fix, mmap=mmap)


def plain(value: Any) -> Any:
    """Records of an omegaconf config -> plain dicts, lists and values (anything else: its name).

    A ``DictConfig``/``ListConfig`` gives its ``_content``, a value node its ``_val``; interpolations
    (``${...}``) stay the strings they were saved as; a class named as a value (omegaconf's
    ``object_type``) becomes its qualified name."""
    if isinstance(value, type) and issubclass(value, (ConfigRecord, _MappingRecord)):
        return value.qualified
    if isinstance(value, ConfigRecord):
        state = value.state if isinstance(value.state, dict) else {}
        if "_content" in state:
            return plain(state["_content"])
        if "_val" in state:
            return plain(state["_val"])
        return repr(value)
    if isinstance(value, dict):
        return {plain(k) if not isinstance(k, str) else k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def saved_tokenizer_json(value: Any) -> str | None:
    """The ``tokenizers`` JSON of a transformers fast tokenizer pickled in a checkpoint's
    hyper-parameters (MDLM and MDM-Prime save theirs with ``save_hyperparameters``), or None.

    The JSON is the tokenizer's own serialisation (vocabulary, merges, special tokens): data that
    ``tokenizers.Tokenizer.from_str`` parses without running anything."""
    if not isinstance(value, ConfigRecord) or not value.qualified.startswith("transformers."):
        return None
    backend = value.state.get("_tokenizer") if isinstance(value.state, dict) else None
    if isinstance(backend, ConfigRecord) and backend.qualified == "tokenizers.Tokenizer":
        blob = backend.state
        if isinstance(blob, (bytes, bytearray)):
            blob = bytes(blob).decode("utf-8", errors="replace")
        if isinstance(blob, str) and blob.lstrip().startswith("{"):
            return blob
    return None


#: the only globals a pickled numpy array needs (numpy 1.x and 2.x module names), and the bytes
#: rebuilder of Python 3's protocol-2 pickles (``_codecs.encode``, as torch's weights-only loader allows)
NUMPY_ARRAY_GLOBALS = frozenset(
    {
        ("_codecs", "encode"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }
)


class _ArrayUnpickler(pickle.Unpickler):
    """Builtin containers, strings, bytes and numbers, plus numpy arrays of plain dtypes; nothing else."""

    def find_class(self, module: str, name: str):
        if (module, name) not in NUMPY_ARRAY_GLOBALS:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        return super().find_class(module, name)


def _check_plain_arrays(value: Any, depth: int = 0) -> None:
    if depth > 8:
        return
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise pickle.UnpicklingError("an array of Python objects is not allowed")
    elif isinstance(value, dict):
        for item in value.values():
            _check_plain_arrays(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value[:4]:
            _check_plain_arrays(item, depth + 1)


def load_array_pickle(path: str | Path, *, what: str, fix: str, encoding: str = "bytes") -> Any:
    """Read a pickle of plain data and numpy arrays (CIFAR-10's python batches) without running code.

    Only builtin containers, strings, bytes, numbers and numpy arrays of non-object dtypes are
    rebuilt; any other global (a function, a class) is refused with :class:`UnsafeFileError` before it
    is called. ``encoding`` is the unpickler's encoding for Python 2 strings (``bytes`` keeps them)."""
    path = Path(path)
    if not path.is_file():
        raise PrimebenchError(f"{what} {str(path)!r} does not exist", fix=fix)
    try:
        with open(path, "rb") as handle:
            value = _ArrayUnpickler(handle, encoding=encoding).load()
        _check_plain_arrays(value)
    except pickle.UnpicklingError as exc:
        if "not allowed" in str(exc):
            raise refused_pickle(
                what,
                path,
                "plain data and numpy arrays",
                str(exc),
                "use an untouched copy of the dataset from its official source",
            ) from exc
        raise PrimebenchError(f"{what} {str(path)!r} is corrupt (not a readable pickle: {exc})", fix=fix) from exc
    except Exception as exc:  # noqa: BLE001 - a damaged pickle fails in many ways (EOF, struct, value errors)
        raise PrimebenchError(
            f"{what} {str(path)!r} is corrupt or truncated ({type(exc).__name__}: {exc})".splitlines()[0], fix=fix
        ) from exc
    return value


__all__ = [
    "UnsafeFileError",
    "load_torch_file",
    "load_array_pickle",
    "NUMPY_ARRAY_GLOBALS",
    "check_pickles_in_folder",
    "check_indexed_shards",
    "plain_tensor_copy",
    "PICKLE_SUFFIXES",
    "load_lightning_checkpoint",
    "plain",
    "ConfigRecord",
    "accepted_global",
    "saved_tokenizer_json",
    "INERT_BUILTINS",
]
