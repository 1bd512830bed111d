"""Gaussian feature statistics and the Frechet distance between them (FID's formula).

FID (Heusel et al. 2017, eq. 6) fits a Gaussian N(mu, S) to each set of features and reports

    d^2 = ||mu_a - mu_b||^2 + tr(S_a + S_b - 2 (S_a S_b)^{1/2}),

in squared feature units. Everything here is float64: the statistics are accumulated as running
sums (update/compute/reset, like torchmetrics), so splitting the features into batches of any size
gives the same result up to float64 rounding; the covariance is the unbiased one (divide by N - 1),
as in torch-fidelity, torchmetrics and pytorch-fid.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from harness.errors import PrimebenchError
from harness.io import atomic_write_bytes
from harness.metrics.base import Accumulator


@dataclass(frozen=True, eq=False)
class GaussianStats:
    """A fitted Gaussian: ``mean`` float64 (D,), ``cov`` float64 (D, D), from ``count`` feature rows."""

    mean: np.ndarray
    cov: np.ndarray
    count: int

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0])

    def save(self, path: Path) -> Path:
        """Write as ``.npz`` (atomically: readers see the old file or the whole new one)."""

        buffer = io.BytesIO()
        np.savez(buffer, mean=self.mean, cov=self.cov, count=np.int64(self.count))
        atomic_write_bytes(Path(path), buffer.getvalue())
        return Path(path)

    @classmethod
    def load(cls, path: Path) -> GaussianStats:
        with np.load(Path(path)) as data:
            return cls(
                mean=data["mean"].astype(np.float64), cov=data["cov"].astype(np.float64), count=int(data["count"])
            )


class FeatureStats(Accumulator):
    """Running float64 sums of features (N, D) -> :class:`GaussianStats` (update/compute/reset).

    States: ``count`` rows, ``_sum`` (D,) and ``_outer`` (D, D) = sum of x x^T.
    """

    def __init__(self, dim: int):
        if dim < 1:
            raise ValueError(f"feature dimension must be >= 1, got {dim}")
        super().__init__()
        self.dim = int(dim)
        self.add_state("count", 0.0, dist_reduce_fx="sum")
        self.add_state("_sum", torch.zeros(self.dim), dist_reduce_fx="sum")
        self.add_state("_outer", torch.zeros(self.dim, self.dim), dist_reduce_fx="sum")

    def update(self, features: torch.Tensor) -> None:
        """Add features ``(N, D)`` (any float dtype; converted to float64 here, once)."""
        x = torch.as_tensor(features).detach().to("cpu", torch.float64)
        if x.dim() != 2 or x.shape[1] != self.dim:
            raise ValueError(f"features must be (N, {self.dim}), got {tuple(x.shape)}")
        self.count += int(x.shape[0])
        self._sum += x.sum(dim=0)
        self._outer += x.T @ x

    def compute(self) -> GaussianStats:
        n = int(self.count)
        if n < 2:
            raise PrimebenchError(
                f"a covariance needs at least 2 feature rows, got {n}",
                fix="use more samples (FID needs many more than the feature dimension to be stable)",
            )
        mean = self._sum / n
        cov = (self._outer - n * torch.outer(mean, mean)) / (n - 1)
        cov = 0.5 * (cov + cov.T)  # exactly symmetric
        return GaussianStats(mean=mean.numpy().copy(), cov=cov.numpy().copy(), count=n)


def stats_of(features: torch.Tensor) -> GaussianStats:
    """Gaussian statistics of one (N, D) block of features."""
    features = torch.as_tensor(features)
    acc = FeatureStats(int(features.shape[1]))
    acc.update(features)
    return acc.compute()


def _sym_sqrt(matrix: np.ndarray) -> np.ndarray:
    """Square root of a symmetric PSD matrix by eigen-decomposition (tiny negative eigenvalues -> 0)."""
    eigvals, eigvecs = np.linalg.eigh(matrix)
    return (eigvecs * np.sqrt(np.clip(eigvals, 0.0, None))) @ eigvecs.T


def frechet_distance(a: GaussianStats, b: GaussianStats) -> float:
    """Squared Frechet distance between N(mu_a, S_a) and N(mu_b, S_b), float64.

    tr (S_a S_b)^{1/2} = tr (S_a^{1/2} S_b S_a^{1/2})^{1/2}: the inner matrix is symmetric PSD, so
    its trace-sqrt is the sum of the square roots of its (clipped) eigenvalues; no complex
    intermediate as with ``scipy.linalg.sqrtm`` of the non-symmetric product.
    """
    if a.dim != b.dim:
        raise PrimebenchError(
            f"feature dimensions differ: {a.dim} vs {b.dim}",
            fix="compare statistics computed with the same feature extractor",
        )
    mu_a, mu_b = np.asarray(a.mean, np.float64), np.asarray(b.mean, np.float64)
    s_a, s_b = np.asarray(a.cov, np.float64), np.asarray(b.cov, np.float64)
    root_a = _sym_sqrt(s_a)
    inner = root_a @ s_b @ root_a
    inner = 0.5 * (inner + inner.T)
    tr_sqrt = float(np.sqrt(np.clip(np.linalg.eigvalsh(inner), 0.0, None)).sum())
    diff = mu_a - mu_b
    return float(diff @ diff + np.trace(s_a) + np.trace(s_b) - 2.0 * tr_sqrt)


def inception_score(logits: torch.Tensor, *, splits: int = 10) -> tuple[float, float]:
    """Inception Score (Salimans et al. 2016): exp E_x KL(p(y|x) || p(y)), mean and std over
    ``splits`` consecutive chunks of the (N, K) logits (the torch-fidelity convention, unshuffled
    here), computed in float64 log space."""
    logits = torch.as_tensor(logits).to(torch.float64)
    n = logits.shape[0]
    if n < splits:
        raise PrimebenchError(
            f"Inception Score with {splits} splits needs >= {splits} samples, got {n}", fix="draw more samples"
        )
    scores = []
    for i in range(splits):
        log_p = torch.log_softmax(logits[i * n // splits : (i + 1) * n // splits], dim=1)  # (n_i, K)
        log_q = torch.logsumexp(log_p, dim=0) - np.log(log_p.shape[0])  # log marginal p(y)
        kl = (log_p.exp() * (log_p - log_q)).sum(dim=1).mean()
        scores.append(float(kl.exp()))
    return float(np.mean(scores)), float(np.std(scores))
