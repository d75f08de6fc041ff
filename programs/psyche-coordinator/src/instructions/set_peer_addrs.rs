use anchor_lang::prelude::*;

use crate::constants::{COORDINATOR_INSTANCE_SEEDS_PREFIX, PEER_RECORD_SEEDS_PREFIX};
use crate::core::check_peer_addrs;
use crate::state::{CoordinatorInstance, PeerRecord};

/// Publishes the signer's P2P addresses for a run: creates its `PeerRecord` on first use
/// (the signer pays the rent, `PeerRecord::SPACE`), then overwrites `addrs` and stamps
/// `updated_at` / `updated_slot` with the cluster clock. Any wallet may publish; readers only
/// look at the records of the run's clients.
///
/// Accounts:
/// 0. `[writable, signer]` signer: the publishing wallet; pays the rent on first use.
/// 1. `[]` coordinator_instance: the run's PDA `["coordinator", run_id]`.
/// 2. `[writable]` peer_record: the PDA `["peer", coordinator_instance, signer]`, created here
///    if it does not exist yet.
/// 3. `[]` system_program.
///
/// The record is created with Anchor's `init_if_needed` rather than a hand-written
/// `create_account` CPI: the constraint also covers an address someone funded beforehand
/// (transfer + allocate + assign instead of a failing `create_account`), and on later calls it
/// checks the existing account's owner, size, rent exemption and discriminator. Re-running the
/// "initialization" is harmless here: every call rewrites every field, and the address is bound
/// to the signer by its seeds.
#[derive(Accounts)]
pub struct SetPeerAddrs<'info> {
    /// The publishing wallet (payer of the rent on first use).
    #[account(mut)]
    pub signer: Signer<'info>,

    /// The run's PDA `["coordinator", run_id]`.
    #[account(
        seeds = [COORDINATOR_INSTANCE_SEEDS_PREFIX, coordinator_instance.run_id.as_bytes()],
        bump = coordinator_instance.bump,
    )]
    pub coordinator_instance: Account<'info, CoordinatorInstance>,

    /// The signer's record for this run, `["peer", coordinator_instance, signer]`.
    #[account(
        init_if_needed,
        payer = signer,
        space = PeerRecord::SPACE,
        seeds = [
            PEER_RECORD_SEEDS_PREFIX,
            coordinator_instance.key().as_ref(),
            signer.key().as_ref(),
        ],
        bump,
    )]
    pub peer_record: Account<'info, PeerRecord>,

    /// The system program (creates the record).
    pub system_program: Program<'info, System>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct SetPeerAddrsParams {
    /// 0 to 4 libp2p multiaddrs, each 1 to 128 bytes of printable ASCII (0x21..=0x7e) starting
    /// with `/`. Empty: no address right now.
    pub addrs: Vec<String>,
}

pub fn set_peer_addrs_processor(
    ctx: Context<SetPeerAddrs>,
    params: SetPeerAddrsParams,
) -> Result<()> {
    check_peer_addrs(&params.addrs, ctx.accounts.coordinator_instance.local_run)?;
    let clock = Clock::get()?;
    let record = &mut ctx.accounts.peer_record;
    record.coordinator_instance = ctx.accounts.coordinator_instance.key();
    record.signer = ctx.accounts.signer.key();
    record.bump = ctx.bumps.peer_record;
    record.updated_at = clock.unix_timestamp;
    record.updated_slot = clock.slot;
    record.addrs = params.addrs;
    Ok(())
}
