"""Releases by hub name: ``PREFIX ORG/NAME[/PATH][@REVISION]`` for every release prefix.

``mdlm-hf:kuleshov-group/mdlm-owt`` names the repository ``kuleshov-group/mdlm-owt`` on the Hugging
Face hub (``HF_ENDPOINT``); ``@REVISION`` pins a branch, tag or commit (default ``main``). A folder
layout (``mdlm-hf:``, ``bd3lm-hf:``, ``udlm-hf:``, ``duo-hf:``, ``sedd-hf:``, ``gidd-hf:``) takes the
repository's root, or the subfolder PATH; a checkpoint file (``mdlm-ckpt:``, ``prime-ckpt:``,
``ar-ckpt:``, ``bd3lm-ckpt:``) names the file: ``prime-ckpt:ORG/NAME/checkpoints/last.ckpt``.

Only the files a loader reads are fetched, through ``huggingface_hub`` (its cache, its locks, its
atomic renames; nothing half-downloaded is ever used): for a folder ``config.json``, the weights
(``model.safetensors``, else ``pytorch_model.bin``) and the tokenizer files when the repository has
them; never code (a release's ``auto_map`` modules are not downloaded, let alone run), and a
``.ckpt`` is read by the harness's safe loader as any local one. The first file fixes the commit the
revision points at, and every other file is fetched at that commit, so a branch that moves during a
download cannot mix two versions.

The standard cache and its variables apply (``HF_HOME``, ``HF_HUB_CACHE``, ``HF_ENDPOINT``,
``HF_TOKEN``). With ``HF_HUB_OFFLINE=1`` a name is served from the cache: a name whose files are
there works, one that is not fails at once, naming ``primebench prefetch``. A local path is never
taken for a hub name: a path that exists, or starts with ``/``, ``.`` or ``~``, loads as before.

:func:`hub_provenance` gives what a record keeps of a hub name: repository, revision asked for,
the commit it resolved to, and the sha256 of every file used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import CheckpointError, OfflineError, PrimebenchError
from harness.io import file_sha256, read_json
from harness.models.releases import format_of
from harness.offline import env_flag, hub_cache_dir, hub_endpoint, is_network_error

#: ``ORG/NAME``, then an optional path inside the repository, then an optional ``@REVISION``
HUB_NAME = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:/(?P<path>[^@]+?))?/?(?:@(?P<revision>[^@]+))?$")
#: an ``hf:`` model: ``NAME`` or ``ORG/NAME`` (the hub's two forms), then an optional ``@REVISION``
MODEL_NAME = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*(?:/[\w.-]+)?)(?:@(?P<revision>[^@]+))?$")
#: how a name's files are laid out: a release folder, a release checkpoint file, a transformers model
LAYOUTS = ("folder", "file", "transformers")
DEFAULT_REVISION = "main"
#: a folder layout's files: what must be there, one of the weights, and what is read when present
CONFIG = "config.json"
WEIGHTS = ("model.safetensors", "pytorch_model.bin")
#: a transformers model's weights: one file, or an index naming its shards
MODEL_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
INDEX = "model.safetensors.index.json"
OPTIONAL = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
)
MODEL_OPTIONAL = ("generation_config.json", *OPTIONAL, "added_tokens.json")


@dataclass(frozen=True)
class HubName:
    """A release or model named on the hub: its load ``prefix``, ``repo`` (``ORG/NAME``), ``path``
    inside the repository (a checkpoint file, or a folder layout's subfolder; "" for the root),
    ``revision`` and ``layout`` (one of :data:`LAYOUTS`)."""

    prefix: str
    repo: str
    path: str
    revision: str
    layout: str

    @property
    def checkpoint_file(self) -> bool:
        return self.layout == "file"

    def __str__(self) -> str:
        at = "" if self.revision == DEFAULT_REVISION else f"@{self.revision}"
        return f"{self.prefix}{self.repo}{'/' + self.path if self.path else ''}{at}"

    def files(self) -> tuple[tuple[str, ...], ...]:
        """Groups of repository paths: each group is satisfied by its first file that exists; a group
        marked optional by a leading "" may be empty."""
        if self.checkpoint_file:
            return ((self.path,),)
        inside = (lambda f: f"{self.path}/{f}") if self.path else (lambda f: f)  # noqa: E731
        weights, optional = (MODEL_WEIGHTS, MODEL_OPTIONAL) if self.layout == "transformers" else (WEIGHTS, OPTIONAL)
        return ((inside(CONFIG),), tuple(inside(w) for w in weights), *(("", inside(f)) for f in optional))


@dataclass
class Fetched:
    """A hub name resolved to files in the cache: ``local`` (the snapshot folder of a folder layout,
    or the checkpoint file), the ``commit`` the revision resolved to, ``files`` (repository path ->
    cached file) and ``downloaded`` (repository path -> bytes fetched by this call)."""

    name: HubName
    local: Path
    commit: str
    files: dict[str, Path]
    downloaded: dict[str, int] = field(default_factory=dict)

    @property
    def source(self) -> str:
        """The prefixed local source the format's loader takes."""
        return f"{self.name.prefix}{self.local}"


def parse_hub_name(source: str) -> HubName | None:
    """``source`` as a hub name, or None when it is a local path (one that exists, or starts with
    ``/``, ``.`` or ``~``) or has no release prefix. ``hf:NAME[@REV]`` is a transformers model (a
    GGUF file, ``#FILE.gguf``, is left to transformers)."""
    fmt = format_of(str(source))
    if fmt is None:
        return None
    rest = str(source)[len(fmt.prefix) :]
    if not rest or rest.startswith(("/", ".", "~")) or "#" in rest or Path(rest).expanduser().exists():
        return None
    if fmt.name == "hf-causal":
        match = MODEL_NAME.match(rest)
        if match is None:
            return None
        return HubName(fmt.prefix, match["repo"], "", match["revision"] or DEFAULT_REVISION, "transformers")
    match = HUB_NAME.match(rest)
    if match is None:
        return None
    path = (match["path"] or "").strip("/")
    if fmt.checkpoint_file and not path:
        return None  # ORG/NAME alone cannot name a file: a missing local file, reported as such
    layout = "file" if fmt.checkpoint_file else "folder"
    return HubName(fmt.prefix, match["repo"], path, match["revision"] or DEFAULT_REVISION, layout)


def _commit_of(path: str) -> str:
    """The commit folder of a cached file (``.../snapshots/<commit>/<file>``)."""
    parts = Path(path).parts
    return parts[parts.index("snapshots") + 1]


def _fail(name: HubName, exc: BaseException, offline: bool) -> Exception:
    """The harness's error for a failure of the hub client on ``name``."""
    # deferred: huggingface_hub is needed only when a hub name is used
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint = hub_endpoint()
    prefetch = f"run `primebench prefetch {name}` where the hub can be reached, with the same HF_HOME"
    if isinstance(exc, GatedRepoError):
        return CheckpointError(
            f"{name}: {name.repo} is gated on {endpoint}, and the request had no token with access to it",
            fix="accept the repository's terms on the hub, then set HF_TOKEN (or run `hf auth login`)",
        )
    if isinstance(exc, RevisionNotFoundError):
        return CheckpointError(
            f"{name}: {name.repo} has no revision {name.revision!r} on {endpoint}",
            fix="name a branch, tag or commit of the repository after @ (default: main)",
        )
    if isinstance(exc, RepositoryNotFoundError):
        return CheckpointError(
            f"{name}: no repository {name.repo!r} on {endpoint} (or it is private), and no local path of that name",
            fix="check the name (ORG/NAME); for a private repository set HF_TOKEN; for a local folder write ./PATH",
        )
    if offline or is_network_error(exc) or isinstance(exc, LocalEntryNotFoundError):
        why = "HF_HUB_OFFLINE is set" if offline else f"the hub at {endpoint} cannot be reached"
        return OfflineError(
            f"{name}: its files are not in the Hugging Face cache ({hub_cache_dir()}) and {why}", fix=prefetch
        )
    return CheckpointError(f"{name}: the hub answered {type(exc).__name__}: {exc}", fix="try again, or " + prefetch)


def fetch(name: HubName, *, offline: bool | None = None, partial: bool = False) -> Fetched:
    """The files of ``name`` in the cache, downloaded when they are not there (``offline``, default
    ``HF_HUB_OFFLINE``: from the cache alone; ``partial``: offline, an optional file that is not
    cached is left out instead of failing). Raises a :class:`~harness.errors.PrimebenchError`
    naming the problem: a gated or unknown repository, an unknown revision, a missing file, or
    (offline) files that are not cached."""
    # deferred: huggingface_hub is needed only when a hub name is used
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError

    offline = env_flag("HF_HUB_OFFLINE") if offline is None else offline
    cache = str(hub_cache_dir())
    revision, commit = name.revision, None
    files: dict[str, Path] = {}
    downloaded: dict[str, int] = {}
    uncached = object()  # offline, a file the cache knows nothing about

    def get(path: str):
        """The cached file of ``path``, None when the repository does not have it, or ``uncached``."""
        at = commit or revision
        hit = try_to_load_from_cache(name.repo, path, cache_dir=cache, revision=at)
        if isinstance(hit, str):
            if offline or commit is not None:  # a file at a pinned commit never changes
                return hit
        elif hit is not None:  # the cache knows the repository has no such file at this revision
            if offline or commit is not None:
                return None
        elif offline:
            return uncached
        try:
            got = hf_hub_download(name.repo, path, revision=at, cache_dir=cache, endpoint=hub_endpoint())
        except EntryNotFoundError as exc:
            if isinstance(exc, LocalEntryNotFoundError):
                raise
            return None
        if not isinstance(hit, str) or Path(hit).resolve() != Path(got).resolve():
            downloaded[path] = Path(got).stat().st_size
        return got

    def first_of(paths, *, optional: bool) -> None:
        """Take the first of ``paths`` the repository has; fail when a required one has none."""
        nonlocal commit
        unknown = []
        for path in paths:
            found = get(path)
            if found is uncached:
                unknown.append(path)
            elif found is not None:
                commit = commit or _commit_of(found)
                files[path] = Path(found)
                return
        if unknown and not (optional and partial):
            raise LocalEntryNotFoundError(f"{' or '.join(unknown)} not cached")
        if not optional and not unknown:
            what = "a checkpoint file" if name.checkpoint_file else f"a folder with {CONFIG} and its weights"
            raise CheckpointError(
                f"{name}: {name.repo} at {commit or revision} has no {' or '.join(paths)}",
                fix=f"check the prefix and the path: this prefix reads {what}",
            )

    try:
        for group in name.files():
            optional = group[0] == ""
            first_of(group[1:] if optional else group, optional=optional)
        index = next((p for p in files if p.endswith(INDEX)), None)
        if index is not None:  # sharded weights: every shard the index names
            doc = read_json(files[index], what="weights index", fix="fetch the model again")
            base = index[: -len(INDEX)]
            for shard in sorted(set(doc.get("weight_map", {}).values())):
                first_of([base + shard], optional=False)
    except CheckpointError:
        raise
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, ValueError) as exc:
        raise _fail(name, exc, offline) from None
    except Exception as exc:  # the HTTP stack's own errors (a connection closed midway, a bad reply)
        if not type(exc).__module__.startswith(("httpx", "httpcore", "h11", "huggingface_hub")):
            raise
        raise CheckpointError(
            f"{name}: the download failed midway ({type(exc).__name__}: {exc}); the cache keeps only whole files",
            fix="run the command again (the client resumes the partial file), or "
            f"`primebench prefetch {name}` where the connection is stable",
        ) from None
    assert commit is not None
    first = next(iter(files.values()))
    if name.checkpoint_file:
        local = first
    else:
        local = first.parent  # the snapshot folder (or the subfolder inside it)
    return Fetched(name, local, commit, files, downloaded)


#: hub names this process resolved (str(name) -> what it got), so a record names the commit that was loaded
_RESOLVED: dict[str, Fetched] = {}


def localize(source: str) -> str:
    """``source`` with a hub name replaced by its cached files (fetched when needed); anything else unchanged."""
    name = parse_hub_name(source)
    if name is None:
        return source
    got = _RESOLVED[str(name)] = fetch(name, partial=name.layout == "transformers")
    return got.source


def hub_provenance(source: str) -> dict[str, Any] | None:
    """What a record keeps of a hub name (from the cache, no network): ``repo``, ``revision`` asked
    for, ``commit`` it resolved to, ``endpoint`` and ``files`` (repository path -> sha256); None for
    a source that is not a hub name."""
    name = parse_hub_name(source)
    if name is None:
        return None
    try:
        got = _RESOLVED.get(str(name)) or fetch(name, offline=True, partial=True)
    except PrimebenchError as exc:  # e.g. a model transformers fetched into another cache
        return {"repo": name.repo, "revision": name.revision, "unresolved": exc.problem, "local": None}
    return {
        "repo": name.repo,
        "revision": name.revision,
        "commit": got.commit,
        "endpoint": hub_endpoint(),
        "files": {path: file_sha256(local) for path, local in sorted(got.files.items())},
        "local": str(got.local),
    }


__all__ = ["DEFAULT_REVISION", "Fetched", "HubName", "fetch", "hub_provenance", "localize", "parse_hub_name"]
