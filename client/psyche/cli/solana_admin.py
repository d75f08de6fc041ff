"""The run creator's ``psyche-solana-client`` commands: create, configure, pause or resume, set
the epoch rates, tick, checkpoint, close and dump a run (what they send is in
:mod:`psyche.solana.programs.coordinator_commands`). :mod:`psyche.cli.solana` registers them on
its group.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import click
from click.core import ParameterSource

from psyche.cli.exit_codes import EXIT_CONFIG
from psyche.cli.input_files import InputFile
from psyche.cli.solana_options import (
    common,
    description_option,
    echo_result,
    name_option,
    read_only,
    run_async,
    run_id_option,
    to_pubkey,
)
from psyche.solana.errors import ChainError


@click.command("create-run")
@common
@run_id_option
@click.option("--client-version", envvar="CLIENT_VERSION", default="test", show_default=True)
@click.option(
    "--join-authority",
    envvar="JOIN_AUTHORITY",
    default=None,
    help="Who authorizes joiners (default: the wallet).",
)
@name_option
@description_option
@click.option(
    "--treasurer-collateral-mint",
    envvar="TREASURER_COLLATERAL_MINT",
    default=None,
    help="Create the run through the Treasurer, paying points in this SPL mint (docs/rewards.md).",
)
@click.option(
    "--treasurer-index",
    envvar="TREASURER_INDEX",
    type=click.IntRange(0, 2**64 - 1),
    default=None,
    help="The Treasurer Run's index (default: the first 8 bytes, LE, of sha256(RUN_ID)).",
)
@click.option(
    "--treasurer-collateral-per-point",
    envvar="TREASURER_COLLATERAL_PER_POINT",
    type=click.IntRange(1, 2**64 - 1),
    default=1,
    show_default=True,
    help="Base units of the collateral mint paid per point (fixed at creation).",
)
@click.option(
    "--local-run/--public-run",
    default=None,
    help="Whether the run's peer records may name loopback, private and DNS targets (a run on "
    "one machine or LAN; fixed at creation). Default: local when every RPC endpoint is on "
    "localhost, loopback or a private address.",
)
def create_run_cmd(
    session: Any,
    run_id: str,
    client_version: str,
    join_authority: str | None,
    name: str | None,
    description: str | None,
    treasurer_collateral_mint: str | None,
    treasurer_index: int | None,
    treasurer_collateral_per_point: int,
    local_run: bool | None,
):
    """Create RUN_ID's coordinator account and initialize it (the run stays Uninitialized),
    with its NAME and DESCRIPTION stored in the same transaction. With
    --treasurer-collateral-mint the run is created through the Treasurer, whose Run becomes the
    coordinator's main authority (the wallet stays the Run's)."""
    from psyche.protocol.run_file import unverified_public_run_warning
    from psyche.solana.programs import coordinator_commands as admin
    from psyche.solana.programs import treasurer_commands as treasurer

    if treasurer_collateral_mint is None:
        source = click.get_current_context().get_parameter_source
        for flag in ("treasurer_index", "treasurer_collateral_per_point"):
            if source(flag) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
                option = "--" + flag.replace("_", "-")
                raise click.UsageError(f"{option} needs --treasurer-collateral-mint")
        # The Treasurer's path checks the run id itself, before it builds its transaction.
        coro = _if_new(
            session,
            run_id,
            admin.create_run(
                session,
                run_id,
                client_version,
                to_pubkey(join_authority),
                name=name,
                description=description,
                local_run=local_run,
            ),
        )
    else:
        coro = treasurer.create_run_via_treasurer(
            session,
            run_id,
            client_version,
            to_pubkey(treasurer_collateral_mint),
            index=treasurer_index,
            join_authority=to_pubkey(join_authority),
            collateral_per_point=treasurer_collateral_per_point,
            name=name,
            description=description,
            local_run=local_run,
        )
    created = run_async(session, coro)
    if not created["local_run"]:
        # A public run's clients need not trust each other, and a new run verifies nothing.
        click.echo(f"warning: {unverified_public_run_warning(run_id)}", err=True)
    echo_result(created)


class RunExistsError(ChainError):
    """create-run for a run id that is taken: the user's to change (run_async exits 2)."""

    exit_code = EXIT_CONFIG


async def _if_new(session: Any, run_id: str, create: Coroutine[Any, Any, Any]) -> Any:
    """``create``, unless RUN_ID is taken: the program would only answer with the system
    program's "custom program error: 0x0" (the address is in use)."""
    from psyche.solana.instructions import instance_pda

    try:
        instance = instance_pda(session.coordinator.program_id, run_id)
        if await session.read(instance) is not None:
            raise RunExistsError(
                f"run {run_id!r} already exists (its coordinator instance is {instance}): "
                "choose another --run-id, or change this run with update-config"
            )
    except BaseException:
        create.close()  # never started: closed, or Python warns it was never awaited
        raise
    return await create


@click.command("update-config")
@common
@run_id_option
@click.option(
    "--config-path",
    envvar="CONFIG_PATH",
    default=None,
    type=InputFile(parse="toml"),
    metavar="TEXT",  # the help as it was before the type checked the file
    help="state.toml / config.toml",
)
@click.option(
    "--restart-from-step",
    envvar="RESTART_FROM_STEP",
    type=click.IntRange(1, 2**32 - 1),
    default=None,
    help="Step to continue from (steps start at 1, as the program's progress check requires).",
)
@click.option("--switch-to-hub", envvar="SWITCH_TO_HUB", is_flag=True, default=False)
@name_option
@description_option
@click.option("--num-parameters", envvar="NUM_PARAMETERS", type=int, default=None)
@click.option("--vocab-size", envvar="VOCAB_SIZE", type=int, default=None)
@click.option("--client-version", envvar="CLIENT_VERSION", default=None)
def update_config_cmd(
    session: Any,
    run_id: str,
    config_path: str | None,
    restart_from_step: int | None,
    switch_to_hub: bool,
    name: str | None,
    description: str | None,
    num_parameters: int | None,
    vocab_size: int | None,
    client_version: str | None,
):
    """Update the run's config/model (from CONFIG_PATH), progress, metadata or client version."""
    from psyche.solana.programs import coordinator_commands as admin

    meta = {
        "name": name,
        "description": description,
        "num_parameters": num_parameters,
        "vocab_size": vocab_size,
    }
    sigs = run_async(
        session,
        admin.update_config(
            session,
            run_id,
            config_path=config_path,
            restart_from_step=restart_from_step,
            switch_to_hub=switch_to_hub,
            metadata=meta if any(v is not None for v in meta.values()) else None,
            client_version=client_version,
            on_warning=lambda w: click.echo(f"warning: {w}", err=True),
        ),
    )
    echo_result({"signatures": sigs})


@click.command("set-paused")
@common
@run_id_option
@click.argument("action", required=False, type=click.Choice(["pause", "resume"]))
@click.option("--resume", envvar="RESUME", is_flag=True, default=False, help="Same as `resume`.")
def set_paused_cmd(session: Any, run_id: str, action: str | None, resume: bool):
    """Pause the run, or resume it (`resume` or --resume; the first resume starts a new run).
    Without ACTION: pause."""
    from psyche.solana.programs import coordinator_commands as admin

    if action is not None:
        # The positional word wins over RESUME from the environment, not over the flag.
        source = click.get_current_context().get_parameter_source("resume")
        if action == "pause" and resume and source is ParameterSource.COMMANDLINE:
            raise click.UsageError("`pause` and --resume contradict each other")
        resume = action == "resume"
    echo_result(run_async(session, admin.set_paused(session, run_id, not resume)))


@click.command("set-future-epoch-rates")
@common
@run_id_option
@click.option("--earning-rate-total-shared", envvar="EARNING_RATE_TOTAL_SHARED", type=int)
@click.option("--slashing-rate-per-client", envvar="SLASHING_RATE_PER_CLIENT", type=int)
def set_rates_cmd(
    session: Any,
    run_id: str,
    earning_rate_total_shared: int | None,
    slashing_rate_per_client: int | None,
):
    """Set the points earned (shared per epoch) and slashed (per client) from the next epoch."""
    from psyche.solana.programs import coordinator_commands as admin

    echo_result(
        run_async(
            session,
            admin.set_future_epoch_rates(
                session, run_id, earning_rate_total_shared, slashing_rate_per_client
            ),
        )
    )


@click.command("tick")
@common
@run_id_option
@click.option("--ms-interval", envvar="MS_INTERVAL", type=int, default=1000, show_default=True)
@click.option("--count", envvar="COUNT", type=int, default=None, help="Default: forever.")
def tick_cmd(session: Any, run_id: str, ms_interval: int, count: int | None):
    """Send permissionless ticks."""
    from psyche.solana.programs import coordinator_commands as admin

    echo_result(
        f"{run_async(session, admin.tick(session, run_id, ms_interval, count))} tick(s) confirmed"
    )


@click.command("checkpoint")
@common
@run_id_option
@click.option("--repo", envvar="CHECKPOINT_REPO", required=True, help="Hub repo id of the upload.")
@click.option("--revision", envvar="CHECKPOINT_REVISION", default=None)
def checkpoint_cmd(session: Any, run_id: str, repo: str, revision: str | None):
    """Report a Hub checkpoint (the wallet must be an elected checkpointer, in Cooldown)."""
    from psyche.solana.programs import coordinator_commands as admin

    echo_result(run_async(session, admin.checkpoint(session, run_id, repo, revision)))


@click.command("close-run")
@common
@run_id_option
@click.option("--spill", envvar="SPILL", default=None, help="Who gets the rent (default: wallet).")
def close_run_cmd(session: Any, run_id: str, spill: str | None):
    """Close a halted run's accounts and reclaim their rent."""
    from psyche.solana.programs import coordinator_commands as admin

    echo_result(run_async(session, admin.close_run(session, run_id, to_pubkey(spill))))


@click.command("json-dump-run")
@read_only
@run_id_option
def json_dump_run_cmd(session: Any, run_id: str, own_pubkey: Any):
    """Print the run's coordinator account as JSON."""
    from psyche.solana.programs import coordinator_commands as admin

    echo_result(run_async(session, admin.dump_run(session, run_id)))


COMMANDS = (
    create_run_cmd,
    update_config_cmd,
    set_paused_cmd,
    set_rates_cmd,
    tick_cmd,
    checkpoint_cmd,
    close_run_cmd,
    json_dump_run_cmd,
)
