//! Pins the zero-copy account's layout: its size and the offsets of the program-side fields. A
//! change here breaks every deployed run and the Python decoder, so it must be deliberate: bump
//! `COORDINATOR_ACCOUNT_VERSION`, regenerate the IDL (`scripts/idl.sh`) and the vectors
//! (`PSYCHE_WRITE_VECTORS=1 cargo test -p psyche-coordinator --test program_scenario`).
//! The core's own types are pinned by the core's tests.

use std::mem::{offset_of, size_of};

use psyche_coordinator::core::{CoordinatorState, NodeIdentity, RunMetadata};
use psyche_coordinator::{
    ClientsEpochRates, ClientsState, CoordinatorAccount, CoordinatorInstance,
    CoordinatorInstanceState, RegisteredClient,
};

#[test]
fn coordinator_account_size_is_pinned() {
    assert_eq!(size_of::<CoordinatorAccount>(), 166_200);
    // With Anchor's 8-byte discriminator: what the creator allocates.
    assert_eq!(CoordinatorAccount::SPACE, 166_208);
    assert_eq!(std::mem::align_of::<CoordinatorAccount>(), 8);
}

#[test]
fn coordinator_account_offsets_are_pinned() {
    assert_eq!(offset_of!(CoordinatorAccount, version), 0);
    assert_eq!(offset_of!(CoordinatorAccount, nonce), 8);
    assert_eq!(offset_of!(CoordinatorAccount, state), 16);

    assert_eq!(offset_of!(CoordinatorInstanceState, metadata), 0);
    assert_eq!(offset_of!(CoordinatorInstanceState, coordinator), 360);
    assert_eq!(offset_of!(CoordinatorInstanceState, clients_state), 143_504);
    assert_eq!(offset_of!(CoordinatorInstanceState, client_version), 166_080);
    assert_eq!(offset_of!(CoordinatorInstanceState, is_warmup_first_tick), 166_176);
    assert_eq!(offset_of!(CoordinatorInstanceState, is_training_first_tick), 166_177);
    assert_eq!(offset_of!(CoordinatorInstanceState, _pad), 166_178);
    assert_eq!(size_of::<CoordinatorInstanceState>(), 166_184);

    assert_eq!(size_of::<RunMetadata>(), 360);
    assert_eq!(size_of::<CoordinatorState>(), 143_144);

    assert_eq!(offset_of!(ClientsState, clients), 0);
    assert_eq!(offset_of!(ClientsState, num_clients), 22_528);
    assert_eq!(offset_of!(ClientsState, next_active), 22_536);
    assert_eq!(offset_of!(ClientsState, current_epoch_rates), 22_544);
    assert_eq!(offset_of!(ClientsState, future_epoch_rates), 22_560);
    assert_eq!(size_of::<ClientsState>(), 22_576);

    assert_eq!(offset_of!(RegisteredClient, id), 0);
    assert_eq!(offset_of!(RegisteredClient, earned), 64);
    assert_eq!(offset_of!(RegisteredClient, slashed), 72);
    assert_eq!(offset_of!(RegisteredClient, active), 80);
    assert_eq!(size_of::<RegisteredClient>(), 88);
    assert_eq!(size_of::<ClientsEpochRates>(), 16);
}

/// No implicit padding anywhere in the program-side types: the fields add up to the size
/// (the borsh reading of the IDL, which Python uses, has no padding either).
#[test]
fn program_side_types_have_no_implicit_padding() {
    assert_eq!(size_of::<RegisteredClient>(), size_of::<NodeIdentity>() + 3 * 8);
    assert_eq!(size_of::<ClientsEpochRates>(), 2 * 8);
    assert_eq!(
        size_of::<ClientsState>(),
        256 * size_of::<RegisteredClient>() + 2 * 8 + 2 * size_of::<ClientsEpochRates>()
    );
    assert_eq!(
        size_of::<CoordinatorInstanceState>(),
        size_of::<RunMetadata>()
            + size_of::<CoordinatorState>()
            + size_of::<ClientsState>()
            + 96
            + 1
            + 1
            + 6
    );
    assert_eq!(size_of::<CoordinatorAccount>(), 8 + 8 + size_of::<CoordinatorInstanceState>());
}

#[test]
fn coordinator_instance_space_fits_the_longest_run_id() {
    // discriminator, bump, three keys, borsh string of up to 32 bytes, local_run
    assert_eq!(CoordinatorInstance::SPACE, 8 + 1 + 3 * 32 + 4 + 32 + 1);
}
