"""What the ``psyche-solana-client`` run-administration commands do, one coroutine each: the
coordinator program's run management (create, configure, pause, rates, tick, checkpoint, close,
dump). The join-authorization commands are in :mod:`psyche.solana.programs.authorizer`.

A run created through the Treasurer (docs/rewards.md) has the Treasurer's ``Run`` as its
coordinator's main authority: ``update_config``, ``set_paused`` and ``set_future_epoch_rates``
then send the Treasurer's ``run_update`` (signed by the wallet as the Run's main authority)
instead of the coordinator's instructions
(:func:`psyche.solana.programs.treasurer_commands.treasurer_run` decides: it reads the run's
instance, and the main authority's account only when that key is off the curve, as PDAs are).

See docs/solana.md, "Python side".

The CLI (:mod:`psyche.cli.solana`) only parses flags and prints; these take a
:class:`~psyche.solana.session.Session` and return JSON-able results, so tests call them
directly or through the CLI against the RPC test double.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from psyche.coordinator import RunState
from psyche.coordinator.state_json import identity_obj, to_obj_state
from psyche.protocol.locations import HubCheckpoint, HubRepo, P2PCheckpoint
from psyche.protocol.run_file import load_run_config
from psyche.protocol.strict_obj import to_obj
from psyche.solana.errors import ChainError
from psyche.solana.instructions import RunAccounts, RunInstructions, instance_pda
from psyche.solana.layout import fixed_str
from psyche.solana.programs import treasurer_commands as treasurer
from psyche.solana.programs.coordinator import (
    create_coordinator_account_ix,
    default_local_run,
    metadata_arg,
)
from psyche.solana.session import Session
from psyche.solana.snapshot import AccountLayoutError, RunSnapshot

__all__ = [
    "checkpoint",
    "close_run",
    "create_coordinator_account_ix",
    "create_run",
    "default_local_run",
    "dump_run",
    "metadata_arg",
    "run_json",
    "set_future_epoch_rates",
    "set_paused",
    "tick",
    "update_config",
]


async def create_run(
    s: Session,
    run_id: str,
    client_version: str,
    join_authority: Pubkey | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    local_run: bool | None = None,
) -> dict[str, Any]:
    """Create the zero-copy account (system ``create_account``) and ``init_coordinator`` it in
    the same transaction; the wallet pays and becomes the main authority. A name or description
    is stored by an ``update`` in that transaction too, so the run never exists without it.
    ``local_run`` (None: :func:`default_local_run`) is fixed for the run's life."""
    local = default_local_run(s) if local_run is None else local_run
    me = s.wallet.pubkey()
    account = Keypair()
    size = s.layout.size
    metadata = None
    if name is not None or description is not None:
        metadata = metadata_arg(name or "", description or "")
    run = RunAccounts(instance_pda(s.coordinator.program_id, run_id), account.pubkey())
    ixs = RunInstructions(s.coordinator, run)
    create = await create_coordinator_account_ix(s, account)
    init = ixs.init_coordinator(me, me, join_authority or me, run_id, client_version, local)
    sent = [create, init]
    if metadata is not None:
        update = {"metadata": metadata, "config": None, "model": None, "progress": None}
        sent.append(ixs.owner("update", me, update))
    sig = await s.sender(s.coordinator).send(sent, [account], label="create-run")
    return {
        "run_id": run_id,
        "coordinator_instance": str(run.instance),
        "coordinator_account": str(run.account),
        "account_size": size,
        "local_run": local,
        "signature": sig,
    }


async def _instructions(s: Session, run_id: str) -> RunInstructions:
    # Only the accounts: decoding the state would refuse a run that was never configured.
    return RunInstructions(s.coordinator, await s.run_accounts(run_id))


async def _owner(s: Session, run_id: str, name: str, args: dict[str, Any], **more: Pubkey) -> str:
    ixs = await _instructions(s, run_id)
    ix = ixs.owner(name, s.wallet.pubkey(), args, **more)
    return await s.sender(s.coordinator).send([ix], label=name)


async def update_config(
    s: Session,
    run_id: str,
    *,
    config_path: str | None = None,
    restart_from_step: int | None = None,
    switch_to_hub: bool = False,
    metadata: dict[str, Any] | None = None,
    client_version: str | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> list[str]:
    """``on_warning`` hears what loading the config file converted or dropped (older keys), the
    config's risky-but-valid settings (``RunConfig.advisories``) and, for a public run (the
    run's stored ``local_run`` flag is off), what it leaves unverified
    (``RunConfig.public_run_advisories``). The file passes every rule of ``validate-config``
    before anything is sent; the program checks the config and model again."""
    args: dict[str, Any] = {"metadata": None, "config": None, "model": None, "progress": None}
    public: list[str] = []
    if config_path is not None:
        # Before any RPC: a broken file is reported without touching the cluster.
        args["config"], args["model"], public = _config_args(config_path, switch_to_hub, on_warning)
    ixs = await _instructions(s, run_id)
    if public and on_warning is not None and not await _local_run(s, run_id):
        for w in public:
            on_warning(f"{config_path}: {w}")
    if restart_from_step is not None:
        _, snap = await s.run(run_id)
        coord = snap.coordinator
        progress = {"epoch": coord.progress.epoch, "step": restart_from_step}
        progress["epoch_start_data_index"] = _data_index_for_step(snap, restart_from_step)
        args["progress"] = {**progress, "_pad": bytes(2)}
    if metadata is not None:
        current = await _current_metadata(s, ixs.run)
        m = {**current, **{k: v for k, v in metadata.items() if v is not None}}
        args["metadata"] = metadata_arg(
            str(m["name"]), str(m["description"]), int(m["num_parameters"]), int(m["vocab_size"])
        )
    return await _send_update(s, run_id, ixs, args, client_version)


async def _local_run(s: Session, run_id: str) -> bool:
    """The run's ``local_run`` flag, fixed at create-run: read from its coordinator instance,
    without decoding the run's state (which a never-configured run cannot be)."""
    return bool((await s.instance(run_id))["local_run"])


def _config_args(
    config_path: str, switch_to_hub: bool, on_warning: Callable[[str], None] | None
) -> tuple[Any, Any, list[str]]:
    """The ``config`` and ``model`` arguments of ``update`` from a run config file, which must
    pass every rule of ``validate-config``, and what to warn about if the run is public
    (``RunConfig.public_run_advisories``); with ``switch_to_hub``, a P2P checkpoint becomes the
    Hub repository it names."""
    rc = load_run_config(config_path)
    for w in (*rc.warnings, *rc.advisories()):
        if on_warning is not None:
            on_warning(f"{config_path}: {w}")
    model = rc.model
    ck = getattr(model, "checkpoint", None)
    if switch_to_hub and isinstance(ck, P2PCheckpoint):
        from dataclasses import replace

        model = replace(model, checkpoint=HubCheckpoint(ck.repo))  # type: ignore[type-var]
    return to_obj(rc.config), to_obj(model), rc.public_run_advisories()


async def _send_update(
    s: Session,
    run_id: str,
    ixs: RunInstructions,
    args: dict[str, Any],
    client_version: str | None,
) -> list[str]:
    """Send the ``update`` arguments that are set and the new client version: one
    ``run_update`` for the Treasurer's run (docs/rewards.md), else the coordinator's ``update``
    and ``update_client_version``, each only if there is something to change."""
    sigs = []
    run = await treasurer.treasurer_run(s, run_id)
    if run is not None:
        # The Treasurer's run: one run_update does both (docs/rewards.md).
        fields = {k: v for k, v in args.items() if v is not None}
        if client_version is not None:
            fields["client_version"] = client_version
        if fields:
            sigs.append(await treasurer.send_run_update(s, run, fields, "update (treasurer)"))
        return sigs
    sender = s.sender(s.coordinator)
    if any(v is not None for v in args.values()):
        ix = ixs.owner("update", s.wallet.pubkey(), args)
        sigs.append(await sender.send([ix], label="update"))
    if client_version is not None:
        ix = ixs.owner("update_client_version", s.wallet.pubkey(), {"new_version": client_version})
        sigs.append(await sender.send([ix], label="update_client_version"))
    return sigs


async def _current_metadata(s: Session, run: RunAccounts) -> dict[str, Any]:
    """The stored metadata, read without decoding the rest of the state (which a run that was
    never configured cannot be)."""
    data = await s.read(run.account)
    if data is None:
        raise ChainError(f"coordinator account {run.account} does not exist")
    return _metadata_obj(s.coordinator.idl.decode_account("CoordinatorAccount", data))


def _metadata_obj(account: dict[str, Any]) -> dict[str, Any]:
    meta = account["state"]["metadata"]
    return {
        "name": fixed_str(meta["name"]["bytes"]),
        "description": fixed_str(meta["description"]["bytes"]),
        "num_parameters": meta["num_parameters"],
        "vocab_size": meta["vocab_size"],
    }


def _data_index_for_step(snap: RunSnapshot, target: int) -> int:
    """Sum of the batch sizes of steps 1..target-1 (``get_data_index_for_step``).

    See docs/protocol.md, "Batch size, data index and cold start".
    """
    coord = snap.coordinator
    if target <= 1 or target > coord.config.total_steps:
        return 0
    index = 0
    for _ in range(1, target):
        index += coord.config.get_batch_size(index * coord.llm.max_seq_len)
    return index


async def set_paused(s: Session, run_id: str, paused: bool) -> str:
    run = await treasurer.treasurer_run(s, run_id)
    if run is not None:
        label = "set_paused (treasurer)"
        return await treasurer.send_run_update(s, run, {"paused": paused}, label)
    return await _owner(s, run_id, "set_paused", {"paused": paused})


async def set_future_epoch_rates(
    s: Session, run_id: str, earning: int | None, slashing: int | None
) -> str:
    run = await treasurer.treasurer_run(s, run_id)
    if run is not None:
        if earning is None and slashing is None:
            raise ChainError("give an earning rate, a slashing rate or both")
        fields = {
            "epoch_earning_rate_total_shared": earning,
            "epoch_slashing_rate_per_client": slashing,
        }
        return await treasurer.send_run_update(s, run, fields, "set_future_epoch_rates (treasurer)")
    args = {"earning_rate_total_shared": earning, "slashing_rate_per_client": slashing}
    return await _owner(s, run_id, "set_future_epoch_rates", args)


async def close_run(s: Session, run_id: str, spill: Pubkey | None = None) -> str:
    return await _owner(s, run_id, "free_coordinator", {}, spill=spill or s.wallet.pubkey())


async def tick(s: Session, run_id: str, ms_interval: int = 1000, count: int | None = None) -> int:
    """Send ``tick`` every ``ms_interval`` ms, ``count`` times (forever if None); returns how
    many were confirmed. A rejected tick (e.g. a halted run) is reported and does not stop it."""
    ixs = await _instructions(s, run_id)
    sender = s.sender(s.coordinator)
    done = sent = 0
    while count is None or sent < count:
        sent += 1
        try:
            await sender.send([ixs.tick(s.wallet.pubkey())], label="tick")
            done += 1
        except ChainError as e:
            print(f"tick {sent}: {e}")
        if count is None or sent < count:
            await asyncio.sleep(ms_interval / 1000)
    return done


async def checkpoint(s: Session, run_id: str, repo: str, revision: str | None) -> str:
    ixs = await _instructions(s, run_id)
    ck = HubCheckpoint(HubRepo(repo_id=repo, revision=revision))
    ix = ixs.checkpoint(s.wallet.pubkey(), 0, ck)
    return await s.sender(s.coordinator).send([ix], label="checkpoint")


def run_json(snap: RunSnapshot, accounts: RunAccounts) -> dict[str, Any]:
    """What ``json-dump-run`` prints."""
    return {
        "coordinator_instance": str(accounts.instance),
        "coordinator_account": str(accounts.account),
        "nonce": snap.nonce,
        "client_version": snap.client_version,
        "next_active": snap.next_active,
        "clients": [
            {**identity_obj(c.id), "active": c.active, "earned": c.earned, "slashed": c.slashed}
            for c in snap.clients
        ],
        **{k: v for k, v in snap.extra.items()},
        "coordinator": to_obj_state(snap.coordinator),
    }


async def _owners_json(s: Session, run_id: str) -> dict[str, Any]:
    """Who owns the run: the coordinator's authorities and, for a run created through the
    Treasurer (whose ``Run`` is then the main authority), that ``Run``."""
    inst = await s.instance(run_id)
    run = await treasurer.treasurer_run(s, run_id, inst)
    return {
        "main_authority": str(Pubkey.from_bytes(bytes(inst["main_authority"]))),
        "join_authority": str(Pubkey.from_bytes(bytes(inst["join_authority"]))),
        "treasurer": None if run is None else run.to_json(s.treasurer.program_id),
    }


async def dump_run(s: Session, run_id: str) -> dict[str, Any]:
    """What ``json-dump-run`` prints: :func:`run_json`, or for a run that was created but never
    configured (no model, so no coordinator state to decode) its metadata, version and state."""
    accounts = await s.run_accounts(run_id)
    data = await s.read(accounts.account)
    if data is None:
        raise ChainError(f"coordinator account {accounts.account} does not exist")
    owners = await _owners_json(s, run_id)
    try:
        return {**owners, **run_json(s.layout.decode_account(data), accounts)}
    except AccountLayoutError:
        # Size, discriminator and version passed if only the model is missing.
        if len(data) != s.layout.size:
            raise
        raw = s.coordinator.idl.decode_account("CoordinatorAccount", data)
        coord = raw["state"]["coordinator"]
        if coord["model"]["len"] != 0 or coord["run_state"] not in {r.value for r in RunState}:
            raise
    return {
        **owners,
        "coordinator_instance": str(accounts.instance),
        "coordinator_account": str(accounts.account),
        "nonce": raw["nonce"],
        "client_version": fixed_str(raw["state"]["client_version"]["bytes"]),
        "metadata": _metadata_obj(raw),
        "run_id": fixed_str(coord["run_id"]["bytes"]),
        "run_state": RunState(coord["run_state"]).name,
        "coordinator": None,
        "note": "created but never configured: set its config with update-config",
    }
