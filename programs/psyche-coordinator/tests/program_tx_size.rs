//! Transactions a client or owner must be able to send fit Solana's 1232-byte packet, with a
//! compute-budget instruction, for the largest arguments: real transactions, serialized.

mod harness;

use harness::*;
use psyche_coordinator::constants::MAX_HEALTH_CHECKS_PER_INSTRUCTION;
use psyche_coordinator::core::model::{Checkpoint, GcsRepo, OptimizerDefinition};
use psyche_coordinator::core::{
    Bloom, Committee, CommitteeProof, EvalResult, FixedString280, FixedString64, HealthCheck,
    NodeIdentity, Progress, RunMetadata, WitnessMetadata, WitnessProofArg, MAX_EVALS,
};
use solana_sdk::compute_budget::ComputeBudgetInstruction;
use solana_sdk::hash::Hash;
use solana_sdk::instruction::Instruction;
use solana_sdk::packet::PACKET_DATA_SIZE;
use solana_sdk::signature::{Keypair, Signer};
use solana_sdk::transaction::Transaction;

fn run() -> Run {
    Run {
        run_id: "r".repeat(32),
        instance: psyche_coordinator::CoordinatorInstance::find_pda(&"r".repeat(32)).0,
        account: Keypair::new().pubkey(),
        authority: Keypair::new(),
        join_authority: Keypair::new(),
    }
}

/// Serialized size of a transaction paid and signed by `signer` holding a compute-unit-limit
/// instruction and `ix`.
fn tx_size(signer: &Keypair, ix: Instruction) -> usize {
    let tx = Transaction::new_signed_with_payer(
        &[ComputeBudgetInstruction::set_compute_unit_limit(1_400_000), ix],
        Some(&signer.pubkey()),
        &[signer],
        Hash::new_unique(),
    );
    bincode::serialize(&tx).unwrap().len()
}

fn full_bloom(seed: u64) -> Bloom {
    let mut b = Bloom::empty(seed);
    b.words = [u64::MAX; 48];
    b
}

#[test]
fn largest_witness_transaction_fits_a_packet() {
    let run = run();
    let user = Keypair::new();
    let proof = WitnessProofArg { position: u64::MAX, index: u64::MAX, witness: true };
    let metadata = WitnessMetadata {
        step: u32::MAX,
        tokens_per_sec: f32::MAX,
        bandwidth_per_sec: f32::MAX,
        loss: f32::MAX,
        efficiency: f32::MAX,
        evals: (0..MAX_EVALS as u8).map(|task| EvalResult { task, value: f32::MAX }).collect(),
    };
    let ix = ix_witness(&run, &user.pubkey(), proof, full_bloom(u64::MAX), full_bloom(1), metadata);
    // discriminator + proof (17) + 2 blooms (392 each) + verdict (4) + metadata (20 + 4 + 5 per
    // eval). The verdict rides on every round witness; this one's is empty, a full one is the
    // same size (two fixed u16).
    assert_eq!(ix.data.len(), 8 + 17 + 2 * 392 + 4 + 24 + 5 * MAX_EVALS);
    let size = tx_size(&user, ix);
    assert!(size <= PACKET_DATA_SIZE, "witness transaction is {size} bytes");
    // The figure docs/protocol.md quotes (Python's solders-built equivalent measures the same).
    assert_eq!(size, 1154);
}

#[test]
fn largest_warmup_witness_and_health_check_transactions_fit_a_packet() {
    let run = run();
    let user = Keypair::new();
    let proof = WitnessProofArg { position: u64::MAX, index: u64::MAX, witness: true };
    let ix = ix_warmup_witness(&run, &user.pubkey(), proof, full_bloom(2), full_bloom(3));
    assert!(tx_size(&user, ix) <= PACKET_DATA_SIZE);

    let check = HealthCheck {
        id: NodeIdentity { signer: [9; 32], p2p_identity: [8; 32] },
        proof: CommitteeProof {
            committee: Committee::Trainer,
            position: u64::MAX,
            index: u64::MAX,
        },
    };
    let ix = ix_health_check(&run, &user.pubkey(), vec![check; MAX_HEALTH_CHECKS_PER_INSTRUCTION]);
    let size = tx_size(&user, ix);
    assert!(size <= PACKET_DATA_SIZE, "health check transaction is {size} bytes");
}

/// The longest optimizer encoding (SparseLoCo, 39 bytes of fields; issue 30).
fn largest_optimizer() -> OptimizerDefinition {
    OptimizerDefinition::SparseLoCo {
        betas: [0.9, 0.95],
        weight_decay: 0.1,
        eps: 1e-8,
        clip_grad_norm: Some(1.0),
        inner_steps: 64,
        outer_lr: 0.7,
        outer_momentum: 0.9,
        topk_chunk: 64,
        topk: 2,
        value_bits: 2,
        error_decay: 0.95,
    }
}

/// The owner can set config, model and progress in one `update`, and metadata in another
/// (all four together do not fit: `psyche-solana-client update-config` sends two).
#[test]
fn largest_update_transactions_fit_a_packet() {
    let run = run();
    let authority = run.authority.insecure_clone();
    let config = tiny_config();
    let progress = Progress::new(u16::MAX, u32::MAX, u64::MAX);
    let ix = ix_update(
        &run,
        &authority.pubkey(),
        None,
        Some(config),
        Some(largest_model(largest_optimizer())),
        Some(progress),
    );
    let size = tx_size(&authority, ix);
    assert!(size <= PACKET_DATA_SIZE, "config+model+progress update is {size} bytes");
    println!("largest update (SparseLoCo model): {size} of {PACKET_DATA_SIZE} bytes");

    let metadata = RunMetadata {
        name: FixedString64::new(&"n".repeat(64)).unwrap(),
        description: FixedString280::new(&"d".repeat(280)).unwrap(),
        num_parameters: u64::MAX,
        vocab_size: u64::MAX,
    };
    let ix = ix_update(&run, &authority.pubkey(), Some(metadata), None, None, None);
    assert!(tx_size(&authority, ix) <= PACKET_DATA_SIZE);

    let ix = ix_checkpoint(
        &run,
        &authority.pubkey(),
        Checkpoint::P2PGcs(GcsRepo { bucket: "b".repeat(64), prefix: Some("p".repeat(64)) }),
    );
    assert!(tx_size(&authority, ix) <= PACKET_DATA_SIZE);
}

/// The largest peer record (4 addresses of 128 bytes) in one `set_peer_addrs`, paid by the
/// publishing wallet as the client sends it.
#[test]
fn largest_set_peer_addrs_transaction_fits_a_packet() {
    use psyche_coordinator::constants::{MAX_PEER_ADDRS, MAX_PEER_ADDR_LEN};
    let run = run();
    let user = Keypair::new();
    let addrs: Vec<String> = (0..MAX_PEER_ADDRS)
        .map(|i| format!("/dns/{i}{}", "x".repeat(usize::from(MAX_PEER_ADDR_LEN) - 6)))
        .collect();
    let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let ix = ix_set_peer_addrs(run.instance, &user.pubkey(), &addrs);
    // discriminator + vec length + 4 × (string length + 128 bytes)
    assert_eq!(ix.data.len(), 8 + 4 + 4 * (4 + 128));
    let size = tx_size(&user, ix);
    assert!(size <= PACKET_DATA_SIZE, "set_peer_addrs transaction is {size} bytes");
    assert_eq!(size, 850);
}
