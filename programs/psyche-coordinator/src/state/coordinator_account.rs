//! `CoordinatorAccount`: the run's whole state, zero-copy (docs/solana.md), and the program-side
//! logic around the core: the pending list, the seed, epoch rates, join generations and points.

use anchor_lang::prelude::*;

use crate::constants::COORDINATOR_ACCOUNT_VERSION;
use crate::core::{
    epoch_points, CoordinatorState, FixedString96, NodeIdentity, RunMetadata, RunState, TickResult,
};
use crate::error::CoordinatorProgramError;
use crate::state::ClientsState;

/// Everything a run stores. Layout: `repr(C)`, explicit padding only (pinned by
/// `tests/program_layout.rs`).
#[zero_copy]
#[derive(Debug, PartialEq)]
pub struct CoordinatorInstanceState {
    pub metadata: RunMetadata,
    pub coordinator: CoordinatorState,
    pub clients_state: ClientsState,
    pub client_version: FixedString96,
    /// 0/1: set in WaitingForMembers, cleared once the new epoch's rates are fixed (Warmup).
    pub is_warmup_first_tick: u8,
    /// 0/1: set in WaitingForMembers, cleared once training starts (`next_active` bumped).
    pub is_training_first_tick: u8,
    pub _pad: [u8; 6],
}

/// The zero-copy account. Created by the run's creator with `system_program::create_account`
/// (owner = this program, `SPACE` bytes) in the same transaction as `init_coordinator`.
#[account(zero_copy)]
#[derive(Debug, PartialEq)]
pub struct CoordinatorAccount {
    /// `COORDINATOR_ACCOUNT_VERSION`.
    pub version: u64,
    /// Bumped by every instruction that changes the state (all but `init_coordinator` and
    /// `free_coordinator`); subscribers accept a snapshot only if its nonce grew.
    pub nonce: u64,
    pub state: CoordinatorInstanceState,
}

impl CoordinatorAccount {
    /// Account size, discriminator included.
    pub const SPACE: usize = 8 + core::mem::size_of::<CoordinatorAccount>();

    /// Fails unless the account has the layout this program knows.
    pub fn check_version(&self) -> Result<()> {
        require_eq!(
            self.version,
            COORDINATOR_ACCOUNT_VERSION,
            CoordinatorProgramError::CoordinatorAccountVersionMismatch
        );
        Ok(())
    }

    pub fn bump_nonce(&mut self) -> Result<()> {
        self.nonce =
            self.nonce.checked_add(1).ok_or(CoordinatorProgramError::ArithmeticOverflow)?;
        Ok(())
    }
}

/// The clock as the core wants it: unix seconds as u64 (a negative time is refused).
pub fn unix_now(clock: &Clock) -> Result<u64> {
    u64::try_from(clock.unix_timestamp).map_err(|_| error!(CoordinatorProgramError::InvalidClock))
}

/// The round seed: the first 8 bytes (LE) of `sha256(unix_timestamp i64 LE ‖ slot u64 LE)`, as the
/// reference derives it. A ticker can choose its slot and so grind the seed a little
/// (docs/protocol.md, "Known flaws of the reference", flaw 8); nothing better is available on chain
/// without an oracle.
pub fn random_seed(clock: &Clock) -> u64 {
    let digest = solana_sha256_hasher::hashv(&[
        &clock.unix_timestamp.to_le_bytes(),
        &clock.slot.to_le_bytes(),
    ])
    .to_bytes();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

impl CoordinatorInstanceState {
    pub fn run_state(&self) -> RunState {
        self.coordinator.state()
    }

    /// The registered identity of `signer`, or `SignerNotAClient`.
    pub fn registered_id(&self, signer: &Pubkey) -> Result<NodeIdentity> {
        let index = self
            .clients_state
            .find_signer(&signer.to_bytes())
            .ok_or(CoordinatorProgramError::SignerNotAClient)?;
        Ok(self.clients_state.clients()[index].id)
    }

    /// Runs the core's `tick` at `clock` and the program's bookkeeping around it. In
    /// WaitingForMembers the pending list is the clients that joined for the next epoch.
    pub fn tick(&mut self, clock: &Clock) -> Result<()> {
        let now = unix_now(clock)?;
        let waiting = self.run_state() == RunState::WaitingForMembers;
        if waiting {
            self.is_warmup_first_tick = 1;
            self.is_training_first_tick = 1;
        }
        let pending = waiting.then(|| self.clients_state.pending());
        let result = self
            .coordinator
            .tick_with(pending, now, random_seed(clock))
            .map_err(CoordinatorProgramError::from)?;
        self.after_transition(result)
    }

    /// Bookkeeping after any core call that can change phase (`tick`, `checkpoint`):
    /// - the first time the run is seen in Warmup, the epoch's rates are fixed;
    /// - the first time the run is seen training in an epoch, `next_active` is bumped, so the
    ///   clients pending for this epoch must join again for the next one;
    /// - at an epoch end, points are credited (docs/protocol.md, "Rewards": only successful epochs
    ///   pay).
    pub fn after_transition(&mut self, result: TickResult) -> Result<()> {
        match result {
            TickResult::Ticked => {
                let es = &self.coordinator.epoch_state;
                let first_round = es.first_round != 0;
                match self.run_state() {
                    RunState::Warmup if first_round && self.is_warmup_first_tick != 0 => {
                        self.clients_state.current_epoch_rates =
                            self.clients_state.future_epoch_rates;
                        self.is_warmup_first_tick = 0;
                    }
                    RunState::RoundTrain | RunState::RoundWitness
                        if first_round && self.is_training_first_tick != 0 =>
                    {
                        self.clients_state.next_active = self
                            .clients_state
                            .next_active
                            .checked_add(1)
                            .ok_or(CoordinatorProgramError::ArithmeticOverflow)?;
                        self.is_training_first_tick = 0;
                    }
                    _ => {}
                }
                Ok(())
            }
            TickResult::EpochEnd(_) => self.credit_epoch_points(result),
        }
    }

    fn credit_epoch_points(&mut self, result: TickResult) -> Result<()> {
        let rates = self.clients_state.current_epoch_rates;
        let points = epoch_points(
            &self.coordinator,
            result,
            rates.earning_rate_total_shared,
            rates.slashing_rate_per_client,
        );
        if points.share == 0 && points.slashing_rate == 0 {
            return Ok(());
        }
        let es = &self.coordinator.epoch_state;
        let registered = self.clients_state.clients_mut();
        if points.share > 0 {
            // The epoch's clients were taken from the pending list in registration order and
            // only ever leave it, so they are a subsequence of `registered`: one merge pass
            // (O(n), not O(n²) — this runs within one transaction's compute budget).
            let mut epoch_clients = es.clients().iter().peekable();
            for client in registered.iter_mut() {
                let Some(next) = epoch_clients.peek() else { break };
                if next.id == client.id {
                    if next.is_healthy() {
                        client.earned = client
                            .earned
                            .checked_add(points.share)
                            .ok_or(CoordinatorProgramError::ArithmeticOverflow)?;
                    }
                    epoch_clients.next();
                }
            }
            // Defensive: should the order ever differ, credit the rest by lookup.
            for rest in epoch_clients.filter(|c| c.is_healthy()) {
                if let Some(client) = registered.iter_mut().find(|c| c.id == rest.id) {
                    client.earned = client
                        .earned
                        .checked_add(points.share)
                        .ok_or(CoordinatorProgramError::ArithmeticOverflow)?;
                }
            }
        }
        if points.slashing_rate > 0 {
            // Ejections are rare: look each one up.
            for exited in es.exited_clients() {
                if exited.state != crate::core::ClientState::Ejected as u8 {
                    continue;
                }
                if let Some(client) = registered.iter_mut().find(|c| c.id == exited.id) {
                    client.slashed = client
                        .slashed
                        .checked_add(points.slashing_rate)
                        .ok_or(CoordinatorProgramError::ArithmeticOverflow)?;
                }
            }
        }
        Ok(())
    }
}
