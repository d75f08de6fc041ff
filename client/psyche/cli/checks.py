"""Checks of the training commands' values, made where they are parsed or before anything starts,
so that a user's mistake is one line and exit 2 (:mod:`psyche.cli.exit_codes`), never a traceback
from deep inside a running client.

The parse-time ones are click callbacks and import nothing heavy; :func:`load_identity` and
:func:`usable_device` run after parsing, before the client starts (the device check imports
torch, which the command needs anyway).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import click

from psyche.cli.exit_codes import EXIT_CONFIG, Mistake, fail

if TYPE_CHECKING:
    from psyche.protocol.identity import SecretKey

__all__ = [
    "bind_address",
    "blob_folder",
    "device_name",
    "host_port",
    "load_identity",
    "start_logging",
    "usable_device",
]

_DEVICE = re.compile(r"auto|cpu|mps|cuda(:[0-9]{1,4})?")


def host_port(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--server-addr``: ``host:port`` or ``[ipv6]:port``, checked as the client will read it."""
    from psyche.net.address import parse_address

    if value is None:
        return None
    try:
        parse_address(value)
    except ValueError as e:
        raise click.BadParameter(f"{e} (e.g. 127.0.0.1:20000)") from None
    return value


def device_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--device``: the spelling only (whether the device is there is :func:`usable_device`)."""
    if not _DEVICE.fullmatch(value):
        raise click.BadParameter(f"{value!r}: expected auto, cpu, cuda, cuda:N or mps")
    return value


def blob_folder(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    """``--p2p-blob-dir``: a folder this process can write into, made when missing (as
    ``--checkpoint-dir`` is); anything else is one line, exit 2, before anything starts."""
    from psyche.cli.input_files import file_mistake, flag_name
    from psyche.cli.paths import absolute

    if not value:
        return None
    path, flag = absolute(value), flag_name(param, ctx)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise file_mistake(flag, path, e.strerror or str(e)) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise file_mistake(flag, path, "not writable")
    return path


def bind_address(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--bind-p2p-host``/``--bind-p2p-interface``: an IP address as given, or the IPv4 address
    of the network interface of that name (``eth0``). Anything else is an error: a mistyped
    interface name must not quietly become a host name to resolve."""
    import ipaddress
    import socket

    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    names = sorted(name for _, name in socket.if_nameindex())
    if value not in names:
        raise click.BadParameter(
            f"{value!r} is neither an IP address nor a network interface here "
            f"(interfaces: {', '.join(names)}; 0.0.0.0: all)"
        )
    import fcntl
    import struct

    siocgifaddr = 0x8915  # Linux: the interface's IPv4 address
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), siocgifaddr, struct.pack("256s", value.encode()[:15]))
        except OSError as e:
            raise click.BadParameter(
                f"interface {value!r} has no IPv4 address ({e.strerror})"
            ) from None
    return socket.inet_ntoa(packed[20:24])


KEY_FLAG = "-i/--identity-secret-key-path"
CREATE_KEY = "create a key with `openssl rand 32 > secret.key`"


def load_identity(path: str | None, raw: str | None, flag: str = KEY_FLAG) -> SecretKey:
    """The P2P key from ``RAW_IDENTITY_SECRET_KEY`` (``raw``) or the key file ``path`` (a random
    one without either); a missing, unreadable or malformed key ends the command with one line
    and exit 2 (:mod:`psyche.cli.input_files`). ``flag``: how the command takes the file."""
    from psyche.cli.input_files import file_mistake
    from psyche.protocol.identity import secret_key_from_env_or_file

    try:
        return secret_key_from_env_or_file(path, raw)
    except OSError as e:
        raise file_mistake(flag, path or "", f"{e.strerror or e} ({CREATE_KEY})") from None
    except ValueError as e:
        source = "RAW_IDENTITY_SECRET_KEY" if raw and raw.strip() else flag
        raise Mistake(f"{source}: {e}") from None


def usable_device(device: str) -> None:
    """End the command with one line when ``device`` is not usable here (``cuda`` on a machine
    without a working CUDA, ``cuda:3`` with two GPUs): the image's entry point must not restart
    a client that can never start."""
    import torch

    from psyche.training.device import pick_device

    try:
        dev = pick_device(device)
    except ValueError as e:
        fail(f"--device/PSYCHE_DEVICE: {e}", EXIT_CONFIG)
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        fail(
            f"--device/PSYCHE_DEVICE: {device!r} but {torch.cuda.device_count()} CUDA device(s) "
            "are visible (CUDA_VISIBLE_DEVICES)",
            EXIT_CONFIG,
        )


def start_logging(mode: str, write_log: str | Path | None) -> None:
    """:func:`psyche.cli.logs.setup_logging`, with an unwritable ``--write-log`` or a malformed
    ``PSYCHE_LOG`` ending the command with one line."""
    from psyche.cli.logs import setup_logging

    try:
        setup_logging(mode, write_log=write_log)
    except OSError as e:
        fail(f"--write-log {write_log}: {e.strerror or e}", EXIT_CONFIG)
    except ValueError as e:
        fail(f"PSYCHE_LOG: {e}", EXIT_CONFIG)
