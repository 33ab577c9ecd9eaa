"""Log-scale histograms with weights: the out-of-core summary of a distribution.

Values are binned by ``log10`` into bins of :data:`BIN_WIDTH` decades from :data:`LOG_LO`
to :data:`LOG_HI` (so a quantile read back from a histogram is within a factor
``10**BIN_WIDTH`` ~ 1.047 of the exact one). The range, ``1e-30`` to ``1e19``, holds every
size an ``int64`` can carry (up to 9.2e18 bytes) and every density such rows can have
(one operation on 9.2e18 bytes for 1e10 s is 1.1e-29 ops/byte/s). A value outside it
(or infinite) is counted in the end bin nearest to it; :func:`outside_range` counts such
values so the report can say so. A bin also sums weights (bytes, operations,
byte-seconds...), which is what the skew analysis needs. Zero values (a file never read
or written has density 0) go to bin :data:`ZERO_BIN`.

:class:`Histogram` holds one such histogram for each key of a grouping (e.g. each
pipeline) as a tidy frame ``key, bin, n, <weights>``; histograms of chunks are added
with :func:`add_frames`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = [
    "BIN_WIDTH",
    "LOG_HI",
    "LOG_LO",
    "N_BINS",
    "ZERO_BIN",
    "Histogram",
    "add_frames",
    "bin_lower",
    "bin_of",
    "outside_range",
    "quantiles_from_counts",
]

#: Width of a bin, decades.
BIN_WIDTH = 0.02
#: log10 of the lower edge of the first bin.
LOG_LO = -30.0
#: log10 of the upper edge of the last bin (above the largest int64, 9.22e18).
LOG_HI = 19.0
#: Bins (2450; a chunk's frame holds only the bins its values fall in).
N_BINS = round((LOG_HI - LOG_LO) / BIN_WIDTH)
ZERO_BIN = -1


def _bins_and_outside(values: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`bin_of` of ``values`` and :func:`outside_range` of them, from one ``log10`` pass."""
    v = np.asarray(values, dtype=np.float64)
    out = np.full(v.shape, ZERO_BIN, dtype=np.int64)
    pos = v > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        lg = np.log10(v[pos])
        b = np.floor((lg - LOG_LO) / BIN_WIDTH)
    n_outside = int(np.count_nonzero(~((lg >= LOG_LO) & (lg < LOG_HI))))
    out[pos] = np.clip(b, 0, N_BINS - 1).astype(np.int64)
    return out, n_outside


def bin_of(values: np.ndarray) -> np.ndarray:
    """Bin index of each value (``ZERO_BIN`` for values <= 0; clipped to the range)."""
    return _bins_and_outside(values)[0]


def outside_range(values: np.ndarray) -> int:
    """How many positive values lie outside ``[10**LOG_LO, 10**LOG_HI)`` or are not finite
    (:func:`bin_of` puts them in the nearest end bin, so quantiles there are bounds)."""
    return _bins_and_outside(values)[1]


def bin_lower(bins: np.ndarray) -> np.ndarray:
    """log10 of each bin's lower edge (``-inf`` for ``ZERO_BIN``)."""
    b = np.asarray(bins, dtype=np.float64)
    return np.where(b == ZERO_BIN, -np.inf, LOG_LO + b * BIN_WIDTH)


def add_frames(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Sum tidy histogram frames (``key, bin, n, weights...``) bin by bin."""
    frames = [f for f in frames if f is not None and len(f)]
    if not frames:
        return pd.DataFrame(columns=["key", "bin", "n"])
    if len(frames) == 1:
        return frames[0]
    cat = pd.concat(frames, ignore_index=True)
    return cat.groupby(["key", "bin"], sort=False, observed=True).sum().reset_index()


def quantiles_from_counts(bins: np.ndarray, counts: np.ndarray, qs: Sequence[float]) -> list[float]:
    """Quantiles (as log10 values) of a histogram, interpolated linearly within a bin.

    Values in ``ZERO_BIN`` count as ``-inf``.
    """
    order = np.argsort(bins, kind="stable")
    b, c = np.asarray(bins)[order], np.asarray(counts, dtype=np.float64)[order]
    total = c.sum()
    if total <= 0:
        return [float("nan")] * len(qs)
    cum = np.cumsum(c)
    out = []
    for q in qs:
        target = q * total
        k = int(np.searchsorted(cum, target, side="left"))
        k = min(k, len(b) - 1)
        if b[k] == ZERO_BIN:
            out.append(float("-inf"))
            continue
        before = cum[k - 1] if k else 0.0
        frac = (target - before) / c[k] if c[k] > 0 else 0.0
        out.append(float(LOG_LO + (b[k] + min(max(frac, 0.0), 1.0)) * BIN_WIDTH))
    return out


@dataclasses.dataclass
class Histogram:
    """Histograms of one variable for each key of one grouping.

    Attributes
    ----------
    variable : str
        ``density`` (operations per byte per second), ``lifetime`` (seconds) or ``size`` (bytes).
    grouping : tuple of str
        Key columns (empty for the whole log).
    frame : pandas.DataFrame
        ``key`` (the key's values joined by :data:`KEY_SEP`), ``bin``, ``n`` and weight columns.
    """

    variable: str
    grouping: tuple[str, ...]
    frame: pd.DataFrame

    KEY_SEP = "\x1f"

    def keys(self) -> list[str]:
        """Keys, largest (by rows) first."""
        if not len(self.frame):
            return []
        return list(
            self.frame.groupby("key", observed=True)["n"].sum().sort_values(ascending=False).index
        )

    def of(self, key: str) -> pd.DataFrame:
        """Bins of one key, in bin order."""
        f = self.frame[self.frame["key"] == key]
        return f.sort_values("bin").reset_index(drop=True)

    def totals(self) -> pd.DataFrame:
        """Per key: rows and weight sums."""
        return self.frame.drop(columns=["bin"]).groupby("key", observed=True).sum()

    @classmethod
    def split_key(cls, key: str) -> list[str]:
        return key.split(cls.KEY_SEP) if key else []
