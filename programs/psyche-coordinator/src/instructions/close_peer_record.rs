use anchor_lang::prelude::*;

use crate::constants::PEER_RECORD_SEEDS_PREFIX;
use crate::state::PeerRecord;

/// Closes the signer's `PeerRecord` and returns its rent to the signer. The PDA is checked with
/// the record's own stored `coordinator_instance` and `bump`, so a record can be closed after
/// its run was freed.
///
/// Accounts:
/// 0. `[writable, signer]` signer: the record's `signer`; receives the lamports.
/// 1. `[writable]` peer_record: the PDA `["peer", peer_record.coordinator_instance, signer]`,
///    closed.
#[derive(Accounts)]
pub struct ClosePeerRecord<'info> {
    /// The wallet that published the record.
    #[account(mut)]
    pub signer: Signer<'info>,

    /// The signer's record.
    #[account(
        mut,
        has_one = signer,
        seeds = [
            PEER_RECORD_SEEDS_PREFIX,
            peer_record.coordinator_instance.as_ref(),
            signer.key().as_ref(),
        ],
        bump = peer_record.bump,
        close = signer,
    )]
    pub peer_record: Account<'info, PeerRecord>,
}

pub fn close_peer_record_processor(_ctx: Context<ClosePeerRecord>) -> Result<()> {
    Ok(())
}
