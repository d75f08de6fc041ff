use anchor_lang::prelude::*;

/// Errors of the mining pool program (Anchor custom codes from 6000, in this order; append new
/// ones at the end so every earlier code keeps its number).
#[error_code]
pub enum MiningPoolError {
    #[msg("signer is not the pool's authority")]
    NotPoolAuthority,
    #[msg("signer is not the lender's user")]
    NotLenderUser,
    #[msg("the lender account belongs to another pool")]
    LenderPoolMismatch,
    #[msg("the pool is frozen: no more deposits or cap changes")]
    PoolFrozen,
    #[msg("the pool is not frozen yet: earnings can be deposited and claimed only once it is")]
    PoolNotFrozen,
    #[msg("freezing is one-way: a frozen pool cannot be unfrozen")]
    PoolUnfreezeRefused,
    #[msg("the deposit would take the pool's total deposits over its cap")]
    PoolCapExceeded,
    #[msg("the cap cannot go below what was already deposited")]
    PoolCapBelowDeposits,
    #[msg("the amount must be greater than zero")]
    AmountZero,
    #[msg("the claim exceeds what the lender can still claim of its share")]
    ClaimExceedsShare,
    #[msg("nothing was deposited in the pool: there are no shares")]
    NothingDeposited,
    #[msg("the pool's collateral account holds less than the amount to extract")]
    ExtractExceedsCollateral,
    #[msg("the token account is not of the pool's collateral mint")]
    WrongCollateralMint,
    #[msg("the token account is not of the pool's redeemable mint")]
    WrongRedeemableMint,
    #[msg("arithmetic overflow")]
    ArithmeticOverflow,
    #[msg("the destination is the pool's own token account (a transfer to itself would only skew the totals)")]
    PoolAccountAsDestination,
}
