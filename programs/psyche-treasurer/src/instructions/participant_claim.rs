use anchor_lang::prelude::*;
use anchor_spl::token::{self, Token, TokenAccount, Transfer};
use psyche_coordinator::CoordinatorAccount;

use crate::claims::{self, Claimed};
use crate::constants::{PARTICIPANT_SEEDS_PREFIX, RUN_COLLATERAL_SEEDS_PREFIX, RUN_SEEDS_PREFIX};
use crate::error::TreasurerError;
use crate::state::{Participant, Run};

/// The user is paid `claim_points × run.collateral_per_point` collateral for points the
/// coordinator credited to its wallet and it has not been paid for yet:
/// `claimable = earned − slashed − participant.claimed_points` (saturating at 0: a slash lowers
/// what can still be claimed, never what was paid). The ledger is read in this instruction, so a
/// claim never exceeds it; `claimed_points` only grows, so no point is paid twice. When the
/// escrow holds less than the payment the claim fails (`EscrowShort`) and nothing changes.
///
/// Accounts:
/// 0. `[signer]` user: the wallet registered in the coordinator (`id.signer`).
/// 1. `[writable]` user_collateral: any token account of `run.collateral_mint` but the run's
///    escrow (`RunCollateralAsDestination`): where to be paid.
/// 2. `[writable]` run: its claim totals grow.
/// 3. `[writable]` run_collateral: PDA `["RunCollateral", run]`, pays.
/// 4. `[writable]` participant: PDA `["Participant", run, user]`.
/// 5. `[]` coordinator_account: must be `run.coordinator_account` (read only).
/// 6. `[]` token_program: classic SPL Token.
#[derive(Accounts)]
pub struct ParticipantClaim<'info> {
    /// The claiming wallet.
    pub user: Signer<'info>,

    /// Where the payment goes.
    #[account(
        mut,
        constraint = user_collateral.mint == run.collateral_mint
            @ TreasurerError::WrongCollateralMint,
    )]
    pub user_collateral: Box<Account<'info, TokenAccount>>,

    /// The run.
    #[account(
        mut,
        has_one = coordinator_account @ TreasurerError::CoordinatorAccountMismatch,
    )]
    pub run: Box<Account<'info, Run>>,

    /// The run's escrow (its mint and authority were fixed when `run_create` created it here).
    #[account(
        mut,
        seeds = [RUN_COLLATERAL_SEEDS_PREFIX, run.key().as_ref()],
        bump,
    )]
    pub run_collateral: Box<Account<'info, TokenAccount>>,

    /// The user's claim record.
    #[account(
        mut,
        seeds = [PARTICIPANT_SEEDS_PREFIX, run.key().as_ref(), user.key().as_ref()],
        bump = participant.bump,
    )]
    pub participant: Box<Account<'info, Participant>>,

    /// The coordinator's points ledger (owner and discriminator checked by Anchor).
    pub coordinator_account: AccountLoader<'info, CoordinatorAccount>,

    /// Classic SPL Token.
    pub token_program: Program<'info, Token>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct ParticipantClaimParams {
    /// Points to be paid for (1..=claimable).
    pub claim_points: u64,
}

pub fn participant_claim_processor(
    ctx: Context<ParticipantClaim>,
    params: ParticipantClaimParams,
) -> Result<()> {
    // Paying the escrow into itself would move nothing yet mark the points paid.
    require!(
        ctx.accounts.user_collateral.key() != ctx.accounts.run_collateral.key(),
        TreasurerError::RunCollateralAsDestination
    );
    claims::check_claim_points(params.claim_points)?;

    let net_earned = {
        let account = ctx.accounts.coordinator_account.load()?;
        account.check_version()?;
        let user = ctx.accounts.user.key().to_bytes();
        let client = account
            .state
            .clients_state
            .clients()
            .iter()
            .find(|c| c.id.signer == user)
            .ok_or(TreasurerError::ParticipantNotRegistered)?;
        claims::net_earned(client.earned, client.slashed)
    };
    let participant = &ctx.accounts.participant;
    let run = &ctx.accounts.run;
    let claim = claims::claim(
        params.claim_points,
        net_earned,
        Claimed { points: participant.claimed_points, collateral: participant.claimed_collateral },
        Claimed { points: run.total_claimed_points, collateral: run.total_claimed_collateral },
        run.collateral_per_point,
        ctx.accounts.run_collateral.amount,
    )?;

    let index = run.index.to_le_bytes();
    let bump = [run.bump];
    let seeds: &[&[u8]] = &[RUN_SEEDS_PREFIX, &index, &bump];
    token::transfer(
        CpiContext::new_with_signer(
            ctx.accounts.token_program.to_account_info(),
            Transfer {
                from: ctx.accounts.run_collateral.to_account_info(),
                to: ctx.accounts.user_collateral.to_account_info(),
                authority: ctx.accounts.run.to_account_info(),
            },
            &[seeds],
        ),
        claim.amount,
    )?;

    let participant = &mut ctx.accounts.participant;
    participant.claimed_points = claim.participant.points;
    participant.claimed_collateral = claim.participant.collateral;
    let run = &mut ctx.accounts.run;
    run.total_claimed_points = claim.run.points;
    run.total_claimed_collateral = claim.run.collateral;
    Ok(())
}
