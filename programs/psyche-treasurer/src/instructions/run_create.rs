use anchor_lang::prelude::*;
use anchor_lang::solana_program::program_pack::Pack;
use anchor_lang::system_program;
use anchor_spl::token::{self, spl_token, InitializeAccount3, Mint, Token};
use psyche_coordinator::program::PsycheCoordinator;

use crate::claims;
use crate::constants::{RUN_COLLATERAL_SEEDS_PREFIX, RUN_SEEDS_PREFIX};
use crate::state::Run;

/// Creates a run whose coordinator is owned by the treasurer: the `Run` PDA, its collateral
/// token account, and (by CPI to `init_coordinator`) the coordinator instance with the `Run` PDA
/// as `main_authority`, so the coordinator can only be changed through `run_update`.
///
/// Accounts:
/// 0. `[writable, signer]` payer: pays the rent of everything created here.
/// 1. `[signer]` main_authority: will sign `run_update`.
/// 2. `[writable]` run: PDA `["Run", params.index u64 LE]`, created here.
/// 3. `[]` collateral_mint: a classic SPL Token mint (Token-2022 is refused by the owner check).
/// 4. `[writable]` run_collateral: PDA `["RunCollateral", run]`, created here as a token account
///    of `collateral_mint` with token authority `run`.
/// 5. `[writable]` coordinator_instance: the coordinator's PDA `["coordinator", run_id]`, created
///    by the CPI (which checks its seeds).
/// 6. `[writable]` coordinator_account: created earlier in the same transaction with
///    `system_program::create_account` (owner = coordinator program, all zero); owner checked
///    here, size and that it is not initialized yet by the coordinator.
/// 7. `[]` coordinator_program.
/// 8. `[]` token_program: classic SPL Token.
/// 9. `[]` system_program.
#[derive(Accounts)]
#[instruction(params: RunCreateParams)]
pub struct RunCreate<'info> {
    /// Pays the rent.
    #[account(mut)]
    pub payer: Signer<'info>,

    /// The run's future owner.
    pub main_authority: Signer<'info>,

    /// The run PDA `["Run", index]`.
    #[account(
        init,
        payer = payer,
        space = Run::SPACE,
        seeds = [RUN_SEEDS_PREFIX, &params.index.to_le_bytes()],
        bump,
    )]
    pub run: Box<Account<'info, Run>>,

    /// Mint of the collateral paid for points.
    pub collateral_mint: Box<Account<'info, Mint>>,

    /// CHECK: the run's escrow, PDA `["RunCollateral", run]` (checked here), created by the
    /// processor as a token account of `collateral_mint` with token authority `run`. Not
    /// Anchor's `init` with `token::` constraints: in Anchor 0.32 that code goes through
    /// `token_interface`, which would build token-2022's tree into the program.
    #[account(
        mut,
        seeds = [RUN_COLLATERAL_SEEDS_PREFIX, run.key().as_ref()],
        bump,
    )]
    pub run_collateral: UncheckedAccount<'info>,

    /// CHECK: created by `init_coordinator`, whose `init` constraint checks its seeds.
    #[account(mut)]
    pub coordinator_instance: UncheckedAccount<'info>,

    /// CHECK: owner checked here (a data-less account would otherwise make the coordinator's
    /// `zero` check abort instead of failing with an error); `init_coordinator` checks the rest
    /// (`zero`: a fresh discriminator; rent exemption; its size).
    #[account(mut, owner = psyche_coordinator::ID)]
    pub coordinator_account: UncheckedAccount<'info>,

    /// The psyche coordinator.
    pub coordinator_program: Program<'info, PsycheCoordinator>,

    /// Classic SPL Token.
    pub token_program: Program<'info, Token>,

    /// The system program.
    pub system_program: Program<'info, System>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct RunCreateParams {
    /// Seed of the `Run` PDA.
    pub index: u64,
    /// The coordinator's run id (1–32 bytes, checked by the coordinator).
    pub run_id: String,
    /// The client version the coordinator requires (≤ 96 bytes, checked by the coordinator).
    pub client_version: String,
    /// Grantor of the join authorization (handed to the coordinator).
    pub join_authority: Pubkey,
    /// Token base units paid per point (> 0; fixed for the run's life, so every point of the
    /// ledger is worth the same).
    pub collateral_per_point: u64,
    /// A local run: its peer records may name loopback, private and DNS targets (handed to
    /// the coordinator, `InitCoordinatorParams::local_run`).
    pub local_run: bool,
}

pub fn run_create_processor(ctx: Context<RunCreate>, params: RunCreateParams) -> Result<()> {
    claims::check_collateral_per_point(params.collateral_per_point)?;

    let run = &mut ctx.accounts.run;
    run.bump = ctx.bumps.run;
    run.index = params.index;
    run.main_authority = ctx.accounts.main_authority.key();
    run.join_authority = params.join_authority;
    run.coordinator_instance = ctx.accounts.coordinator_instance.key();
    run.coordinator_account = ctx.accounts.coordinator_account.key();
    run.collateral_mint = ctx.accounts.collateral_mint.key();
    run.collateral_per_point = params.collateral_per_point;
    run.total_claimed_points = 0;
    run.total_claimed_collateral = 0;
    run.wind_down_at = 0;

    create_run_collateral(&ctx)?;

    // The payer signed the transaction, so no PDA signature is needed here.
    psyche_coordinator::cpi::init_coordinator(
        CpiContext::new(
            ctx.accounts.coordinator_program.to_account_info(),
            psyche_coordinator::cpi::accounts::InitCoordinator {
                payer: ctx.accounts.payer.to_account_info(),
                coordinator_instance: ctx.accounts.coordinator_instance.to_account_info(),
                coordinator_account: ctx.accounts.coordinator_account.to_account_info(),
                system_program: ctx.accounts.system_program.to_account_info(),
            },
        ),
        psyche_coordinator::InitCoordinatorParams {
            main_authority: ctx.accounts.run.key(),
            join_authority: params.join_authority,
            run_id: params.run_id,
            client_version: params.client_version,
            local_run: params.local_run,
        },
    )
}

/// Creates the run's collateral token account at its PDA, as Anchor's `init` would: an address
/// someone already sent lamports to (which would make `create_account` fail, blocking the run
/// creation) is topped up to rent exemption, allocated and assigned instead.
fn create_run_collateral(ctx: &Context<RunCreate>) -> Result<()> {
    let accounts = &ctx.accounts;
    let run_key = accounts.run.key();
    let bump = [ctx.bumps.run_collateral];
    let seeds: &[&[u8]] = &[RUN_COLLATERAL_SEEDS_PREFIX, run_key.as_ref(), &bump];
    let signer = &[seeds];
    let space = spl_token::state::Account::LEN;
    let rent = Rent::get()?.minimum_balance(space);
    let target = accounts.run_collateral.to_account_info();
    let system = accounts.system_program.to_account_info();
    let held = target.lamports();
    if held == 0 {
        system_program::create_account(
            CpiContext::new_with_signer(
                system.clone(),
                system_program::CreateAccount {
                    from: accounts.payer.to_account_info(),
                    to: target.clone(),
                },
                signer,
            ),
            rent,
            space as u64,
            &token::ID,
        )?;
    } else {
        let missing = rent.saturating_sub(held);
        if missing > 0 {
            system_program::transfer(
                CpiContext::new(
                    system.clone(),
                    system_program::Transfer {
                        from: accounts.payer.to_account_info(),
                        to: target.clone(),
                    },
                ),
                missing,
            )?;
        }
        system_program::allocate(
            CpiContext::new_with_signer(
                system.clone(),
                system_program::Allocate { account_to_allocate: target.clone() },
                signer,
            ),
            space as u64,
        )?;
        system_program::assign(
            CpiContext::new_with_signer(
                system,
                system_program::Assign { account_to_assign: target.clone() },
                signer,
            ),
            &token::ID,
        )?;
    }
    token::initialize_account3(CpiContext::new(
        accounts.token_program.to_account_info(),
        InitializeAccount3 {
            account: target,
            mint: accounts.collateral_mint.to_account_info(),
            authority: accounts.run.to_account_info(),
        },
    ))
}
