//! Registered wallets of a run: who joined for which epoch, and their points ledger
//! (docs/protocol.md, "Rewards").

use anchor_lang::prelude::*;

use crate::constants::MAX_REGISTERED_CLIENTS;
use crate::core::{EpochState, NodeIdentity};
use crate::error::CoordinatorProgramError;

/// One registered wallet.
#[zero_copy]
#[derive(Debug, PartialEq)]
pub struct RegisteredClient {
    /// Wallet (`signer`) and the P2P key it gave at its last join.
    pub id: NodeIdentity,
    /// Points credited at successful epoch ends (claimable 1:1 by a treasury program).
    pub earned: u64,
    /// Points lost to ejections.
    pub slashed: u64,
    /// `ClientsState::next_active` at its last join: it is pending for the next epoch while this
    /// equals `next_active`.
    pub active: u64,
}

/// Points per epoch, fixed for an epoch when its Warmup begins (`future` → `current`).
#[zero_copy]
#[derive(Debug, PartialEq, Default)]
pub struct ClientsEpochRates {
    /// Shared equally by the Healthy clients at a successful epoch end.
    pub earning_rate_total_shared: u64,
    /// Taken from each client ejected during the epoch.
    pub slashing_rate_per_client: u64,
}

#[zero_copy]
#[derive(Debug, PartialEq)]
pub struct ClientsState {
    pub clients: [RegisteredClient; MAX_REGISTERED_CLIENTS],
    pub num_clients: u64,
    /// Join generation: bumped when an epoch's training starts (and on resume), so every client
    /// must join again for each epoch.
    pub next_active: u64,
    pub current_epoch_rates: ClientsEpochRates,
    pub future_epoch_rates: ClientsEpochRates,
}

/// What `ClientsState::register` did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Registration {
    /// Already registered: P2P key refreshed, marked pending.
    Rejoined { index: usize },
    /// Appended.
    Added { index: usize },
    /// The list was full; a stale entry without points (its previous wallet shown) was replaced.
    Replaced { index: usize, previous: RegisteredClient },
}

impl ClientsState {
    pub fn clients(&self) -> &[RegisteredClient] {
        &self.clients[..(self.num_clients as usize).min(MAX_REGISTERED_CLIENTS)]
    }

    pub fn clients_mut(&mut self) -> &mut [RegisteredClient] {
        let n = (self.num_clients as usize).min(MAX_REGISTERED_CLIENTS);
        &mut self.clients[..n]
    }

    /// Index of the registered wallet `signer`.
    pub fn find_signer(&self, signer: &[u8; 32]) -> Option<usize> {
        self.clients().iter().position(|c| c.id.signer == *signer)
    }

    fn is_pending(&self, c: &RegisteredClient) -> bool {
        c.active == self.next_active
    }

    /// The clients that joined for the next epoch, in registration order (the coordinator's
    /// pending list in WaitingForMembers).
    /// An iterator, not a `Vec`: the program must not allocate in proportion to the client list
    /// (a collected list overflowed the 32 KB SBF heap at the 129th pending join).
    pub fn pending(&self) -> impl Iterator<Item = NodeIdentity> + Clone + '_ {
        self.clients().iter().filter(|c| self.is_pending(c)).map(|c| c.id)
    }

    /// Registers `id` as pending for the next epoch.
    ///
    /// At most `max_pending` wallets may be pending at once (the run's `global_batch_size_end`:
    /// a client beyond it could never get a batch). When the list is full, an entry is reused if
    /// its wallet is stale: it joined neither the current epoch nor the next one
    /// (`active < next_active - 1`), is not in `epoch`'s clients, and holds no points
    /// (`earned <= slashed`). The stalest such entry (lowest `active`, then lowest index) is
    /// replaced. An entry with points is never reused: the list is the ledger a treasury pays
    /// from, and this program cannot tell whether they were paid (docs/rewards.md, "Points stay
    /// in the list"). So a run where 256 wallets hold points takes no new wallet
    /// (`ClientsFull`); the reference refused every new wallet once 256 had ever joined.
    ///
    /// One P2P key, one wallet (docs/protocol.md, "One P2P key per wallet"): peers attribute
    /// gossip by P2P key, so a key shared by two clients lets one wallet have another's results
    /// dropped. A key held by a *different* wallet that is pending or in `epoch`'s clients is
    /// refused (`P2PIdentityTaken`), unless the joiner proves it owns the key: `p2p_identity ==
    /// signer`, which the transaction's signature covers (the project's clients always join
    /// that way). Such a join takes the key over: the other pending holders stop being pending
    /// (their claim cannot be proven; an epoch client keeps its place until the epoch ends),
    /// so a wallet that registered someone's key first cannot lock its owner out. Re-joining
    /// with the same wallet is never a conflict with itself.
    pub fn register(
        &mut self,
        id: NodeIdentity,
        epoch: &EpochState,
        max_pending: usize,
    ) -> Result<Registration> {
        let next_active = self.next_active;
        let existing = self.find_signer(&id.signer);
        let already_pending = existing.is_some_and(|i| self.is_pending(&self.clients()[i]));
        let proven = id.p2p_identity == id.signer;
        let rival = |c: &RegisteredClient| self.is_pending(c) && holds_key_of_another(&id, &c.id);
        if !already_pending {
            let pending = self.clients().iter().filter(|c| self.is_pending(c)).count();
            // Pending rivals of a proven join leave the list below, freeing their places.
            let leaving =
                if proven { self.clients().iter().filter(|c| rival(c)).count() } else { 0 };
            require!(
                pending - leaving < max_pending,
                CoordinatorProgramError::MoreClientsThanBatches
            );
        }
        if proven {
            for c in self.clients_mut() {
                if c.active == next_active && holds_key_of_another(&id, &c.id) {
                    msg!(
                        "P2P key taken over by its own wallet: {} is no longer pending",
                        Pubkey::new_from_array(c.id.signer)
                    );
                    // As if it had last joined the generation before: not pending, not stale.
                    c.active = next_active
                        .checked_sub(1)
                        .ok_or(CoordinatorProgramError::ArithmeticOverflow)?;
                }
            }
        } else {
            let taken = self.clients().iter().any(rival)
                || epoch.clients().iter().any(|c| holds_key_of_another(&id, &c.id));
            require!(!taken, CoordinatorProgramError::P2PIdentityTaken);
        }
        if let Some(index) = existing {
            let client = &mut self.clients_mut()[index];
            client.id = id;
            client.active = next_active;
            return Ok(Registration::Rejoined { index });
        }
        let fresh = RegisteredClient { id, earned: 0, slashed: 0, active: next_active };
        let n = self.clients().len();
        if n < MAX_REGISTERED_CLIENTS {
            self.clients[n] = fresh;
            self.num_clients =
                (n as u64).checked_add(1).ok_or(CoordinatorProgramError::ArithmeticOverflow)?;
            return Ok(Registration::Added { index: n });
        }
        let stale_below = next_active.saturating_sub(1);
        let index = self
            .clients()
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                c.active < stale_below
                    && c.earned <= c.slashed
                    && !epoch.clients().iter().any(|e| e.id == c.id)
            })
            .min_by_key(|(i, c)| (c.active, *i))
            .map(|(i, _)| i)
            .ok_or(CoordinatorProgramError::ClientsFull)?;
        let previous = self.clients[index];
        self.clients[index] = fresh;
        Ok(Registration::Replaced { index, previous })
    }
}

/// Whether `other` is a different wallet that uses `id`'s P2P key.
fn holds_key_of_another(id: &NodeIdentity, other: &NodeIdentity) -> bool {
    other.p2p_identity == id.p2p_identity && other.signer != id.signer
}
