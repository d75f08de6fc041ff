//! `update` through the real runtime refuses the models that used to be stored and then made
//! every client fail at load (issue 12, finding 5): the rules themselves are pinned against
//! Python by `vectors_config.rs`; this checks that the instruction applies them and stores nothing
//! when it refuses. Infinities reach `Model::check`; a NaN never does, because borsh refuses to
//! decode one (the argument fails to deserialize), which this pins too, since it is why a NaN can
//! never reach `ModelBlob::store` (whose borsh encoder would panic on it).

mod harness;

use anchor_lang::error::ErrorCode as AnchorError;
use harness::*;
use psyche_coordinator::core::model::{DataLocation, LearningRateSchedule, OptimizerDefinition};
use psyche_coordinator::core::Model;
use psyche_coordinator::error::CoordinatorProgramError as E;
use solana_sdk::signature::Signer;

fn with_distro(edit: impl Fn(&mut OptimizerDefinition)) -> Model {
    let mut model = tiny_model();
    edit(&mut model.llm_mut().optimizer);
    model
}

fn set_decay(x: f32) -> impl Fn(&mut OptimizerDefinition) {
    move |o| {
        if let OptimizerDefinition::Distro { compression_decay, .. } = o {
            *compression_decay = x;
        }
    }
}

fn set_clip(x: f32) -> impl Fn(&mut OptimizerDefinition) {
    move |o| {
        if let OptimizerDefinition::Distro { clip_grad_norm, .. } = o {
            *clip_grad_norm = Some(x);
        }
    }
}

fn with_lr(edit: impl Fn(&mut f64, &mut u32)) -> Model {
    let mut model = tiny_model();
    if let LearningRateSchedule::Cosine { base_lr, total_steps, .. } =
        &mut model.llm_mut().lr_schedule
    {
        edit(base_lr, total_steps);
    }
    model
}

fn with_server(address: &str) -> Model {
    let mut model = tiny_model();
    model.llm_mut().data_location = DataLocation::Server(address.into());
    model
}

#[tokio::test]
async fn update_refuses_models_every_client_would_fail_to_load() {
    let mut env = Env::new().await;
    let run = env.create_run("rules").await;
    let bad = [
        with_distro(set_decay(1.5)),
        with_distro(set_decay(f32::INFINITY)),
        with_distro(set_clip(f32::NEG_INFINITY)),
        with_distro(set_clip(0.0)),
        with_lr(|lr, _| *lr = -1.0),
        with_lr(|lr, _| *lr = f64::INFINITY),
        with_lr(|_, steps| *steps = 0),
        with_server("nonsense"),
        with_server("127.0.0.1:0"),
        with_server("127.0.0.1:65536"),
    ];
    for model in bad {
        let ix = ix_update(
            &run,
            &run.authority.pubkey(),
            None,
            Some(tiny_config()),
            Some(model.clone()),
            None,
        );
        assert_err(env.send(ix, &[&run.authority]).await, E::ModelSanityCheckFailed);
    }
    // NaN: built with a marker value, whose bytes are then overwritten (borsh cannot encode NaN).
    let nan_cases: [(Model, Vec<u8>, Vec<u8>); 3] = [
        (
            with_distro(set_decay(0.4375)),
            0.4375f32.to_le_bytes().into(),
            f32::NAN.to_le_bytes().into(),
        ),
        (
            with_distro(set_clip(0.4375)),
            0.4375f32.to_le_bytes().into(),
            f32::NAN.to_le_bytes().into(),
        ),
        (
            with_lr(|lr, _| *lr = 0.4375),
            0.4375f64.to_le_bytes().into(),
            f64::NAN.to_le_bytes().into(),
        ),
    ];
    for (model, marker, nan) in nan_cases {
        let mut ix =
            ix_update(&run, &run.authority.pubkey(), None, Some(tiny_config()), Some(model), None);
        let at = ix.data.windows(marker.len()).position(|w| w == marker).expect("marker");
        assert_eq!(ix.data.windows(marker.len()).filter(|w| *w == marker).count(), 1);
        ix.data[at..at + nan.len()].copy_from_slice(&nan);
        let got = custom_code(env.send(ix, &[&run.authority]).await);
        assert_eq!(got, anchor_code(AnchorError::InstructionDidNotDeserialize));
    }
    let account = env.coordinator(&run).await;
    assert_eq!(account.nonce, 0, "a refused update stores nothing");
    assert_eq!(account.state.coordinator.model.load(), None);

    // The edges stay valid: decay 0 and 1, a learning rate of 0, one LR step, port 65535.
    let good = [
        with_distro(set_decay(0.0)),
        with_distro(set_decay(1.0)),
        with_lr(|lr, steps| (*lr, *steps) = (0.0, 1)),
        with_server("[::1]:65535"),
    ];
    for (i, model) in good.into_iter().enumerate() {
        let ix = ix_update(
            &run,
            &run.authority.pubkey(),
            None,
            Some(tiny_config()),
            Some(model.clone()),
            None,
        );
        env.send(ix, &[&run.authority]).await.unwrap_or_else(|e| panic!("good model {i}: {e:?}"));
        assert_eq!(env.coordinator(&run).await.state.coordinator.model.load(), Some(model));
    }
}

fn sparseloco(inner_steps: u8, topk: u16, value_bits: u8) -> Model {
    let mut model = tiny_model();
    model.llm_mut().optimizer = OptimizerDefinition::SparseLoCo {
        betas: [0.9, 0.95],
        weight_decay: 0.1,
        eps: 1e-8,
        clip_grad_norm: Some(1.0),
        inner_steps,
        outer_lr: 0.7,
        outer_momentum: 0.0,
        topk_chunk: 64,
        topk,
        value_bits,
        error_decay: 0.95,
    };
    model
}

/// Issue 30: the deployed program stores a SparseLoCo model (borsh tag 3 in the model blob) and
/// refuses one that breaks its rules, storing nothing.
#[tokio::test]
async fn update_stores_a_sparseloco_model_and_refuses_a_bad_one() {
    let mut env = Env::new().await;
    let run = env.create_run("sparseloco").await;
    for bad in
        [sparseloco(0, 2, 2), sparseloco(65, 2, 2), sparseloco(4, 65, 2), sparseloco(4, 2, 3)]
    {
        let ix =
            ix_update(&run, &run.authority.pubkey(), None, Some(tiny_config()), Some(bad), None);
        assert_err(env.send(ix, &[&run.authority]).await, E::ModelSanityCheckFailed);
    }
    assert_eq!(env.coordinator(&run).await.state.coordinator.model.load(), None);
    let good = sparseloco(64, 64, 1);
    let ix = ix_update(
        &run,
        &run.authority.pubkey(),
        None,
        Some(tiny_config()),
        Some(good.clone()),
        None,
    );
    env.send(ix, &[&run.authority]).await.expect("a valid SparseLoCo model is stored");
    assert_eq!(env.coordinator(&run).await.state.coordinator.model.load(), Some(good));
}
