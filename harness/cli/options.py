"""Shared click option parsing."""

from __future__ import annotations

import click


def int_list(value: str, *, example: str = "64,256,1024", minimum: int = 1) -> list[int]:
    """ "1,2,3" -> [1, 2, 3]; every entry an integer >= ``minimum``, else click.BadParameter."""
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers (e.g. {example})") from None
    if not out or min(out) < minimum:
        raise click.BadParameter(f"{value!r}: every entry must be an integer >= {minimum}, e.g. {example}")
    return out


def per_name_ints(value: str, names, *, example: str = "mdlm=48,prime=8") -> dict[str, int]:
    """ "N" -> {name: N for every name}; "a=N,b=M" -> {a: N, b: M} for those names only. Every N is an
    integer >= 1 and every name one of ``names``, else click.BadParameter."""
    names = tuple(names)
    pairs = [item.strip() for item in value.split(",") if item.strip()]
    if len(pairs) == 1 and "=" not in pairs[0]:
        if not pairs[0].isdigit() or int(pairs[0]) < 1:
            raise click.BadParameter(f"{value!r}: N must be an integer >= 1 (e.g. 16, or {example})")
        return dict.fromkeys(names, int(pairs[0]))
    out = {}
    for item in pairs:
        name, sep, number = item.partition("=")
        if not sep or name.strip() not in names:
            raise click.BadParameter(
                f"{item!r}: expected N, or NAME=N pairs with NAME one of {', '.join(names)} (e.g. {example})"
            )
        if not number.strip().isdigit() or int(number) < 1:
            raise click.BadParameter(f"{item!r}: N must be an integer >= 1 (e.g. {example})")
        out[name.strip()] = int(number)
    if not out:
        raise click.BadParameter(f"{value!r} is empty (e.g. {example})")
    return out


class LazyChoice(click.Choice):
    """A click.Choice whose values come from a function called when first needed (e.g. the model
    registry), so that defining the CLI imports no model code."""

    def __init__(self, values, case_sensitive: bool = True):
        self._values = values
        self._cached = None
        super().__init__((), case_sensitive=case_sensitive)

    @property
    def choices(self):
        if self._cached is None:
            self._cached = tuple(self._values())
        return self._cached

    @choices.setter
    def choices(self, value):
        pass


def estimator_choices() -> list[str]:
    """``--estimator`` values: default (the family's first), both (all it offers), or an estimator name."""
    from harness.models import estimator_names

    return ["default", "both", *estimator_names()]


def check_out_folder(path) -> None:
    """Refuse an output folder that cannot be written before any work starts: an empty name (which
    would mean the current folder), a path too long for the file system, a path that is a file, sits
    under a file, or lies in a folder this user cannot write."""
    import os
    from pathlib import Path

    from harness.errors import PrimebenchError

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
    import os
    from pathlib import Path

    from harness.errors import PrimebenchError

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


def _out_callback(ctx, param, value):
    from pathlib import Path

    from harness.errors import PrimebenchError

    if value is None:
        return None
    try:
        check_out_folder(value)
    except PrimebenchError as exc:
        raise click.BadParameter(exc.problem.removeprefix(f"--out {str(value)!r} ").strip() + f"; {exc.fix}") from None
    return Path(value)


def out_option(help: str = "Write the JSON record into this folder.", **kwargs):
    """``--out DIR``: checked (not a file, writable) when parsed, before any work starts."""
    return click.option(
        "--out",
        kwargs.pop("dest", "out"),
        type=click.Path(),
        default=kwargs.pop("default", None),
        callback=_out_callback,
        help=help,
        **kwargs,
    )


def draw_option(default: str = "two-stage"):
    """``--draw two-stage|joint``: how the ancestral step is drawn (same law; recorded)."""
    return click.option(
        "--draw",
        type=click.Choice(["two-stage", "joint"]),
        default=default,
        show_default=True,
        help="Ancestral step: two-stage (reveal decision in float64, then the token by inverse CDF; "
        "cost follows NFE) or joint (MDLM's draw over C + 1 outcomes with --method; the reference). Recorded.",
    )


def check_device(value: str) -> str:
    """Refuse a ``--device`` this machine cannot run on (``cuda`` without a GPU or driver, ``cuda:3``
    with two GPUs, a name torch does not know) before anything loads; returns ``value``."""
    if value == "cpu":
        return value  # the default: no need to import torch while parsing
    import torch

    from harness.errors import PrimebenchError

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


def device_option(default: str | None = "cpu", help: str | None = None):
    """``--device``: checked (:func:`check_device`) when parsed, before any model or data loads."""
    return click.option(
        "--device",
        default=default,
        show_default=default is not None,
        help=help,
        callback=lambda ctx, param, value: None if value is None else check_device(value),
    )
