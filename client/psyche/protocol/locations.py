"""Where a run's model and tokens come from: checkpoints (``[model.LLM.checkpoint.<Variant>]``)
and data locations (``[model.LLM.data_location.<Variant>]``).

Each variant owns its rules (``check(path)``), mirrored by the program's ``Checkpoint::check`` and
``DataLocation::check``; addresses and URLs must be well formed (the reference accepted any string,
after which every client failed at load, every epoch). Strings are bounded like the program's
(64 bytes, or 192 for URLs and paths).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Annotated

from psyche.protocol.config_rules import http_url_ok, rule, server_address_ok
from psyche.protocol.strict_obj import U8, U32, MaxBytes, Tagged

Str64 = Annotated[str, MaxBytes(64)]
Url = Annotated[str, MaxBytes(192)]


@dataclass(frozen=True, slots=True, kw_only=True)
class HubRepo:
    repo_id: Str64
    revision: Str64 | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GcsRepo:
    bucket: Str64
    prefix: Str64 | None = None


class Checkpoint(Tagged):
    """Where joining clients get the model (``[model.LLM.checkpoint.<Variant>]``)."""

    def check(self, path: str = "model.LLM.checkpoint") -> None:
        rule(
            not isinstance(self, EphemeralCheckpoint),
            f"{path} must not be Ephemeral (clients need a model to start from)",
        )
        repo = getattr(self, "repo", None)
        if isinstance(self, HubCheckpoint | P2PCheckpoint):
            assert isinstance(repo, HubRepo)
            rule(repo.repo_id != "", f"{path}.{self.TAG}.repo_id must not be empty")
        if isinstance(self, GcsCheckpoint | P2PGcsCheckpoint):
            assert isinstance(repo, GcsRepo)
            rule(repo.bucket != "", f"{path}.{self.TAG}.bucket must not be empty")


@dataclass(frozen=True, slots=True)
class EphemeralCheckpoint(Checkpoint):
    TAG = "Ephemeral"


@dataclass(frozen=True, slots=True)
class DummyCheckpoint(Checkpoint):
    TAG = "Dummy"
    NEWTYPE = True
    repo: HubRepo


@dataclass(frozen=True, slots=True)
class HubCheckpoint(Checkpoint):
    TAG = "Hub"
    NEWTYPE = True
    repo: HubRepo


@dataclass(frozen=True, slots=True)
class P2PCheckpoint(Checkpoint):
    TAG = "P2P"
    NEWTYPE = True
    repo: HubRepo


@dataclass(frozen=True, slots=True)
class GcsCheckpoint(Checkpoint):
    TAG = "Gcs"
    NEWTYPE = True
    repo: GcsRepo


@dataclass(frozen=True, slots=True)
class P2PGcsCheckpoint(Checkpoint):
    TAG = "P2PGcs"
    NEWTYPE = True
    repo: GcsRepo


# --- Data locations -----------------------------------------------------------------------------


class TokenSize(enum.Enum):
    TwoBytes = 2
    FourBytes = 4


class Shuffle(Tagged):
    """Sample order of HTTP/local token data."""


@dataclass(frozen=True, slots=True)
class DontShuffle(Shuffle):
    TAG = "DontShuffle"


@dataclass(frozen=True, slots=True)
class SeededShuffle(Shuffle):
    TAG = "Seeded"
    NEWTYPE = True
    seed: tuple[U8, ...]

    def __post_init__(self) -> None:
        rule(len(self.seed) == 32, "shuffle Seeded needs exactly 32 bytes")


class HttpLocation(Tagged):
    """Which HTTP files hold the tokens."""

    def check(self, path: str = "model.LLM.data_location.Http.location") -> None:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class SingleUrl(HttpLocation):
    TAG = "SingleUrl"
    NEWTYPE = True
    url: Url

    def check(self, path: str = "model.LLM.data_location.Http.location") -> None:
        rule(self.url != "", f"{path} must not be empty")
        rule(
            http_url_ok(self.url),
            f"{path}.SingleUrl ({self.url!r}) must be an http:// or https:// URL",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NumberedFiles(HttpLocation):
    TAG = "NumberedFiles"
    url_template: Str64
    start_index: U32
    n_left_pad_zeros: U8
    num_files: U32

    def check(self, path: str = "model.LLM.data_location.Http.location") -> None:
        where = f"{path}.NumberedFiles"
        t = self.url_template
        rule(
            http_url_ok(t) and t.count("{}") == 1,
            f"{where}.url_template ({t!r}) must be an http:// or https:// URL with one {{}} "
            "(where the file number goes)",
        )
        rule(self.num_files >= 1, f"{where}.num_files must be at least 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class Gcp(HttpLocation):
    TAG = "Gcp"
    bucket_name: Str64
    filter_directory: Url = ""

    def check(self, path: str = "model.LLM.data_location.Http.location") -> None:
        rule(
            re.fullmatch(r"[a-z0-9._-]+", self.bucket_name) is not None,
            f"{path}.Gcp.bucket_name ({self.bucket_name!r}) must be a GCS bucket name "
            "(lowercase letters, digits, '.', '_', '-')",
        )


class DataLocation(Tagged):
    """Where clients get training tokens (``[model.LLM.data_location]``)."""

    def check(self, path: str = "model.LLM.data_location") -> None:
        # Newtype variants hold one string (address, path or URL): never empty.
        for name in ("address", "path", "url"):
            value = getattr(self, name, None)
            if isinstance(value, str):
                rule(value != "", f"{path}.{self.TAG} must not be empty")


@dataclass(frozen=True, slots=True)
class DummyData(DataLocation):
    TAG = "Dummy"


@dataclass(frozen=True, slots=True)
class ServerData(DataLocation):
    TAG = "Server"
    NEWTYPE = True
    address: Str64

    def check(self, path: str = "model.LLM.data_location") -> None:
        DataLocation.check(self, path)
        rule(
            server_address_ok(self.address),
            f"{path}.Server ({self.address!r}) must be host:port with a port in 1-65535 "
            "(an IPv6 address in brackets)",
        )


@dataclass(frozen=True, slots=True)
class LocalData(DataLocation):
    TAG = "Local"
    NEWTYPE = True
    path: Url

    def check(self, path: str = "model.LLM.data_location") -> None:
        DataLocation.check(self, path)
        rule("\0" not in self.path, f"{path}.Local must not contain a NUL character")


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpData(DataLocation):
    TAG = "Http"
    location: HttpLocation
    token_size_in_bytes: TokenSize
    shuffle: Shuffle

    def check(self, path: str = "model.LLM.data_location") -> None:
        self.location.check(f"{path}.Http.location")


@dataclass(frozen=True, slots=True)
class WeightedHttpData(DataLocation):
    TAG = "WeightedHttp"
    NEWTYPE = True
    url: Url

    def check(self, path: str = "model.LLM.data_location") -> None:
        DataLocation.check(self, path)
        rule(
            http_url_ok(self.url),
            f"{path}.WeightedHttp ({self.url!r}) must be an http:// or https:// URL",
        )


@dataclass(frozen=True, slots=True)
class PreprocessedData(DataLocation):
    TAG = "Preprocessed"
    NEWTYPE = True
    path: Url
