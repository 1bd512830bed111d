"""The family contract: what every model family is and declares, checked when its class is made.

A family is the only place that knows its own name. Evaluations, samplers, the lm-eval adapter, the
jobs, the bench, the audits and the records read these declared facts instead of comparing family
names or probing attributes with ``getattr``:

* ``family``: its registered name; ``forward_process``: the corruption it learns to undo
  (:data:`FORWARD_PROCESSES`: ``none`` for the exact autoregressive factorisation, ``absorbing`` for
  the masked families);
* ``release_formats``: the load prefixes (``mdlm-hf:``, ``prime-ckpt:``, ...) whose releases load
  into it (:mod:`harness.models.sources`);
* ``units_per_token``: 1 for whole-token models, ell for MDM-Prime's sub-tokens;
* ``default_sampler`` / ``token_by_token_sampler``: the sampler a family uses, and the one-unit-per-call
  control that the precision audit runs beside it;
* ``estimators``: the likelihood numbers it offers, in order (the first is the default), each with
  its kind (exact / bound / paper-objective);
* ``time_sampler()``: the corruption draw its ``nll`` uses ("t" or "n"; None when its NLL is exact),
  the one place that default is decided;
* ``token_convention``: which tokens a row's NLL counts;
* block structure: ``nelbo_block_size`` (one corruption time per block in the NLL) and
  ``sampling_block_size`` (blocks sampled one after the other), None without blocks;
* ``start_token``: the network prepends its own start id (the autoregressive sampler then needs no
  prefix); ``mask_id`` and ``time_conditioning`` for the diffusion families;
* ``protocol()`` and ``label()``: what a record says about the model, and how a table names it;
* ``bench_variants()``: the settings under which ``primebench bench`` times the family.

The methods every family implements, with these signatures in every subclass, are the abstract
ones of :class:`ModelFamily` (``log_probs``, ``loss``, ``nll``, ``greedy_matches``). A concrete
family whose declared facts do not hold (no estimator, an unknown kind or forward process, a default
sampler it does not list) is refused when its class is created; ``tests/harness/models/
test_family_contract.py`` runs every registered family through the rest of the contract.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from harness.diffusion import Generators, check_time_sampler
from harness.errors import CheckpointError, InputError, PrimebenchError
from harness.nll import NLL
from harness.processes import PROCESSES, ForwardProcess


@dataclass(frozen=True)
class ModelConfig:
    """The ``model.*`` keys every family has: its name and the backbone's shape.

    ``positions``: ``rope`` (1-D rotary only) or ``image`` (rotary plus learned row/column/channel
    embeddings, :mod:`harness.positions`); ``image_shape`` ``"HxWxC"`` is filled in from an
    ``image:`` corpus at train time. ``mixer_width``: 0 for the plain DiT; w > 0 adds a residual
    depthwise convolution of width w (:class:`harness.backbone.NeighbourMixer`; causal for the
    ARM), the same for every family: once over the embedded sequence (``mixer_placement: input``)
    or before every block (``blocks``).
    Families add their own keys in subclasses.
    """

    family: str = "arm"
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    mlp_ratio: int = 4
    dropout: float = 0.0
    positions: str = "rope"
    image_shape: str = ""
    mixer_width: int = 0
    mixer_placement: str = "input"

    def check(self) -> None:
        """Checks across this family's keys; raise :class:`harness.errors.ConfigError`."""

    def backbone_keys(self) -> dict[str, Any]:
        return dict(
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            mlp_ratio=self.mlp_ratio,
            dropout=self.dropout,
            mixer_width=self.mixer_width,
            mixer_placement=self.mixer_placement,
        )


@dataclass(frozen=True)
class Estimator:
    """One likelihood number a family offers: ``name`` (its ``--estimator`` value), ``kind``
    (exact / bound / paper-objective), the metric-name ``suffix`` it is recorded under, and a
    one-line description for records."""

    name: str
    kind: str
    suffix: str
    description: str


#: the kinds of number an estimator gives
ESTIMATOR_KINDS = ("exact", "bound", "paper-objective")
#: the forward processes a family can declare: ``none`` (no corruption: an exact factorisation) or a
#: registered process of :mod:`harness.processes` (``absorbing``: units jump to a mask state;
#: ``uniform``; ``interpolating``)
FORWARD_PROCESSES = ("none", *PROCESSES.names())


class ModelFamily(nn.Module, metaclass=abc.ABCMeta):
    """Base class: holds the backbone, the vocabulary size C and the sequence length L.

    Abstract: a family implements :meth:`log_probs`, :meth:`loss`, :meth:`nll` and
    :meth:`greedy_matches` and declares the class attributes below; :meth:`__init_subclass__`
    checks the declarations of every concrete subclass that names its ``family``."""

    family: ClassVar[str] = ""
    #: the corruption the family learns to undo, one of :data:`FORWARD_PROCESSES`
    forward_process: ClassVar[str] = ""
    #: the load prefixes of the releases that load into this family (:data:`harness.models.sources.PREFIXES`)
    release_formats: ClassVar[tuple[str, ...]] = ()
    config_class: ClassVar[type[ModelConfig]] = ModelConfig
    #: sort rank of the family in tables (records carry it)
    table_order: ClassVar[int] = 99
    #: the registered samplers that can draw from this family, and its default and token-by-token ones
    samplers: ClassVar[tuple[str, ...]] = ()
    default_sampler: ClassVar[str] = ""
    token_by_token_sampler: ClassVar[str] = ""
    estimators: ClassVar[tuple[Estimator, ...]] = ()
    token_convention: ClassVar[str] = ""
    #: whether a diffusion time sampler ("t" / "n") and Monte-Carlo samples apply to ``nll``
    uses_time_sampler: ClassVar[bool] = False
    #: the time sampler of the family's reported numbers (None: no time sampler), see :meth:`time_sampler`
    default_time_sampler: ClassVar[str | None] = None
    #: whether the model conditions left to right (lm-eval's rolling windows, causal attention)
    autoregressive: ClassVar[bool] = False
    mask_id: int | None = None
    #: the instance's forward process (:mod:`harness.processes`) over its units; None for ``none``
    process: ForwardProcess | None = None
    time_conditioning: bool = False
    #: blocks of this many tokens are sampled one after the other, each given the finished ones
    #: (BD3-LM, :mod:`harness.sampling.blocks`); None: the sampler draws the whole row at once
    sampling_block_size: int | None = None
    #: the network prepends its own start id to every row (the autoregressive sampler needs no prefix)
    start_token: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "family" in cls.__dict__ and cls.family:
            check_declarations(cls)

    def __init__(self, *, vocab_size: int, seq_len: int, hparams: dict[str, Any]):
        super().__init__()
        self.vocab_size = int(vocab_size)
        self.seq_len = int(seq_len)
        self.hparams = dict(hparams)

    # -- facts -----------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def units_per_token(self) -> int:
        return 1

    @property
    def may_decode_invalid_codes(self) -> bool:
        """Whether sampled units can decode to a code >= C (Prime without carry-over)."""
        return False

    @property
    def nelbo_block_size(self) -> int | None:
        """One corruption time (or mask count) per block of this many tokens in the NLL (BD3-LM);
        None: one per row, or no corruption at all."""
        return None

    #: ``primebench bench``'s bound on the cost of one Monte-Carlo NLL sample over the exact family's
    #: NLL at the same backbone (BD3-LM's network reads 2L positions, so its bound is 2.5)
    bench_nll_cost_target: ClassVar[float] = 1.25
    #: positions the network reads per token of a row (BD3-LM's reads the noisy row beside the clean
    #: one: 2); the memory estimate of an evaluation batch or a sampler scales with it
    network_positions_per_token: ClassVar[int] = 1

    @classmethod
    def bench_variants(cls) -> tuple[dict[str, Any], ...]:
        """The model keys of each setting ``primebench bench`` times this family under (one plain
        setting by default)."""
        return ({},)

    # -- the imported-folder section (``primebench import``, :mod:`harness.models.transfer`) -------
    def transfer_keys(self) -> dict[str, Any]:
        """The keys this family adds to an imported folder's ``config.json`` beside the network's shape
        (a section named after the family, e.g. ``{"bd3lm": {"block_size": 16, ...}}``); {} for none."""
        return {}

    @classmethod
    def load_transfer(cls, state: dict, *, shape: dict, section: Any, doc: dict, where: str, common: dict[str, Any]):
        """Build this family from an imported folder whose ``config.json`` (``doc``, at ``where``, the
        path errors name) holds its section ``section`` (what :meth:`transfer_keys` wrote): ``state``
        the network's tensors, ``shape`` the network's sizes, ``common`` the loader's keyword
        arguments (tokenizer, source, device, ...).
        Returns ``(model, tokenizer, cfg)``. Families without a section are loaded as the plain
        absorbing-state network (MDLM's layout) and never reach here."""

        raise CheckpointError(
            f"{where}: imported folders of the {cls.family} family are not supported",
            fix="load its own checkpoint folder instead",
        )

    @property
    def nll_kind(self) -> str:
        """The kind of number the default estimator gives."""
        return self.estimators[0].kind

    @property
    def row_capacity(self) -> int:
        """Most tokens one row given to :meth:`score` may hold."""
        return self.seq_len

    #: appended to an image record's token convention
    image_token_note: ClassVar[str] = ""

    @property
    def image_unscored_first_pixel(self) -> str | None:
        """Why bits/dim over an image would miss a dimension (None when every pixel is scored)."""
        return None

    def time_sampler(self, requested: str | None = None, *, unbiased: bool = False) -> str | None:
        """The time sampler that :meth:`nll` draws corruptions with ("t" or "n", see
        :data:`harness.diffusion.TIME_SAMPLERS`); every caller asks here.

        None for a family without one (its NLL is exact; ``requested`` is then ignored). Otherwise
        ``requested`` when given, else, with ``unbiased``, the unbiased mask count "n" for a
        time-independent network and "t" for a time-conditioned one (the audits and lm-eval), else
        the family's :attr:`default_time_sampler` (the protocol of its reported numbers).
        :class:`~harness.errors.InputError` (a ValueError) for an unknown name."""
        if not self.uses_time_sampler:
            return None
        if requested is None:
            requested = ("t" if self.time_conditioning else "n") if unbiased else self.default_time_sampler
        return check_time_sampler(requested)

    def estimator(self, name: str | None = None) -> Estimator:
        """The estimator ``name`` (None: the family's default); a clear error for one it lacks."""
        if name is None:
            return self.estimators[0]
        for est in self.estimators:
            if est.name == name:
                return est
        raise InputError(
            f"unknown estimator {name!r} for the {self.family} family",
            fix=f"use one of {[e.name for e in self.estimators]}",
        )

    def protocol(self) -> dict[str, Any]:
        """Family settings that a record's protocol carries (e.g. Prime's ell, base, carry-over)."""
        return {}

    def set_carry_over(self, carry_over: bool) -> None:
        """Override carry-over at evaluation (families with sub-tokens); others refuse."""

        raise PrimebenchError(
            f"--carry-over/--no-carry-over applies to Prime checkpoints; this is a {self.family!r} model",
            fix="drop the flag",
        )

    @classmethod
    def label(cls, cfg: ModelConfig) -> str:
        """How tables name a model of this family with config ``cfg``."""
        return cls.family

    @classmethod
    def check_image_config(cls, cfg: ModelConfig) -> None:
        """Raise a ConfigError if ``cfg`` cannot score every pixel of an image dataset."""

    # -- checks ----------------------------------------------------------------------------
    def check_tokens(self, x0: torch.Tensor, max_len: int | None = None) -> None:
        """Fail loudly on ids outside [0, C) or rows longer than ``max_len`` (default the model's L)."""
        if x0.dim() != 2:
            raise InputError(f"expected token ids of shape (B, L), got {tuple(x0.shape)}")
        if x0.shape[1] > (max_len or self.seq_len):
            raise InputError(f"sequence length {x0.shape[1]} exceeds the model's seq_len={self.seq_len}")
        if x0.numel() and (int(x0.min()) < 0 or int(x0.max()) >= self.vocab_size):
            raise InputError(
                f"token ids must lie in [0, {self.vocab_size}); got range [{int(x0.min())}, {int(x0.max())}]: "
                "the data was tokenized with a different vocabulary than the model's",
                fix="score data tokenized with the checkpoint's tokenizer",
            )

    @staticmethod
    def scored_tokens(x0: torch.Tensor, attention_mask, corruptible) -> torch.Tensor:
        """(B, L) bool: real tokens (``attention_mask``) that may be corrupted (``corruptible``)."""
        scored = torch.ones_like(x0, dtype=torch.bool) if attention_mask is None else attention_mask.to(torch.bool)
        return scored if corruptible is None else scored & corruptible.to(torch.bool)

    def scored_positions(self, x0: torch.Tensor, attention_mask=None, corruptible=None) -> torch.Tensor:
        """(B, L) bool: the positions whose tokens a row's NLL counts (the denominator of nats/token)."""
        return self.scored_tokens(x0, attention_mask, corruptible)

    # -- the interface -----------------------------------------------------------------------
    def forward(
        self, x0: torch.Tensor, *, generator: torch.Generator | None = None, attention_mask=None
    ) -> torch.Tensor:
        """The training loss, so that DistributedDataParallel's forward hooks see it."""
        return self.loss(x0, generator=generator, attention_mask=attention_mask)

    @abc.abstractmethod
    def log_probs(
        self, z_t: torch.Tensor, t: torch.Tensor | None = None, attention_mask=None, x0: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L[, ell]) inputs -> (B, L, C) log p_theta(x_0^i = c | z_t). ``x0``: the clean tokens that
        ``z_t`` corrupts, read only by a network that also sees clean tokens (BD3-LM's earlier blocks)."""

    @abc.abstractmethod
    def loss(self, x0: torch.Tensor, *, generator: torch.Generator | None = None, attention_mask=None) -> torch.Tensor:
        """The training objective per token (nats), a scalar with a gradient."""

    def begin_train_step(self, step: int, total_steps: int) -> None:
        """Called by the trainer before the loss of each optimizer step (0-based ``step`` of
        ``total_steps``): a family whose objective changes with the step (DUO's curriculum) keeps it
        here. Evaluation never calls it. Default: nothing."""

    @abc.abstractmethod
    def nll(
        self,
        x0: torch.Tensor,
        *,
        estimators: Sequence[str] | None = None,
        num_samples: int = 1,
        generator: Generators = None,
        attention_mask: torch.Tensor | None = None,
        corruptible: torch.Tensor | None = None,
        time_sampler: str | None = None,
    ) -> NLL | list[NLL]:
        """The NLL (nats per sequence, (B,)) of the tokens of ``x0`` (B, L) that ``corruptible`` (B, L)
        marks (all real tokens of ``attention_mask`` by default); the others are given context.

        ``estimators``: names of the family's estimators, scored from the same corruptions and
        forward passes; a list of :class:`~harness.nll.NLL`, one per name, comes back. None: the
        default estimator alone, and one NLL comes back. ``num_samples``, ``generator`` and
        ``time_sampler`` drive the Monte-Carlo families (see :meth:`time_sampler`)."""

    def masked_cross_entropy(
        self, x0: torch.Tensor, *, rate: float, generator: torch.Generator | None = None, attention_mask=None
    ) -> float | None:
        """Mean -log p(x_0^i | z) over tokens masked at ``rate`` (the training health's context
        check); None for a family that masks nothing (the ARM)."""
        return None

    @abc.abstractmethod
    def greedy_matches(self, x0: torch.Tensor, *, attention_mask=None, corruptible: torch.Tensor) -> torch.Tensor:
        """(B,) bool: the one-pass argmax reproduces every ``corruptible`` token (lm-eval's is_greedy)."""

    def score(
        self,
        x0: torch.Tensor,
        *,
        corruptible: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        greedy: bool = False,
        num_samples: int = 1,
        generator: Generators = None,
        time_sampler: str | None = None,
    ) -> tuple[NLL, torch.Tensor | None]:
        """lm-eval's pair for rows ``x0`` (B, L): the default estimator's :meth:`nll` of the
        ``corruptible`` (B, L) tokens, and, if ``greedy``, :meth:`greedy_matches` (B,) bool (else None)."""
        out = self.nll(
            x0,
            num_samples=num_samples,
            generator=generator,
            attention_mask=attention_mask,
            corruptible=corruptible,
            time_sampler=time_sampler,
        )
        return out, (
            self.greedy_matches(x0, attention_mask=attention_mask, corruptible=corruptible) if greedy else None
        )


def check_declarations(cls: type[ModelFamily]) -> None:
    """Raise TypeError when the family class ``cls`` declares a fact wrongly (see the module docstring)."""

    def refuse(what: str) -> None:
        raise TypeError(f"model family {cls.family!r} ({cls.__qualname__}): {what}")

    if cls.forward_process not in FORWARD_PROCESSES:
        refuse(f"forward_process {cls.forward_process!r} is not one of {FORWARD_PROCESSES}")
    if not cls.estimators:
        refuse("declares no estimator")
    for est in cls.estimators:
        if est.kind not in ESTIMATOR_KINDS:
            refuse(f"estimator {est.name!r} has kind {est.kind!r}, not one of {ESTIMATOR_KINDS}")
    if len({e.name for e in cls.estimators}) != len(cls.estimators):
        refuse("two estimators share a name")
    if (
        not cls.samplers
        or cls.default_sampler not in cls.samplers
        or (cls.token_by_token_sampler and cls.token_by_token_sampler not in cls.samplers)
    ):
        refuse(
            f"its default ({cls.default_sampler!r}) and token-by-token ({cls.token_by_token_sampler!r}, or '' for "
            f"none) samplers must be among its samplers {cls.samplers}"
        )
    if not cls.token_convention:
        refuse("declares no token convention")
    if cls.uses_time_sampler != (cls.default_time_sampler is not None):
        refuse("uses_time_sampler and default_time_sampler disagree")
    if not (isinstance(cls.config_class, type) and issubclass(cls.config_class, ModelConfig)):
        refuse("config_class is not a ModelConfig")


def config_keys(cls: type[ModelConfig]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


__all__ = [
    "ESTIMATOR_KINDS",
    "FORWARD_PROCESSES",
    "Estimator",
    "Generators",
    "ModelConfig",
    "ModelFamily",
    "check_declarations",
    "config_keys",
]
