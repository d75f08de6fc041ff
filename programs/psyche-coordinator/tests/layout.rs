//! Pins the byte layout of the stored types (the Python side decodes the account through the
//! IDL as borsh, so sizes and offsets are part of the contract) and the instruction argument
//! encodings that other code already assumes.

use core::mem::{offset_of, size_of};

use anchor_lang::{AnchorDeserialize, AnchorSerialize};
use psyche_coordinator::core::model::{
    DataLocation, HttpLocation, HubRepo, LLMArchitecture, LLMDataType, LearningRateSchedule,
    OptimizerDefinition, Shuffle, TokenSize, LLM, MODEL_BLOB_CAPACITY,
};
use psyche_coordinator::core::*;

#[test]
fn sizes() {
    assert_eq!(size_of::<NodeIdentity>(), 64);
    assert_eq!(size_of::<Client>(), 72);
    assert_eq!(size_of::<Bloom>(), 392);
    assert_eq!(size_of::<WitnessProof>(), 24);
    // The verdict fills what was the proof's padding: a stored witness kept its size.
    assert_eq!(offset_of!(WitnessProof, verdict), 18);
    assert_eq!(size_of::<Witness>(), 808);
    assert_eq!(size_of::<BatchIdPod>(), 16);
    assert_eq!(size_of::<Round>(), 26_016);
    assert_eq!(size_of::<CoordinatorConfig>(), 64);
    assert_eq!(size_of::<Progress>(), 16);
    assert_eq!(size_of::<ModelBlob>(), 1024);
    assert_eq!(size_of::<EpochState>(), 141_992);
    assert_eq!(size_of::<CoordinatorState>(), 143_144);
    assert_eq!(size_of::<RunMetadata>(), 360);
    assert_eq!(size_of::<FixedString32>(), 32);
    assert_eq!(size_of::<FixedString96>(), 96);
    assert_eq!(size_of::<FixedString280>(), 280);
    // 8-byte alignment keeps every u64 of the embedded state aligned inside the account.
    assert_eq!(core::mem::align_of::<CoordinatorState>(), 8);
}

#[test]
fn offsets() {
    assert_eq!(offset_of!(CoordinatorState, run_id), 0);
    assert_eq!(offset_of!(CoordinatorState, config), 32);
    assert_eq!(offset_of!(CoordinatorState, progress), 96);
    assert_eq!(offset_of!(CoordinatorState, run_state_start_unix_timestamp), 112);
    assert_eq!(offset_of!(CoordinatorState, run_state), 120);
    assert_eq!(offset_of!(CoordinatorState, pending_pause), 121);
    assert_eq!(offset_of!(CoordinatorState, model), 128);
    assert_eq!(offset_of!(CoordinatorState, epoch_state), 1152);
    assert_eq!(offset_of!(EpochState, clients), 104_064);
    assert_eq!(offset_of!(EpochState, exited_clients), 122_496);
    assert_eq!(offset_of!(EpochState, start_timestamp), 140_928);
    assert_eq!(offset_of!(EpochState, rounds_head), 140_944);
    assert_eq!(offset_of!(EpochState, first_round), 140_956);
    // The lost-work queue is last: a new epoch zeroes everything before it.
    assert_eq!(offset_of!(EpochState, num_lost), 140_960);
    assert_eq!(offset_of!(EpochState, lost), 140_968);
    assert_eq!(offset_of!(EpochState, lost) + 64 * 16, size_of::<EpochState>());
    assert_eq!(offset_of!(Round, num_witnesses), 24);
    assert_eq!(offset_of!(Round, num_retries), 28);
    assert_eq!(offset_of!(Round, witnesses), 32);
    assert_eq!(offset_of!(Round, retries), 25_888);
    assert_eq!(offset_of!(Client, exited_height), 64);
    assert_eq!(offset_of!(Client, state), 70);
    assert_eq!(offset_of!(Progress, step), 4);
    assert_eq!(offset_of!(ModelBlob, bytes), 8);
}

fn borsh<T: AnchorSerialize>(v: &T) -> Vec<u8> {
    let mut out = Vec::new();
    v.serialize(&mut out).unwrap();
    out
}

/// For the types that are both stored (Pod) and passed as arguments (borsh), the two encodings
/// must be the same bytes: that is what lets Python decode the account as borsh.
#[test]
fn pod_layout_equals_borsh() {
    let config = CoordinatorConfig {
        warmup_time: 1,
        cooldown_time: 2,
        max_round_train_time: 3,
        round_witness_time: 4,
        global_batch_size_warmup_tokens: 5,
        epoch_time: 6,
        total_steps: 7,
        init_min_clients: 8,
        min_clients: 9,
        witness_nodes: 10,
        global_batch_size_start: 11,
        global_batch_size_end: 12,
        verification_percent: 13,
        waiting_for_members_extra_time: 14,
    };
    assert_eq!(borsh(&config), bytemuck::bytes_of(&config));
    let progress = Progress::new(3, 0x0102_0304, u64::MAX - 1);
    assert_eq!(borsh(&progress), bytemuck::bytes_of(&progress));
    let id = NodeIdentity { signer: [7; 32], p2p_identity: [9; 32] };
    assert_eq!(borsh(&id), bytemuck::bytes_of(&id));
    let mut bloom = Bloom::empty(0xdead_beef);
    bloom.add(b"x");
    assert_eq!(borsh(&bloom), bytemuck::bytes_of(&bloom));
    assert_eq!(borsh(&bloom), bloom.to_bytes());
    let meta = RunMetadata {
        name: FixedString64::new("run").unwrap(),
        description: FixedString280::new("a run").unwrap(),
        num_parameters: 12,
        vocab_size: 34,
    };
    assert_eq!(borsh(&meta), bytemuck::bytes_of(&meta));
    assert_eq!(RunMetadata::try_from_slice(bytemuck::bytes_of(&meta)).unwrap(), meta);
}

/// The client's witness arguments (built from the IDL): proof (u64, u64, u8), two 392-byte
/// blooms, then the metadata (step u32, four f32, u32 count, (u8, f32) per eval).
#[test]
fn witness_argument_encoding() {
    let arg = WitnessArg {
        proof: WitnessProofArg { position: 5, index: 7, witness: true },
        participant_bloom: Bloom::empty(1),
        broadcast_bloom: Bloom::empty(2),
    };
    let bytes = borsh(&arg);
    assert_eq!(bytes.len(), 17 + 2 * 392);
    assert_eq!(&bytes[..17], &[5, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(&bytes[17..25], &1u64.to_le_bytes());
    let stored = arg.to_stored();
    assert_eq!((stored.proof.position, stored.proof.index, stored.proof.witness), (5, 7, 1));
    let meta = WitnessMetadata {
        step: 9,
        tokens_per_sec: 1.0,
        bandwidth_per_sec: 2.0,
        loss: 3.0,
        efficiency: 4.0,
        evals: vec![EvalResult { task: 1, value: 0.5 }; MAX_EVALS],
    };
    let m = borsh(&meta);
    assert_eq!(m.len(), 4 + 16 + 4 + 5 * MAX_EVALS);
    assert_eq!(&m[..4], &9u32.to_le_bytes());
    assert_eq!(&m[20..24], &(MAX_EVALS as u32).to_le_bytes());
    assert!(meta.check());
}

fn longest_model() -> Model {
    let s64 = "r".repeat(64);
    let s192 = "u".repeat(192);
    Model::LLM(LLM {
        max_seq_len: 4096,
        cold_start_warmup_steps: 10,
        architecture: LLMArchitecture::HfLlama,
        checkpoint: Checkpoint::P2P(HubRepo { repo_id: s64.clone(), revision: Some(s64.clone()) }),
        data_type: LLMDataType::Pretraining,
        data_location: DataLocation::Http {
            location: HttpLocation::Gcp { bucket_name: s64, filter_directory: s192 },
            token_size_in_bytes: TokenSize::FourBytes,
            shuffle: Shuffle::Seeded([3; 32]),
        },
        lr_schedule: LearningRateSchedule::WarmupStableDecay {
            base_lr: 1.0,
            warmup_init_lr: 0.0,
            cosine_decay_final_lr: 0.5,
            linear_decay_final_lr: 0.1,
            warmup_steps: 1,
            stable_steps: 2,
            cosine_decay_steps: 3,
            linear_decay_steps: 4,
        },
        // The longest optimizer variant (39 bytes of fields).
        optimizer: OptimizerDefinition::SparseLoCo {
            betas: [0.9, 0.95],
            weight_decay: 0.1,
            eps: 1e-8,
            clip_grad_norm: Some(1.0),
            inner_steps: 8,
            outer_lr: 0.7,
            outer_momentum: 0.0,
            topk_chunk: 64,
            topk: 2,
            value_bits: 2,
            error_decay: 0.95,
        },
    })
}

#[test]
fn longest_model_fits_the_blob() {
    let model = longest_model();
    model.check().unwrap();
    assert_eq!(model.encoded_len(), 538);
    assert!(model.encoded_len() <= MODEL_BLOB_CAPACITY);
    let mut blob: ModelBlob = bytemuck::Zeroable::zeroed();
    assert_eq!(blob.load(), None);
    assert_eq!(blob.max_seq_len(), 0);
    assert!(blob.store(&model));
    assert_eq!(blob.load(), Some(model.clone()));
    assert_eq!(blob.max_seq_len(), 4096);
    // One byte past a bound fails the check (Python's decoder refuses it).
    let mut long = model;
    let Model::LLM(l) = &mut long;
    l.checkpoint = Checkpoint::Hub(HubRepo { repo_id: "r".repeat(65), revision: None });
    assert!(long.check().is_err());
}

#[test]
fn fixed_strings() {
    assert_eq!(FixedString32::new(&"a".repeat(32)).unwrap().as_str(), Some(&*"a".repeat(32)));
    assert!(FixedString32::new(&"a".repeat(33)).is_none());
    assert!(FixedString32::new("a\0b").is_none());
    assert_eq!(FixedString32::new("").unwrap().as_str(), Some(""));
}
