"""``WeightedHttp(url)``: a weighted mix of HTTP datasets, described by a JSON file at ``url``.

The file (the reference's ``WeightedHttpProvidersConfig``)::

    {"providers": {"ExplicitlyWeighted": [[<Http location>, 0.7], [<Http location>, 0.3]]}}
    {"providers": {"LengthWeighted": [<Http location>, ...]}}

where each ``<Http location>`` is the ``Http`` data location of a run config
(``{"location": …, "token_size_in_bytes": …, "shuffle": …}``). Explicit weights are normalised
to their sum; ``LengthWeighted`` weighs each dataset by its number of samples.

Sample id ``i`` goes to dataset ``k`` when ``u(i)`` falls in ``k``'s share of ``[0, 1)``, where
``u(i) = sha256("psyche-weighted" ‖ i as u64 LE)[:8] / 2^64`` and the shares are exact rationals
(the weights' exact binary values): no float rounding and no RNG state, so every client maps a
batch id to the same samples. Inside dataset ``k`` the sample read is ``i`` itself (its own
index wraps and shuffles as usual), so distinct ids stay distinct samples until a dataset wraps.
"""

from __future__ import annotations

import hashlib
import json
import math
from bisect import bisect_right
from fractions import Fraction
from typing import Any

import httpx
import torch

from psyche.data.http import GCS_BASE_URL, HttpDataProvider
from psyche.data.provider import DataError
from psyche.protocol.data_selection import BatchId
from psyche.protocol.locations import DataLocation, HttpData
from psyche.protocol.strict_obj import ConfigError, from_obj

__all__ = ["WeightedHttpProvider", "dataset_of"]

_U = 1 << 64


def _u(i: int) -> Fraction:
    digest = hashlib.sha256(b"psyche-weighted" + i.to_bytes(8, "little")).digest()
    return Fraction(int.from_bytes(digest[:8], "little"), _U)


def dataset_of(i: int, bounds: list[Fraction]) -> int:
    """The dataset of sample id ``i``; ``bounds`` are the cumulative shares' upper ends."""
    return min(bisect_right(bounds, _u(i)), len(bounds) - 1)


def _bounds(weights: list[float]) -> list[Fraction]:
    exact = [Fraction(w) for w in weights]
    total = sum(exact, Fraction(0))
    out, acc = [], Fraction(0)
    for w in exact:
        acc += w
        out.append(acc / total)
    return out


def _loc(obj: Any, path: str) -> HttpData:
    loc = from_obj(DataLocation, {"Http": obj}, path)
    assert isinstance(loc, HttpData)
    return loc


def _parse(doc: Any, url: str) -> tuple[list[HttpData], list[float] | None]:
    try:
        providers = doc["providers"]
        if "ExplicitlyWeighted" in providers:
            items = providers["ExplicitlyWeighted"]
            locs = [_loc(loc, f"{url}: providers[{n}]") for n, (loc, _) in
                    enumerate(items)]  # fmt: skip
            weights = [float(w) for _, w in items]
            if (
                not weights
                or any(not math.isfinite(w) or w < 0 for w in weights)
                or not sum(weights)
            ):
                raise DataError(f"{url}: weights must be finite, >= 0 and not all 0")
            return locs, weights
        items = providers["LengthWeighted"]
        return [_loc(loc, f"{url}: providers[{n}]") for n, loc in
                enumerate(items)], None  # fmt: skip
    except DataError:
        raise
    except ConfigError as e:
        raise DataError(str(e)) from None
    except (KeyError, TypeError, ValueError) as e:
        raise DataError(f"{url}: not a weighted HTTP providers file ({e})") from None


class WeightedHttpProvider:
    """Samples of several HTTP datasets, mixed by weight (see the module doc)."""

    def __init__(self, parts: list[HttpDataProvider], weights: list[float] | None) -> None:
        if not parts:
            raise DataError("a weighted HTTP mix needs at least one dataset")
        self.parts = parts
        w = weights if weights is not None else [float(p.num_samples) for p in parts]
        self.bounds = _bounds(w)
        self._seq_len = parts[0].seq_len

    @classmethod
    def from_url(
        cls, url: str, seq_len: int, *, gcs_base_url: str = GCS_BASE_URL, timeout: float = 10.0
    ) -> WeightedHttpProvider:
        try:
            resp = httpx.get(url, timeout=timeout, follow_redirects=True)
            resp.raise_for_status()
            doc = json.loads(resp.content)
        except (httpx.HTTPError, ValueError) as e:
            raise DataError(f"{url}: cannot read the weighted providers file ({e})") from None
        locs, weights = _parse(doc, url)
        parts = [
            HttpDataProvider.from_location(
                loc.location, seq_len, loc.token_size_in_bytes, loc.shuffle,
                gcs_base_url=gcs_base_url,
            )
            for loc in locs
        ]  # fmt: skip
        return cls(parts, weights)

    @property
    def seq_len(self) -> int:
        return self._seq_len

    @property
    def num_samples(self) -> int:
        return sum(p.num_samples for p in self.parts)

    def get_samples(self, batch_id: BatchId) -> torch.Tensor:
        ids = range(batch_id.start, batch_id.end + 1)
        owner = [dataset_of(i, self.bounds) for i in ids]
        rows: list[torch.Tensor] = []
        n = 0
        while n < len(owner):  # one request per run of consecutive ids of the same dataset
            end = n
            while end + 1 < len(owner) and owner[end + 1] == owner[n]:
                end += 1
            rows.append(self.parts[owner[n]].get_samples(BatchId(ids[n], ids[end])))
            n = end + 1
        return torch.cat(rows, dim=0)

    def close(self) -> None:
        for p in self.parts:
            p.close()
