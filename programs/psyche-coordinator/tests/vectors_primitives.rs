//! Replays `tests/vectors/primitives/*.json` (written by `tests/vectors/gen_primitives.py`)
//! with the Rust primitives of `core`.

mod common;

use common::json::{hex_array, hex_decode, hex_encode, u64_of};
use psyche_coordinator::core::bloom::{
    splitmix64_keys, Bloom, BLOOM_BITS, BLOOM_KEYS, BLOOM_WORDS,
};
use psyche_coordinator::core::committee::{Committee, CommitteeSelection};
use psyche_coordinator::core::data_selection::{
    assign_data_for_state, get_batch_ids_for_round, interval_for_slot, trainer_order, BatchId,
    DataSelectionError,
};
use psyche_coordinator::core::hash::sha256v;
use psyche_coordinator::core::shuffle::{compute_shuffled_index, deterministic_shuffle, Lcg};
use psyche_coordinator::core::NodeIdentity;
use serde_json::Value;

fn load(name: &str) -> Value {
    common::read_json(&common::vectors_dir("primitives").join(name))
}

fn cases<'a>(doc: &'a Value, key: &str) -> &'a Vec<Value> {
    let items = doc[key].as_array().unwrap_or_else(|| panic!("{key} is an array"));
    assert!(!items.is_empty(), "{key} is empty");
    items
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array().expect("array").iter().map(|x| u64_of(x).unwrap()).collect()
}

#[test]
fn swap_or_not() {
    let doc = load("swap_or_not.json");
    assert_eq!(doc["rounds"], 90);
    for c in cases(&doc, "cases") {
        let seed: [u8; 32] = hex_array(&c["seed"]).unwrap();
        let (n, index) = (u64_of(&c["n"]).unwrap(), u64_of(&c["index"]).unwrap());
        assert_eq!(
            compute_shuffled_index(index, n, &seed),
            Some(u64_of(&c["result"]).unwrap()),
            "{c}"
        );
    }
    for c in cases(&doc, "permutations") {
        let seed: [u8; 32] = hex_array(&c["seed"]).unwrap();
        let n = u64_of(&c["n"]).unwrap();
        let got: Vec<u64> = (0..n).map(|i| compute_shuffled_index(i, n, &seed).unwrap()).collect();
        assert_eq!(got, u64s(&c["positions"]), "{c}");
        assert_eq!(compute_shuffled_index(n, n, &seed), None);
    }
}

#[test]
fn lcg() {
    let doc = load("lcg.json");
    for c in cases(&doc, "cases") {
        let mut rng = Lcg::new(u64_of(&c["seed"]).unwrap());
        let got: Vec<u64> = (0..12).map(|_| rng.next()).collect();
        assert_eq!(got, u64s(&c["outputs"]), "{c}");
    }
}

#[test]
fn deterministic_shuffle_cases() {
    let doc = load("deterministic_shuffle.json");
    for c in cases(&doc, "cases") {
        let mut items = u64s(&c["items"]);
        deterministic_shuffle(&mut items, u64_of(&c["seed"]).unwrap());
        assert_eq!(items, u64s(&c["result"]), "{c}");
    }
}

#[test]
fn committee_selection() {
    let doc = load("committee_selection.json");
    for c in cases(&doc, "cases") {
        let g = |k: &str| u64_of(&c[k]).unwrap();
        let sel = CommitteeSelection::new(
            g("tie_breaker_nodes"),
            g("witness_nodes"),
            g("verification_percent"),
            g("total_nodes"),
            g("seed"),
        )
        .unwrap();
        assert_eq!(sel.verifier_nodes, g("verifier_nodes"));
        assert_eq!(hex_encode(&sel.committee_seed), c["committee_seed"].as_str().unwrap());
        assert_eq!(hex_encode(&sel.witness_seed), c["witness_seed"].as_str().unwrap());
        let committee = c["committee"].as_array().unwrap();
        let witness = c["witness"].as_array().unwrap();
        assert_eq!(committee.len() as u64, g("total_nodes"));
        for (i, (want_c, want_w)) in committee.iter().zip(witness).enumerate() {
            let i = i as u64;
            let got = sel.get_committee(i).unwrap();
            assert_eq!(got.committee as u64, u64_of(&want_c["committee"]).unwrap(), "{i}");
            assert_eq!(got.position, u64_of(&want_c["position"]).unwrap());
            let (pos, is_witness) = sel.get_witness(i).unwrap();
            assert_eq!(pos, u64_of(&want_w["position"]).unwrap());
            assert_eq!(is_witness, want_w["witness"].as_bool().unwrap());
        }
        assert!(sel.get_committee(g("total_nodes")).is_none());
    }
    for c in cases(&doc, "errors") {
        let g = |k: &str| u64_of(&c[k]).unwrap();
        let r = CommitteeSelection::new(
            g("tie_breaker_nodes"),
            g("witness_nodes"),
            g("verification_percent"),
            g("total_nodes"),
            0,
        );
        assert!(r.is_err(), "{c}");
    }
}

#[test]
fn data_assignment() {
    let doc = load("data_assignment.json");
    assert_eq!(doc["selection"]["tie_breaker_nodes"], 0);
    for c in cases(&doc, "cases") {
        let clients: Vec<NodeIdentity> = c["clients"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let key: [u8; 32] = hex_array(s).unwrap();
                NodeIdentity { signer: key, p2p_identity: key }
            })
            .collect();
        let seed = u64_of(&c["random_seed"]).unwrap();
        let data_index = u64_of(&c["data_index"]).unwrap();
        let batch_size = u64_of(&c["batch_size"]).unwrap();
        let retries = batch_ids(&c["retries"]);
        let sel = CommitteeSelection::new(0, 0, 0, clients.len() as u64, seed).unwrap();
        let ids = get_batch_ids_for_round(data_index, batch_size, clients.len(), &retries).unwrap();
        let got: Vec<(u64, u64)> = ids.iter().map(|b| (b.start, b.end)).collect();
        let want: Vec<(u64, u64)> = c["batch_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (u64_of(&b["start"]).unwrap(), u64_of(&b["end"]).unwrap()))
            .collect();
        assert_eq!(got, want, "{c}");
        let assignment =
            assign_data_for_state(&clients, &sel, data_index, batch_size, seed, &retries).unwrap();
        let got: Vec<(u64, u64, String)> =
            assignment.iter().map(|(b, n)| (b.start, b.end, hex_encode(&n.signer))).collect();
        let want: Vec<(u64, u64, String)> = c["assignment"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let s = a["signer"].as_str().unwrap().to_string();
                (u64_of(&a["start"]).unwrap(), u64_of(&a["end"]).unwrap(), s)
            })
            .collect();
        assert_eq!(got, want, "{c}");
        // One trainer's interval, as the program computes it for lost work, agrees.
        let order = trainer_order(clients.len(), seed);
        let mut found = 0;
        for (slot, &index) in order.iter().enumerate() {
            let mine = interval_for_slot(slot, clients.len(), data_index, batch_size, &retries);
            if let Some(b) = mine.unwrap() {
                let who = hex_encode(&clients[usize::from(index)].signer);
                assert!(want.contains(&(b.start, b.end, who)), "{c}: slot {slot}");
                found += 1;
            }
        }
        assert_eq!(found, want.len(), "{c}");
    }
    assert!(cases(&doc, "cases").iter().any(|c| !batch_ids(&c["retries"]).is_empty()));
    for e in cases(&doc, "retry_errors") {
        let n = u64_of(&e["n_clients"]).unwrap() as usize;
        let batch_size = u64_of(&e["batch_size"]).unwrap();
        let retries = batch_ids(&e["retries"]);
        assert_eq!(
            get_batch_ids_for_round(0, batch_size, n, &retries),
            Err(DataSelectionError::InvalidRetries),
            "{e}"
        );
    }
}

fn batch_ids(v: &Value) -> Vec<BatchId> {
    v.as_array()
        .expect("retries is an array")
        .iter()
        .map(|b| BatchId { start: u64_of(&b["start"]).unwrap(), end: u64_of(&b["end"]).unwrap() })
        .collect()
}

#[test]
fn bloom() {
    let doc = load("bloom.json");
    assert_eq!(u64_of(&doc["bits"]).unwrap(), BLOOM_BITS);
    assert_eq!(u64_of(&doc["words"]).unwrap() as usize, BLOOM_WORDS);
    assert_eq!(u64_of(&doc["keys"]).unwrap() as usize, BLOOM_KEYS);
    for c in cases(&doc, "cases") {
        let seed = u64_of(&c["seed"]).unwrap();
        assert_eq!(splitmix64_keys(seed).to_vec(), u64s(&c["keys"]));
        let mut f = Bloom::empty(seed);
        let items = c["items"].as_array().unwrap();
        for (item, positions) in items.iter().zip(c["positions"].as_array().unwrap()) {
            let item = hex_decode(item.as_str().unwrap()).unwrap();
            assert_eq!(f.positions(&item).to_vec(), u64s(positions));
            f.add(&item);
        }
        assert_eq!(f.words.to_vec(), u64s(&c["words"]));
        assert_eq!(hex_encode(&f.to_bytes()), c["bytes"].as_str().unwrap());
        assert_eq!(Bloom::from_bytes(&f.to_bytes()), Some(f));
        for p in c["probes"].as_array().unwrap() {
            let item = hex_decode(p["item"].as_str().unwrap()).unwrap();
            assert_eq!(f.contains(&item), p["contains"].as_bool().unwrap(), "{p}");
        }
    }
    assert_eq!(Bloom::from_bytes(&[0; 391]), None);
}

#[test]
fn sha256v_and_commitment_hashes() {
    let doc = load("commitments.json");
    for c in cases(&doc, "sha256v") {
        let parts: Vec<Vec<u8>> = c["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| hex_decode(p.as_str().unwrap()).unwrap())
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        assert_eq!(hex_encode(&sha256v(&refs)), c["digest"].as_str().unwrap(), "{c}");
    }
    // The program never signs or verifies ed25519 (Solana checks transaction signers), so only
    // the commitment layout is replayed here: the 96 bytes start with the data hash.
    for c in cases(&doc, "commitments") {
        let commitment = hex_decode(c["commitment"].as_str().unwrap()).unwrap();
        assert_eq!(commitment.len(), 96);
        assert_eq!(hex_encode(&commitment[..32]), c["data_hash"].as_str().unwrap());
    }
    let _ = Committee::Trainer;
}
