use anchor_lang::prelude::*;

use crate::error::MiningPoolError;
use crate::shares;
use crate::state::Pool;

/// The authority changes the cap and/or freezes the pool. The cap may not go below what was
/// deposited and cannot change once the pool is frozen (the shares are fixed then); freezing is
/// one-way, since unfreezing would let deposits dilute lenders after earnings arrived.
///
/// Accounts:
/// 0. `[signer]` authority: must be `pool.authority`.
/// 1. `[writable]` pool.
#[derive(Accounts)]
pub struct PoolUpdate<'info> {
    /// The pool's authority.
    pub authority: Signer<'info>,

    /// The pool PDA `["Pool", index LE]`.
    #[account(mut, has_one = authority @ MiningPoolError::NotPoolAuthority)]
    pub pool: Account<'info, Pool>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct PoolUpdateParams {
    /// A new cap (refused on a frozen pool and below the deposits).
    pub max_deposit_collateral_amount: Option<u64>,
    /// `Some(true)` freezes (idempotent); `Some(false)` is refused on a frozen pool.
    pub freeze: Option<bool>,
}

pub fn pool_update_processor(ctx: Context<PoolUpdate>, params: PoolUpdateParams) -> Result<()> {
    let pool = &mut ctx.accounts.pool;
    // The cap is checked against the state before this update, so a cap change and a freeze can
    // come together (cap first), but a frozen pool's cap never moves.
    if let Some(cap) = params.max_deposit_collateral_amount {
        require!(!pool.frozen, MiningPoolError::PoolFrozen);
        shares::check_cap(cap, pool.total_deposited_collateral_amount)?;
        pool.max_deposit_collateral_amount = cap;
    }
    if let Some(freeze) = params.freeze {
        require!(freeze || !pool.frozen, MiningPoolError::PoolUnfreezeRefused);
        pool.frozen = freeze;
    }
    Ok(())
}
