//! Errors of the treasurer program (Anchor custom codes from 6000, in declaration order; append
//! new ones at the end so every code keeps its number).

use anchor_lang::prelude::*;

#[error_code]
pub enum TreasurerError {
    #[msg("signer is not the run's main authority")]
    NotRunAuthority,
    #[msg("run_update changes nothing: every field is None")]
    RunUpdateEmpty,
    #[msg("collateral_per_point must be greater than 0")]
    CollateralPerPointZero,
    #[msg("claim_points must be at least 1")]
    ClaimZero,
    #[msg("claim_points exceeds the points earned (minus slashed) not yet claimed")]
    ClaimExceedsEarned,
    #[msg("the user is not in the coordinator's registered clients")]
    ParticipantNotRegistered,
    #[msg("the run's collateral account holds less than the claim pays: top it up, the points stay claimable")]
    EscrowShort,
    #[msg("coordinator_account is not the run's coordinator account")]
    CoordinatorAccountMismatch,
    #[msg("coordinator_instance is not the run's coordinator instance")]
    CoordinatorInstanceMismatch,
    #[msg("the token account is not of the run's collateral mint")]
    WrongCollateralMint,
    #[msg("arithmetic overflow")]
    ArithmeticOverflow,
}
