//! Errors of the treasurer program: Anchor custom codes from 7000, in declaration order (append
//! new ones at the end so every code keeps its number). Not from Anchor's default 6000: the
//! coordinator's errors, which `run_create` and `run_update` pass on from their CPIs, start
//! there, and a client must be able to tell from the code alone whose refusal it was.

use anchor_lang::prelude::*;

// The first variant's discriminant (1000 over Anchor's 6000) moves the whole table: Anchor's IDL
// generator ignores `#[error_code(offset = …)]` and would publish codes the program never returns.
#[error_code]
pub enum TreasurerError {
    #[msg("signer is not the run's main authority")]
    NotRunAuthority = 1000,
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
    #[msg("the payment's destination is the run's own escrow")]
    RunCollateralAsDestination,
    #[msg("the run is winding down: it can no longer be updated or resumed, only closed")]
    RunWindingDown,
    #[msg("the run is not winding down: run_wind_down first")]
    RunNotWindingDown,
    #[msg("the grace period after run_wind_down (RUN_CLOSE_GRACE_SECONDS) has not passed yet")]
    RunCloseTooEarly,
    #[msg("the remainder's token account must belong to the run's main authority")]
    RecipientNotRunAuthority,
}
