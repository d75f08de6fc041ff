//! Core behaviour the shared vectors do not reach: config/model/progress checks (in Python's
//! rule order), epoch points, initialization and malformed input.

mod common;

use common::json::{boxed_state_from_json, hex_encode, state_to_json};
use psyche_coordinator::core::*;
use serde_json::Value;

fn scenario(name: &str) -> Value {
    common::read_json(&common::vectors_dir("coordinator").join(format!("{name}.json")))
}

fn valid_config() -> CoordinatorConfig {
    let doc = scenario("checkpoint_elected_ends_cooldown");
    common::json::config_from_json(&doc["initial"]["config"]).unwrap()
}

#[test]
fn config_check_reports_rules_in_python_order() {
    let ok = valid_config();
    ok.check().unwrap();
    // Each mutation breaks one rule (and only rules after the ones it keeps): the message
    // names the first broken one, as Python's `CoordinatorConfig.check` does.
    type Edit = fn(&mut CoordinatorConfig);
    let cases: [(Edit, &str); 17] = [
        (|c| c.epoch_time = 0, "config.epoch_time"),
        (|c| c.warmup_time = c.epoch_time, "config.warmup_time"),
        (|c| c.max_round_train_time = 0, "config.max_round_train_time must be greater"),
        (|c| c.max_round_train_time = c.epoch_time, "config.max_round_train_time must be less"),
        (|c| c.round_witness_time = 0, "config.round_witness_time"),
        (|c| c.min_clients = 0, "config.min_clients"),
        (|c| c.init_min_clients = c.min_clients - 1, "config.init_min_clients must be at least"),
        (|c| c.init_min_clients = 257, "config.init_min_clients must be at most"),
        (|c| c.global_batch_size_start = 0, "config.global_batch_size_start"),
        (|c| c.global_batch_size_end = 0, "config.global_batch_size_end must be greater"),
        (|c| c.global_batch_size_end = c.global_batch_size_start - 1, "must be at least global"),
        (|c| c.total_steps = 0, "config.total_steps"),
        (|c| c.witness_nodes = c.min_clients + 1, "config.witness_nodes must be at most min"),
        (
            |c| {
                c.min_clients = 40;
                c.init_min_clients = 40;
                c.witness_nodes = 33;
            },
            "config.witness_nodes must be at most 32",
        ),
        (|c| c.cooldown_time = 0, "config.cooldown_time"),
        (|c| c.waiting_for_members_extra_time = 0, "config.waiting_for_members_extra_time"),
        (|c| c.verification_percent = 101, "config.verification_percent must be at most 100"),
    ];
    for (edit, want) in cases {
        let mut c = ok;
        edit(&mut c);
        let err = c.check().unwrap_err();
        assert!(err.contains(want), "{err:?} should mention {want:?}");
    }
    assert!(Progress::new(0, 1, 0).check().is_ok());
    assert!(Progress::new(0, 0, 0).check().is_err());
}

#[test]
fn model_checks() {
    let doc = scenario("checkpoint_elected_ends_cooldown");
    let model = common::json::model_from_json(&doc["initial"]["model"]).unwrap();
    model.check().unwrap();
    let mut config = valid_config(); // epoch 12, warmup 10, max_round_train 10: limit 0
    model.check_cold_start_warmup_steps(&config).unwrap();
    let mut cold = model.clone();
    let Model::LLM(l) = &mut cold;
    l.cold_start_warmup_steps = 1;
    assert!(cold.check_cold_start_warmup_steps(&config).is_err());
    config.epoch_time = 30; // (30 - 10) / 10 = 2
    cold.check_cold_start_warmup_steps(&config).unwrap();
    config.max_round_train_time = 0; // Python divides by zero: rejected here
    assert!(cold.check_cold_start_warmup_steps(&config).is_err());

    let broken: [fn(&mut model::LLM); 5] = [
        |l| l.max_seq_len = 0,
        |l| l.checkpoint = Checkpoint::Ephemeral,
        |l| l.data_location = model::DataLocation::Server(String::new()),
        |l| l.optimizer = model::OptimizerDefinition::Dummy,
        |l| {
            l.checkpoint =
                Checkpoint::Hub(model::HubRepo { repo_id: String::new(), revision: None })
        },
    ];
    for edit in broken {
        let mut m = model.clone();
        let Model::LLM(l) = &mut m;
        edit(l);
        assert!(m.check().is_err(), "{m:?}");
    }
}

#[test]
fn epoch_points_match_python() {
    // The Python values come from psyche.coordinator.rewards.epoch_points on this same state
    // (client 1 ejected and exited, client 2 withdrawn, total 1000, slashing 7).
    let doc = scenario("checkpoint_elected_ends_cooldown");
    let mut obj = doc["initial"].clone();
    let es = obj["epoch_state"].as_object_mut().unwrap();
    let mut c = es["clients"].as_array_mut().unwrap().remove(1);
    c["state"] = "Ejected".into();
    c["exited_index"] = 1.into();
    c["exited_height"] = 3.into();
    es["exited_clients"].as_array_mut().unwrap().push(c);
    es["clients"][1]["state"] = "Withdrawn".into();
    let s = boxed_state_from_json(&obj).unwrap();

    let points = epoch_points(&s, TickResult::EpochEnd(true), 1000, 7);
    let mut earned = Vec::new();
    let mut slashed = Vec::new();
    let everyone = s.epoch_state.clients().iter().chain(s.epoch_state.exited_clients());
    for c in everyone {
        let tag = hex_encode(&c.id.signer[..4]);
        if points.earned(&s, &c.id) > 0 {
            earned.push((tag.clone(), points.earned(&s, &c.id)));
        }
        if points.slashed(&s, &c.id) > 0 {
            slashed.push((tag, points.slashed(&s, &c.id)));
        }
    }
    let want: Vec<(String, u64)> = ["f1cb2129", "22fa912f", "ee1bdc44", "1ff21881"]
        .iter()
        .map(|t| (t.to_string(), 250))
        .collect();
    assert_eq!(earned, want);
    assert_eq!(slashed, vec![("497ef30e".to_string(), 7)]);
    for result in [TickResult::EpochEnd(false), TickResult::Ticked] {
        let p = epoch_points(&s, result, 1000, 7);
        assert!(s.epoch_state.clients().iter().all(|c| p.earned(&s, &c.id) == 0));
        assert!(s.epoch_state.exited_clients().iter().all(|c| p.slashed(&s, &c.id) == 0));
    }
}

#[test]
fn checkpointer_election_and_is_checkpointer_agree() {
    let doc = scenario("checkpoint_elected_ends_cooldown");
    let s = boxed_state_from_json(&doc["initial"]).unwrap();
    let elected = s.checkpointer_indices();
    assert_eq!(elected.len(), 2); // max(1, 6 / 3)
    assert!(elected.contains(&5)); // the vector's accepted checkpointer
    for i in 0..8 {
        assert_eq!(s.is_checkpointer(i), elected.contains(&i), "{i}");
    }
}

#[test]
fn initialize_matches_python_defaults() {
    let mut s: Box<CoordinatorState> = bytemuck::zeroed_box();
    s.epoch_state.num_clients = 3;
    s.initialize(FixedString32::new("run").unwrap());
    let j = state_to_json(&s);
    assert_eq!(j["run_id"], "run");
    assert_eq!(j["run_state"], "Uninitialized");
    assert_eq!(j["progress"]["step"], 1);
    assert_eq!(j["epoch_state"]["first_round"], true);
    assert_eq!(j["epoch_state"]["clients"], Value::Array(vec![]));
    assert_eq!(s.tick(None, 5, 5), Err(CoordinatorError::Halted));
    s.resume(5).unwrap();
    assert_eq!(s.state(), RunState::Finished); // total_steps 0: nothing to do
}

#[test]
fn malformed_input_is_rejected_without_panicking() {
    let doc = scenario("checkpoint_elected_ends_cooldown");
    let mut s = boxed_state_from_json(&doc["initial"]).unwrap();
    let before = bytemuck::bytes_of(&*s).to_vec();
    let id = s.epoch_state.clients()[5].id;
    let long = Checkpoint::Hub(model::HubRepo { repo_id: "x".repeat(65), revision: None });
    assert_eq!(s.checkpoint(&id, 5, &long, 1_000_027), Err(CoordinatorError::InvalidCheckpoint));
    assert_eq!(s.checkpoint(&id, u64::MAX, &long, 1), Err(CoordinatorError::InvalidCommitteeProof));
    assert_eq!(s.withdraw(u64::MAX), Err(CoordinatorError::InvalidWithdraw));
    let w = Witness {
        proof: WitnessProof::new(u64::MAX, u64::MAX, true, Verdict::default()),
        participant_bloom: Bloom::empty(0),
        broadcast_bloom: Bloom::empty(0),
    };
    assert_eq!(s.witness(&id, &w, 1), Err(CoordinatorError::InvalidRunState));
    assert_eq!(s.warmup_witness(&id, &w, 1, 1), Err(CoordinatorError::InvalidRunState));
    let check = HealthCheck {
        id,
        proof: CommitteeProof {
            committee: Committee::Trainer,
            position: u64::MAX,
            index: u64::MAX,
        },
    };
    assert_eq!(s.health_check(&id, &[check]), Err(CoordinatorError::InvalidCommitteeProof));
    assert_eq!(bytemuck::bytes_of(&*s), before.as_slice());
    // A corrupted tag or head reads as halted / wraps instead of panicking.
    s.run_state = 200;
    assert_eq!(s.tick(None, 1, 1), Err(CoordinatorError::Halted));
    s.epoch_state.rounds_head = 77;
    let _ = s.current_round();
}

#[test]
fn lost_work_queue_bounds_and_corrupted_counts() {
    let doc = scenario("lost_work_carried_into_next_epoch");
    let mut s = boxed_state_from_json(&doc["initial"]).unwrap();
    assert!(s.epoch_state.lost().is_empty());
    let mut queue = Vec::new();
    for i in 0..70u64 {
        if s.epoch_state.push_lost(data_selection::BatchId { start: i, end: i }) {
            queue.push(i);
        }
    }
    assert_eq!(queue.len(), MAX_LOST_BATCHES);
    s.epoch_state.pop_lost(3);
    assert_eq!(s.epoch_state.lost()[0].start, 3);
    assert_eq!(s.epoch_state.lost().len(), MAX_LOST_BATCHES - 3);
    // The freed tail is zero, so stale bytes never linger.
    assert_eq!(s.epoch_state.lost[MAX_LOST_BATCHES - 1], BatchIdPod { start: 0, end: 0 });
    // Counts past the arrays and malformed intervals are clamped, never a panic.
    s.epoch_state.num_lost = u32::MAX;
    assert_eq!(s.epoch_state.lost().len(), MAX_LOST_BATCHES);
    s.epoch_state.pop_lost(usize::MAX);
    assert!(s.epoch_state.lost().is_empty());
    let head = s.epoch_state.head();
    let rnd = &mut s.epoch_state.rounds[head];
    rnd.num_retries = u8::MAX;
    rnd.retries[0] = BatchIdPod { start: 9, end: 2 };
    assert_eq!(rnd.retries().len(), MAX_ROUND_RETRIES);
    let rnd = *s.current_round();
    let _ = s.fresh_size(&rnd);
    if let Some(slots) = s.round_slots(&rnd) {
        for i in 0..8 {
            let _ = slots.interval(i);
        }
    }
}
