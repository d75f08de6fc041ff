"""Training data: the ``DataProvider`` seam and its local, HTTP and TCP implementations.

A provider answers ``get_samples(BatchId)`` with an ``int64 [n, seq_len]`` tensor; the mapping
from sample ids to tokens (file order, every full sequence, wrap-around, swap-or-not shuffle) is
specified in :mod:`psyche.data.provider`. ``prepare`` and ``synth`` build token files from local
text so nothing needs downloading; ``tcp_server``/``tcp_client`` serve them to authenticated
clients.
"""

from psyche.data.factory import local_provider_from_path, provider_for_location
from psyche.data.http import HttpDataProvider
from psyche.data.local import LocalDataProvider
from psyche.data.provider import DataError, DataProvider, DummyDataProvider
from psyche.data.server_messages import RejectReason
from psyche.data.tcp_client import DataRequestRejected, TcpDataProvider
from psyche.data.tcp_server import DataServer, RoundAuthorizer, allow_all

__all__ = [
    "DataError",
    "DataProvider",
    "DataRequestRejected",
    "DataServer",
    "DummyDataProvider",
    "HttpDataProvider",
    "LocalDataProvider",
    "RejectReason",
    "RoundAuthorizer",
    "TcpDataProvider",
    "allow_all",
    "local_provider_from_path",
    "provider_for_location",
]
