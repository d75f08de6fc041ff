//! `PeerRecord`: where one wallet's P2P node can be dialed, published per run (docs/solana.md,
//! "Programs"; design: docs/architecture.md, "Peer discovery on Solana", option A).

use anchor_lang::prelude::*;

use crate::constants::{MAX_PEER_ADDRS, MAX_PEER_ADDR_LEN, PEER_RECORD_SEEDS_PREFIX};

/// PDA `["peer", coordinator_instance, signer]`: the libp2p multiaddrs `signer` publishes for
/// the run of `coordinator_instance`. Written only by `signer` (`set_peer_addrs`), closed only
/// by it (`close_peer_record`). The program does not check that the signer is a client of the
/// run: readers look up the records of the run's epoch clients only, so a non-member's record
/// is never read (and costs its owner the rent).
///
/// An ordinary borsh account allocated at `SPACE` for the longest content: an overwrite with
/// fewer or shorter addresses leaves the old bytes after the borsh value, which readers ignore.
#[account]
#[derive(Debug, PartialEq, Eq)]
pub struct PeerRecord {
    /// The run's `CoordinatorInstance` (second seed; kept so the record can be closed after the
    /// run is freed).
    pub coordinator_instance: Pubkey,
    /// The wallet that publishes (third seed).
    pub signer: Pubkey,
    pub bump: u8,
    /// Cluster `unix_timestamp` of the last `set_peer_addrs`.
    pub updated_at: i64,
    /// Cluster slot of the last `set_peer_addrs`.
    pub updated_slot: u64,
    /// 0 to `MAX_PEER_ADDRS` multiaddrs, each 1 to `MAX_PEER_ADDR_LEN` bytes of printable ASCII
    /// starting with `/` (`core::check_peer_addrs`). Empty: no address right now.
    pub addrs: Vec<String>,
}

impl PeerRecord {
    /// Account size (discriminator included) for `MAX_PEER_ADDRS` addresses of
    /// `MAX_PEER_ADDR_LEN` bytes: 8 + 32 + 32 + 1 + 8 + 8 + 4 + 4 × (4 + 128) = 621 bytes. Its
    /// rent-exempt deposit is (128 + 621) × 6960 = 5,213,040 lamports (≈ 0.0052 SOL at the
    /// default rent), paid by the signer on the first `set_peer_addrs` and returned by
    /// `close_peer_record`.
    pub const SPACE: usize =
        8 + 32 + 32 + 1 + 8 + 8 + 4 + MAX_PEER_ADDRS as usize * (4 + MAX_PEER_ADDR_LEN as usize);

    pub fn find_pda(coordinator_instance: &Pubkey, signer: &Pubkey) -> (Pubkey, u8) {
        Pubkey::find_program_address(
            &[PEER_RECORD_SEEDS_PREFIX, coordinator_instance.as_ref(), signer.as_ref()],
            &crate::ID,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_fits_the_largest_record() {
        let largest = PeerRecord {
            coordinator_instance: Pubkey::new_unique(),
            signer: Pubkey::new_unique(),
            bump: 255,
            updated_at: i64::MIN,
            updated_slot: u64::MAX,
            addrs: vec!["/".repeat(MAX_PEER_ADDR_LEN as usize); MAX_PEER_ADDRS as usize],
        };
        let mut data = Vec::new();
        largest.try_serialize(&mut data).unwrap();
        assert_eq!(data.len(), PeerRecord::SPACE);
        assert_eq!(PeerRecord::SPACE, 621);
    }
}
