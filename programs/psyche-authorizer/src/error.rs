use anchor_lang::prelude::*;

/// Errors of the authorizer program (Anchor custom codes from 6000, in this order).
#[error_code]
pub enum AuthorizerError {
    #[msg("scope is longer than 32 bytes (it is a PDA seed)")]
    ScopeTooLong,
    #[msg("signer is not the authorization's grantor")]
    NotGrantor,
    #[msg("signer is not the authorization's grantee")]
    NotGrantee,
    #[msg("an authorization holds at most 64 delegates: clear some first or use another grantee")]
    TooManyDelegates,
    #[msg("the authorization is active: the grantor must deactivate it before closing it")]
    AuthorizationActiveIsTrue,
    #[msg("an authorization with delegates can be closed only 30 days after the grantor's last update")]
    AuthorizationClosingConditionsNotReachedYet,
    #[msg("arithmetic overflow")]
    ArithmeticOverflow,
}
