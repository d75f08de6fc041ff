//! Token transfers of the pool's instructions.

use anchor_lang::prelude::*;
use anchor_spl::token::{self, Transfer};

use crate::constants::POOL_SEEDS_PREFIX;
use crate::state::Pool;

/// Moves `amount` out of one of the pool's token accounts, signed by the `Pool` PDA (their token
/// authority).
pub fn transfer_from_pool<'info>(
    token_program: AccountInfo<'info>,
    pool: &Account<'info, Pool>,
    from: AccountInfo<'info>,
    to: AccountInfo<'info>,
    amount: u64,
) -> Result<()> {
    let index = pool.index_seed();
    let bump = [pool.bump];
    let seeds: &[&[u8]] = &[POOL_SEEDS_PREFIX, &index, &bump];
    token::transfer(
        CpiContext::new_with_signer(
            token_program,
            Transfer { from, to, authority: pool.to_account_info() },
            &[seeds],
        ),
        amount,
    )
}

/// Moves `amount` from a token account that `authority` (a signer of the instruction) controls.
pub fn transfer_signed_by<'info>(
    token_program: AccountInfo<'info>,
    authority: AccountInfo<'info>,
    from: AccountInfo<'info>,
    to: AccountInfo<'info>,
    amount: u64,
) -> Result<()> {
    token::transfer(CpiContext::new(token_program, Transfer { from, to, authority }), amount)
}
