use anchor_lang::prelude::*;

use crate::constants::PARTICIPANT_SEEDS_PREFIX;
use crate::state::{Participant, Run};

/// Creates the user's claim record for a run (once: a second create fails in the system
/// program, the account being in use).
///
/// Accounts:
/// 0. `[writable, signer]` payer: pays the rent.
/// 1. `[signer]` user: the wallet that will claim (its coordinator registration's `signer`).
/// 2. `[]` run.
/// 3. `[writable]` participant: PDA `["Participant", run, user]`, created here.
/// 4. `[]` system_program.
#[derive(Accounts)]
pub struct ParticipantCreate<'info> {
    /// Pays the rent.
    #[account(mut)]
    pub payer: Signer<'info>,

    /// The claiming wallet.
    pub user: Signer<'info>,

    /// The run.
    pub run: Box<Account<'info, Run>>,

    /// The PDA `["Participant", run, user]`.
    #[account(
        init,
        payer = payer,
        space = Participant::SPACE,
        seeds = [PARTICIPANT_SEEDS_PREFIX, run.key().as_ref(), user.key().as_ref()],
        bump,
    )]
    pub participant: Box<Account<'info, Participant>>,

    /// The system program.
    pub system_program: Program<'info, System>,
}

pub fn participant_create_processor(ctx: Context<ParticipantCreate>) -> Result<()> {
    let participant = &mut ctx.accounts.participant;
    participant.bump = ctx.bumps.participant;
    participant.run = ctx.accounts.run.key();
    participant.user = ctx.accounts.user.key();
    participant.claimed_points = 0;
    participant.claimed_collateral = 0;
    Ok(())
}
