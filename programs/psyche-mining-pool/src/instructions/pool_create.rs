use anchor_lang::prelude::*;
use anchor_lang::system_program;
use anchor_spl::token::{self, InitializeAccount3, Mint, Token, TokenAccount};

use crate::constants::{
    POOL_COLLATERAL_SEEDS_PREFIX, POOL_REDEEMABLE_SEEDS_PREFIX, POOL_SEEDS_PREFIX,
};
use crate::state::Pool;

/// Creates the pool `index` with its two token accounts (collateral and redeemable, token
/// authority the `Pool` PDA), unfrozen, with the given cap.
///
/// Accounts:
/// 0. `[writable, signer]` payer: pays the rent of the three accounts.
/// 1. `[signer]` authority: becomes `pool.authority`.
/// 2. `[writable]` pool: the PDA `["Pool", params.index LE]`, created here.
/// 3. `[]` collateral_mint: an SPL Token mint.
/// 4. `[]` redeemable_mint: an SPL Token mint.
/// 5. `[writable]` pool_collateral: the PDA `["PoolCollateral", pool]`, created here.
/// 6. `[writable]` pool_redeemable: the PDA `["PoolRedeemable", pool]`, created here.
/// 7. `[]` token_program.
/// 8. `[]` system_program.
#[derive(Accounts)]
#[instruction(params: PoolCreateParams)]
pub struct PoolCreate<'info> {
    /// Pays rent.
    #[account(mut)]
    pub payer: Signer<'info>,

    /// The pool's authority.
    pub authority: Signer<'info>,

    /// The pool PDA `["Pool", index LE]`.
    #[account(
        init,
        payer = payer,
        space = Pool::SPACE,
        seeds = [POOL_SEEDS_PREFIX, &params.index.to_le_bytes()],
        bump,
    )]
    pub pool: Box<Account<'info, Pool>>,

    /// What lenders deposit (classic SPL Token: `Account<Mint>` refuses Token-2022 mints).
    pub collateral_mint: Box<Account<'info, Mint>>,

    /// What lenders are paid.
    pub redeemable_mint: Box<Account<'info, Mint>>,

    /// CHECK: the PDA `["PoolCollateral", pool]` (checked by the seeds), created and initialized
    /// as a token account in the processor. Anchor's `init` with `token::` constraints would
    /// build anchor-spl's Token-2022 interface into the program, which it deliberately leaves out.
    #[account(mut, seeds = [POOL_COLLATERAL_SEEDS_PREFIX, pool.key().as_ref()], bump)]
    pub pool_collateral: UncheckedAccount<'info>,

    /// CHECK: the PDA `["PoolRedeemable", pool]`, as `pool_collateral`.
    #[account(mut, seeds = [POOL_REDEEMABLE_SEEDS_PREFIX, pool.key().as_ref()], bump)]
    pub pool_redeemable: UncheckedAccount<'info>,

    /// The SPL Token program.
    pub token_program: Program<'info, Token>,

    /// The system program.
    pub system_program: Program<'info, System>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct PoolCreateParams {
    /// The pool's number (the PDA seed); any value not used by another pool.
    pub index: u64,
    /// The cap on the total deposits.
    pub max_deposit_collateral_amount: u64,
}

pub fn pool_create_processor(ctx: Context<PoolCreate>, params: PoolCreateParams) -> Result<()> {
    let pool_key = ctx.accounts.pool.key();
    create_pool_token_account(
        ctx.accounts,
        ctx.accounts.pool_collateral.to_account_info(),
        ctx.accounts.collateral_mint.to_account_info(),
        &[POOL_COLLATERAL_SEEDS_PREFIX, pool_key.as_ref(), &[ctx.bumps.pool_collateral]],
    )?;
    create_pool_token_account(
        ctx.accounts,
        ctx.accounts.pool_redeemable.to_account_info(),
        ctx.accounts.redeemable_mint.to_account_info(),
        &[POOL_REDEEMABLE_SEEDS_PREFIX, pool_key.as_ref(), &[ctx.bumps.pool_redeemable]],
    )?;

    let pool = &mut ctx.accounts.pool;
    pool.bump = ctx.bumps.pool;
    pool.index = params.index;
    pool.authority = ctx.accounts.authority.key();
    pool.collateral_mint = ctx.accounts.collateral_mint.key();
    pool.redeemable_mint = ctx.accounts.redeemable_mint.key();
    pool.max_deposit_collateral_amount = params.max_deposit_collateral_amount;
    pool.total_deposited_collateral_amount = 0;
    pool.total_extracted_collateral_amount = 0;
    pool.total_deposited_redeemable_amount = 0;
    pool.total_claimed_redeemable_amount = 0;
    pool.frozen = false;
    Ok(())
}

/// Creates the token account PDA `account` (signed with `seeds`) owned by the token program and
/// initializes it for `mint` with the pool as token authority. Like Anchor's `init`, it copes with
/// an address someone funded beforehand (a plain `create_account` would fail there and block the
/// pool forever): it tops up the rent, then allocates and assigns.
fn create_pool_token_account<'info>(
    accounts: &PoolCreate<'info>,
    account: AccountInfo<'info>,
    mint: AccountInfo<'info>,
    seeds: &[&[u8]],
) -> Result<()> {
    let system = accounts.system_program.to_account_info();
    let payer = accounts.payer.to_account_info();
    let rent = Rent::get()?.minimum_balance(TokenAccount::LEN);
    let signer = &[seeds];
    let current = account.lamports();
    if current == 0 {
        system_program::create_account(
            CpiContext::new_with_signer(
                system,
                system_program::CreateAccount { from: payer, to: account.clone() },
                signer,
            ),
            rent,
            TokenAccount::LEN as u64,
            &token::ID,
        )?;
    } else {
        let missing = rent.saturating_sub(current);
        if missing > 0 {
            system_program::transfer(
                CpiContext::new(
                    system.clone(),
                    system_program::Transfer { from: payer, to: account.clone() },
                ),
                missing,
            )?;
        }
        system_program::allocate(
            CpiContext::new_with_signer(
                system.clone(),
                system_program::Allocate { account_to_allocate: account.clone() },
                signer,
            ),
            TokenAccount::LEN as u64,
        )?;
        system_program::assign(
            CpiContext::new_with_signer(
                system,
                system_program::Assign { account_to_assign: account.clone() },
                signer,
            ),
            &token::ID,
        )?;
    }
    token::initialize_account3(CpiContext::new(
        accounts.token_program.to_account_info(),
        InitializeAccount3 { account, mint, authority: accounts.pool.to_account_info() },
    ))
}
