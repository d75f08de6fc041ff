//! The `Authorization` account: one grantor lets one grantee (and the grantee's delegates) act in
//! one scope. Programs that gate an action on it (the coordinator's `join_run`) read the account and
//! call [`Authorization::is_valid_for`]; only this program can create accounts it owns, and it
//! creates them only at the PDA of their (grantor, grantee, scope), so the stored fields can be
//! trusted once the owner is checked (Anchor's `Account<Authorization>` does that).

use anchor_lang::prelude::*;

use crate::constants::{MAX_DELEGATES, MAX_SCOPE_LEN};
use crate::error::AuthorizerError;

#[account]
#[derive(Debug, PartialEq, Eq)]
pub struct Authorization {
    /// Bump of the PDA `["Authorization", grantor, grantee, scope]`.
    pub bump: u8,
    /// Who grants: only this key can activate, deactivate and close the authorization.
    pub grantor: Pubkey,
    /// Who is granted. `Pubkey::default()` means everyone (a permissionless authorization).
    pub grantee: Pubkey,
    /// What is granted, as opaque bytes agreed with the consuming program (≤ 32 bytes: a PDA seed).
    pub scope: Vec<u8>,
    /// Only an active authorization is valid. Created inactive.
    pub active: bool,
    /// Keys the grantee lets act in its place (e.g. hot wallets of a cold grantee); at most
    /// [`MAX_DELEGATES`].
    pub delegates: Vec<Pubkey>,
    /// Unix time of the grantor's last `authorization_grantor_update` (0 before the first one).
    pub grantor_update_unix_timestamp: i64,
}

impl Authorization {
    /// First PDA seed.
    pub const SEEDS_PREFIX: &'static [u8] = b"Authorization";

    /// Account size (discriminator included) for a scope of `scope_len` bytes and
    /// `delegates_len` delegates. Both are bounded by the callers (32 and [`MAX_DELEGATES`]), so
    /// the arithmetic cannot overflow.
    pub const fn space_with_discriminator(scope_len: usize, delegates_len: usize) -> usize {
        8 // Anchor discriminator
            + 1 // bump
            + 32 // grantor
            + 32 // grantee
            + 4 + scope_len // scope: borsh Vec<u8>
            + 1 // active
            + 4 + 32 * delegates_len // delegates: borsh Vec<Pubkey>
            + 8 // grantor_update_unix_timestamp
    }

    /// Derives the PDA of the authorization of `(grantor, grantee, scope)`.
    pub fn find_pda(grantor: &Pubkey, grantee: &Pubkey, scope: &[u8]) -> (Pubkey, u8) {
        Pubkey::find_program_address(
            &[Self::SEEDS_PREFIX, grantor.as_ref(), grantee.as_ref(), scope],
            &crate::ID,
        )
    }

    /// True when `user` may act in `scope` on behalf of `grantor`'s grant: the authorization is
    /// active, was given by `grantor` for exactly `scope`, and either grants everyone
    /// (`grantee == Pubkey::default()`), or `user` is the grantee, or `user` is one of its
    /// delegates.
    pub fn is_valid_for(&self, grantor: &Pubkey, user: &Pubkey, scope: &[u8]) -> bool {
        self.active
            && self.grantor == *grantor
            && self.scope == scope
            && (self.grantee == Pubkey::default()
                || self.grantee == *user
                || self.delegates.contains(user))
    }

    /// The scope as a PDA seed, or `ScopeTooLong` when it cannot be one (over 32 bytes).
    pub fn scope_seed(scope: &[u8]) -> Result<&[u8]> {
        require!(scope.len() <= MAX_SCOPE_LEN, AuthorizerError::ScopeTooLong);
        Ok(scope)
    }

    /// True when the delegate list may hold `len` entries.
    pub fn delegates_len_ok(len: usize) -> bool {
        len <= MAX_DELEGATES
    }
}
