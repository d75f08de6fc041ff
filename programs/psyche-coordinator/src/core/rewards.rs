//! Points per epoch (`client/psyche/coordinator/rewards.py`; docs/protocol.md, "Rewards"), fixed:
//! credited only when an epoch ends successfully.
//!
//! On `EpochEnd(true)` the clients still in `epoch_state.clients` that are Healthy share
//! `earning_rate_total_shared` equally (integer division, the remainder is not paid), and every
//! `Ejected` entry of `exited_clients` costs its client `slashing_rate`. `EpochEnd(false)` and
//! plain ticks pay nothing. The program keeps the ledger by asking `earned`/`slashed` for each
//! registered client.

use super::error::TickResult;
use super::types::{ClientState, CoordinatorState, NodeIdentity};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochPoints {
    /// What each Healthy epoch client earns (0 when nothing is paid).
    pub share: u64,
    /// What each `Ejected` exit costs (0 when nothing is slashed).
    pub slashing_rate: u64,
}

/// What the epoch end `result` just returned by `state` is worth.
pub fn epoch_points(
    state: &CoordinatorState,
    result: TickResult,
    earning_rate_total_shared: u64,
    slashing_rate: u64,
) -> EpochPoints {
    if result != TickResult::EpochEnd(true) {
        return EpochPoints { share: 0, slashing_rate: 0 };
    }
    let healthy = state.epoch_state.clients().iter().filter(|c| c.is_healthy()).count() as u64;
    let share = earning_rate_total_shared.checked_div(healthy).unwrap_or(0);
    EpochPoints { share, slashing_rate }
}

impl EpochPoints {
    /// Points `who` earned: `share` if it is a Healthy epoch client.
    pub fn earned(&self, state: &CoordinatorState, who: &NodeIdentity) -> u64 {
        let healthy = state.epoch_state.clients().iter().any(|c| c.id == *who && c.is_healthy());
        if healthy {
            self.share
        } else {
            0
        }
    }

    /// Points `who` loses: `slashing_rate` per `Ejected` entry of it in `exited_clients`.
    pub fn slashed(&self, state: &CoordinatorState, who: &NodeIdentity) -> u64 {
        state
            .epoch_state
            .exited_clients()
            .iter()
            .filter(|c| c.id == *who && c.state == ClientState::Ejected as u8)
            .fold(0u64, |acc, _| acc.saturating_add(self.slashing_rate))
    }
}
