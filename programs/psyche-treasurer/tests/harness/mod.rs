//! Program-test harness of the treasurer: the treasurer, the coordinator and the authorizer in
//! the shared program-test environment (`program-test-env`: natively registered or, with
//! `PSYCHE_SBF=1`, as the SBF builds of scripts/build-sbf.sh; SPL Token is program-test's bundled
//! BPF build in both modes); instruction builders, SPL Token helpers, a coordinator epoch driver
//! and account readers.

#![allow(dead_code)]

use std::ops::{Deref, DerefMut};

use anchor_lang::solana_program::program_pack::Pack;
use anchor_lang::solana_program::system_instruction;
use anchor_lang::system_program;
use anchor_lang::{AccountDeserialize, Discriminator, InstructionData, ToAccountMetas};
use anchor_spl::token::spl_token;
use program_test_env::{native, Program, ProgramEnv};
use psyche_authorizer::Authorization;
use psyche_coordinator::constants::JOIN_RUN_AUTHORIZATION_SCOPE;
use psyche_coordinator::core::{
    Bloom, NodeIdentity, RunState, Verdict, WitnessMetadata, WitnessProofArg,
};
use psyche_coordinator::{CoordinatorAccount, CoordinatorInstance};
use psyche_treasurer::{
    Participant, ParticipantClaimParams, Run, RunCreateParams, RunUpdateParams,
};
use solana_sdk::account::AccountSharedData;
use solana_sdk::instruction::Instruction;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signer};

#[allow(unused_imports)] // not every test binary uses each
pub use program_test_env::{
    custom_code, custom_code_at, rent_exempt, sbf_mode, seeded_keypair, Measured, TxResult,
    START_SLOT, START_TIME,
};

/// Decimals of every test mint.
pub const DECIMALS: u8 = 6;

/// A run created through the treasurer (`Env::create_run`).
pub struct TRun {
    pub index: u64,
    pub run_id: String,
    /// The `Run` PDA.
    pub address: Pubkey,
    pub collateral: Pubkey,
    pub mint: Pubkey,
    pub instance: Pubkey,
    pub account: Pubkey,
    pub authority: Keypair,
    pub join_authority: Keypair,
}

impl TRun {
    /// Every address of a run, derived from `run_id` and `index`; keys seeded from the run id.
    pub fn planned(run_id: &str, index: u64, mint: Pubkey) -> Self {
        let address = Run::find_pda(index).0;
        TRun {
            index,
            run_id: run_id.to_string(),
            address,
            collateral: run_collateral_pda(&address),
            mint,
            instance: CoordinatorInstance::find_pda(run_id).0,
            account: seeded_keypair(format!("{run_id}/account").as_bytes()).pubkey(),
            authority: seeded_keypair(format!("{run_id}/authority").as_bytes()),
            join_authority: seeded_keypair(format!("{run_id}/join_authority").as_bytes()),
        }
    }

    pub fn account_keypair(&self) -> Keypair {
        seeded_keypair(format!("{}/account", self.run_id).as_bytes())
    }

    pub fn participant(&self, user: &Pubkey) -> Pubkey {
        Participant::find_pda(&self.address, user).0
    }
}

pub fn run_collateral_pda(run: &Pubkey) -> Pubkey {
    Pubkey::find_program_address(
        &[psyche_treasurer::constants::RUN_COLLATERAL_SEEDS_PREFIX, run.as_ref()],
        &psyche_treasurer::ID,
    )
    .0
}

/// A client wallet with its P2P key.
pub struct Client {
    pub wallet: Keypair,
    pub p2p: [u8; 32],
}

impl Client {
    pub fn seeded(label: &str, p2p_byte: u8) -> Self {
        Self { wallet: seeded_keypair(label.as_bytes()), p2p: [p2p_byte; 32] }
    }

    pub fn id(&self) -> NodeIdentity {
        NodeIdentity { signer: self.wallet.pubkey().to_bytes(), p2p_identity: self.p2p }
    }
}

/// The shared environment (sending, metadata, clock, reads) with the treasurer's own helpers on
/// top.
pub struct Env(ProgramEnv);

impl Deref for Env {
    type Target = ProgramEnv;
    fn deref(&self) -> &ProgramEnv {
        &self.0
    }
}

impl DerefMut for Env {
    fn deref_mut(&mut self) -> &mut ProgramEnv {
        &mut self.0
    }
}

impl Env {
    pub async fn new() -> Self {
        let programs = [
            Program {
                name: "psyche_treasurer",
                id: psyche_treasurer::ID,
                native: native!(psyche_treasurer::entry),
            },
            Program {
                name: "psyche_coordinator",
                id: psyche_coordinator::ID,
                native: native!(psyche_coordinator::entry),
            },
            Program {
                name: "psyche_authorizer",
                id: psyche_authorizer::ID,
                native: native!(psyche_authorizer::entry),
            },
        ];
        let mut env = Env(ProgramEnv::start(&programs).await);
        env.set_time(START_TIME).await;
        env
    }

    // --- reads -------------------------------------------------------------------------------

    pub async fn run(&mut self, address: Pubkey) -> Run {
        let data = self.account_data(address).await.expect("run exists");
        Run::try_deserialize(&mut data.as_slice()).unwrap()
    }

    pub async fn participant(&mut self, address: Pubkey) -> Participant {
        let data = self.account_data(address).await.expect("participant exists");
        Participant::try_deserialize(&mut data.as_slice()).unwrap()
    }

    pub async fn instance(&mut self, address: Pubkey) -> CoordinatorInstance {
        let data = self.account_data(address).await.expect("instance exists");
        CoordinatorInstance::try_deserialize(&mut data.as_slice()).unwrap()
    }

    pub async fn token(&mut self, address: Pubkey) -> spl_token::state::Account {
        let data = self.account_data(address).await.expect("token account exists");
        spl_token::state::Account::unpack(&data).unwrap()
    }

    pub async fn balance(&mut self, address: Pubkey) -> u64 {
        self.token(address).await.amount
    }

    /// The run's zero-copy coordinator account, copied out (boxed: it is ~166 KB).
    pub async fn coordinator(&mut self, run: &TRun) -> Box<CoordinatorAccount> {
        let data = self.account_data(run.account).await.expect("coordinator account exists");
        assert_eq!(data.len(), CoordinatorAccount::SPACE);
        assert_eq!(&data[..8], CoordinatorAccount::DISCRIMINATOR);
        let mut boxed: Box<CoordinatorAccount> = bytemuck::zeroed_box();
        bytemuck::bytes_of_mut(boxed.as_mut()).copy_from_slice(&data[8..]);
        boxed
    }

    /// Rewrites the coordinator account through `edit` (test setup only: `set_account`).
    pub async fn edit_coordinator(
        &mut self,
        run: &TRun,
        edit: impl FnOnce(&mut CoordinatorAccount),
    ) {
        let mut state = self.coordinator(run).await;
        edit(&mut state);
        let mut account = self.account(run.account).await.unwrap();
        account.data[8..].copy_from_slice(bytemuck::bytes_of(state.as_ref()));
        self.ctx.set_account(&run.account, &AccountSharedData::from(account));
    }

    pub async fn run_state(&mut self, run: &TRun) -> RunState {
        self.coordinator(run).await.state.run_state()
    }

    // --- SPL Token ---------------------------------------------------------------------------

    /// Creates the mint `mint` (authority: the payer).
    pub async fn create_mint(&mut self, mint: &Keypair) {
        let ixs = self.create_mint_ixs(mint);
        self.send_many(&ixs, &[mint]).await.expect("create mint");
    }

    pub fn create_mint_ixs(&self, mint: &Keypair) -> Vec<Instruction> {
        let payer = self.payer().pubkey();
        vec![
            system_instruction::create_account(
                &payer,
                &mint.pubkey(),
                rent_exempt(spl_token::state::Mint::LEN),
                spl_token::state::Mint::LEN as u64,
                &spl_token::ID,
            ),
            spl_token::instruction::initialize_mint2(
                &spl_token::ID,
                &mint.pubkey(),
                &payer,
                None,
                DECIMALS,
            )
            .unwrap(),
        ]
    }

    /// Creates the token account `account` of `mint` owned by `owner`.
    pub async fn create_token_account(&mut self, account: &Keypair, mint: &Pubkey, owner: &Pubkey) {
        let ixs = self.create_token_account_ixs(account, mint, owner);
        self.send_many(&ixs, &[account]).await.expect("create token account");
    }

    pub fn create_token_account_ixs(
        &self,
        account: &Keypair,
        mint: &Pubkey,
        owner: &Pubkey,
    ) -> Vec<Instruction> {
        vec![
            system_instruction::create_account(
                &self.payer().pubkey(),
                &account.pubkey(),
                rent_exempt(spl_token::state::Account::LEN),
                spl_token::state::Account::LEN as u64,
                &spl_token::ID,
            ),
            spl_token::instruction::initialize_account3(
                &spl_token::ID,
                &account.pubkey(),
                mint,
                owner,
            )
            .unwrap(),
        ]
    }

    /// Mints `amount` of `mint` (authority: the payer) to `to`.
    pub async fn mint_to(&mut self, mint: &Pubkey, to: &Pubkey, amount: u64) {
        let ix = self.mint_to_ix(mint, to, amount);
        self.send(ix, &[]).await.expect("mint_to");
    }

    pub fn mint_to_ix(&self, mint: &Pubkey, to: &Pubkey, amount: u64) -> Instruction {
        spl_token::instruction::mint_to(
            &spl_token::ID,
            mint,
            to,
            &self.payer().pubkey(),
            &[],
            amount,
        )
        .unwrap()
    }

    /// A plain SPL `transfer` signed by `owner`.
    pub async fn transfer(
        &mut self,
        from: &Pubkey,
        to: &Pubkey,
        owner: &Keypair,
        amount: u64,
    ) -> TxResult {
        let ix = spl_token::instruction::transfer(
            &spl_token::ID,
            from,
            to,
            &owner.pubkey(),
            &[],
            amount,
        )
        .unwrap();
        self.send(ix, &[owner]).await
    }

    /// A new token account of `mint` owned by `owner` holding `amount` (minted).
    pub async fn funded_token_account(
        &mut self,
        mint: &Pubkey,
        owner: &Pubkey,
        amount: u64,
    ) -> Pubkey {
        let account = Keypair::new();
        self.create_token_account(&account, mint, owner).await;
        if amount > 0 {
            self.mint_to(mint, &account.pubkey(), amount).await;
        }
        account.pubkey()
    }

    // --- treasurer -----------------------------------------------------------------------------

    /// The two instructions that create a run: allocate the coordinator's zero-copy account,
    /// then `run_create`.
    pub fn create_run_ixs(&self, run: &TRun, collateral_per_point: u64) -> Vec<Instruction> {
        let payer = self.payer().pubkey();
        vec![
            system_instruction::create_account(
                &payer,
                &run.account,
                rent_exempt(CoordinatorAccount::SPACE),
                CoordinatorAccount::SPACE as u64,
                &psyche_coordinator::ID,
            ),
            ix_run_create(
                &payer,
                run,
                RunCreateParams {
                    index: run.index,
                    run_id: run.run_id.clone(),
                    client_version: "test".to_string(),
                    join_authority: run.join_authority.pubkey(),
                    collateral_per_point,
                    local_run: false,
                },
            ),
        ]
    }

    /// Creates `run` through the treasurer (the mint must exist).
    pub async fn create_run(&mut self, run: &TRun, collateral_per_point: u64) -> TxResult {
        let ixs = self.create_run_ixs(run, collateral_per_point);
        let account = run.account_keypair();
        let authority = run.authority.insecure_clone();
        self.send_many(&ixs, &[&account, &authority]).await
    }

    /// A fresh mint and a run on it.
    pub async fn new_run(&mut self, run_id: &str, index: u64, collateral_per_point: u64) -> TRun {
        let mint = seeded_keypair(format!("{run_id}/mint").as_bytes());
        self.create_mint(&mint).await;
        let run = TRun::planned(run_id, index, mint.pubkey());
        self.create_run(&run, collateral_per_point).await.expect("run_create");
        run
    }

    pub async fn run_update(&mut self, run: &TRun, params: RunUpdateParams) -> TxResult {
        let ix = ix_run_update(&run.authority.pubkey(), run, params);
        let authority = run.authority.insecure_clone();
        self.send(ix, &[&authority]).await
    }

    /// Tiny config and model, rates, resumed; and a permissionless join authorization.
    pub async fn start_run(&mut self, run: &TRun, earning: u64, slashing: u64) {
        let params = RunUpdateParams {
            config: Some(Box::new(tiny_config())),
            model: Some(Box::new(tiny_model())),
            epoch_earning_rate_total_shared: Some(earning),
            epoch_slashing_rate_per_client: Some(slashing),
            paused: Some(false),
            ..empty_update()
        };
        self.run_update(run, params).await.expect("configure and resume");
        self.permissionless_authorization(run).await;
    }

    pub async fn participant_create(&mut self, run: &TRun, user: &Keypair) -> TxResult {
        let ix = ix_participant_create(&self.payer().pubkey(), &user.pubkey(), run);
        self.send(ix, &[user]).await
    }

    pub async fn claim(
        &mut self,
        run: &TRun,
        user: &Keypair,
        to: &Pubkey,
        points: u64,
    ) -> TxResult {
        let ix = ix_participant_claim(&user.pubkey(), to, run, points);
        self.send(ix, &[user]).await
    }

    // --- coordinator ---------------------------------------------------------------------------

    pub async fn permissionless_authorization(&mut self, run: &TRun) -> Pubkey {
        let grantor = run.join_authority.insecure_clone();
        let ixs = authorization_ixs(&self.payer().pubkey(), &grantor.pubkey());
        self.send_many(&ixs, &[&grantor]).await.expect("authorization");
        open_authorization(run)
    }

    pub async fn join(&mut self, run: &TRun, client: &Client) -> TxResult {
        let ix = ix_join_run(run, &client.wallet.pubkey(), client.id());
        self.send(ix, &[&client.wallet]).await
    }

    pub async fn tick(&mut self, run: &TRun) -> TxResult {
        let payer = self.payer().pubkey();
        self.send(ix_tick(run, &payer), &[]).await
    }

    /// Drives one whole epoch of the tiny run with `clients` (all healthy): joins, Warmup,
    /// warmup witnesses, rounds until the epoch time is up, drain rounds, Cooldown, and the
    /// Cooldown timeout that credits the epoch's points.
    pub async fn run_epoch(&mut self, run: &TRun, clients: &[Client]) {
        for c in clients {
            self.join(run, c).await.expect("join");
        }
        self.warp(1).await;
        self.tick(run).await.expect("tick into warmup");
        assert_eq!(self.run_state(run).await, RunState::Warmup);
        for c in clients {
            if self.run_state(run).await != RunState::Warmup {
                break;
            }
            let account = self.coordinator(run).await;
            let index = account.state.coordinator.index_of(&c.id()).expect("epoch client") as u64;
            let proof = WitnessProofArg { position: 0, index, witness: true };
            let ix = ix_warmup_witness(run, &c.wallet.pubkey(), proof);
            self.send(ix, &[&c.wallet]).await.expect("warmup witness");
        }
        let epoch_time = tiny_config().epoch_time as i64;
        let mut timed_out = false;
        for _ in 0..64 {
            match self.run_state(run).await {
                RunState::RoundTrain => self.witness_round(run, clients).await,
                RunState::RoundWitness => {
                    // The first round runs past the epoch time: two drain rounds, then Cooldown.
                    self.warp(if timed_out { 1 } else { epoch_time }).await;
                    timed_out = true;
                    self.tick(run).await.expect("tick");
                }
                RunState::Cooldown => {
                    self.warp(tiny_config().cooldown_time as i64).await;
                    self.tick(run).await.expect("tick: end of cooldown");
                }
                RunState::WaitingForMembers => return,
                other => panic!("unexpected phase {other:?}"),
            }
        }
        panic!("the epoch did not end");
    }

    /// Every elected witness among `clients` sends a witness that saw every epoch client.
    pub async fn witness_round(&mut self, run: &TRun, clients: &[Client]) {
        let account = self.coordinator(run).await;
        let coordinator = &account.state.coordinator;
        let mut participants = Bloom::empty(7);
        for c in coordinator.epoch_state.clients() {
            participants.add(&psyche_coordinator::core::hash::sha256(&c.id.signer));
        }
        let sel = coordinator.committee_selection(coordinator.current_round()).unwrap();
        let mut sent = 0;
        for c in clients {
            let Some(index) = coordinator.index_of(&c.id()) else { continue };
            let Some((position, true)) = sel.get_witness(index as u64) else { continue };
            let proof = WitnessProofArg { position, index: index as u64, witness: true };
            let ix = ix_witness(run, &c.wallet.pubkey(), proof, participants);
            self.send(ix, &[&c.wallet]).await.expect("witness");
            sent += 1;
        }
        assert!(sent > 0, "no elected witness");
    }
}

// --- instruction builders ----------------------------------------------------------------------

pub fn ix_run_create(payer: &Pubkey, run: &TRun, params: RunCreateParams) -> Instruction {
    Instruction {
        program_id: psyche_treasurer::ID,
        accounts: psyche_treasurer::accounts::RunCreate {
            payer: *payer,
            main_authority: run.authority.pubkey(),
            run: run.address,
            collateral_mint: run.mint,
            run_collateral: run.collateral,
            coordinator_instance: run.instance,
            coordinator_account: run.account,
            coordinator_program: psyche_coordinator::ID,
            token_program: spl_token::ID,
            system_program: system_program::ID,
        }
        .to_account_metas(None),
        data: psyche_treasurer::instruction::RunCreate { params }.data(),
    }
}

pub fn ix_run_update(authority: &Pubkey, run: &TRun, params: RunUpdateParams) -> Instruction {
    Instruction {
        program_id: psyche_treasurer::ID,
        accounts: psyche_treasurer::accounts::RunUpdate {
            authority: *authority,
            run: run.address,
            coordinator_instance: run.instance,
            coordinator_account: run.account,
            coordinator_program: psyche_coordinator::ID,
        }
        .to_account_metas(None),
        data: psyche_treasurer::instruction::RunUpdate { params }.data(),
    }
}

pub fn ix_participant_create(payer: &Pubkey, user: &Pubkey, run: &TRun) -> Instruction {
    Instruction {
        program_id: psyche_treasurer::ID,
        accounts: psyche_treasurer::accounts::ParticipantCreate {
            payer: *payer,
            user: *user,
            run: run.address,
            participant: run.participant(user),
            system_program: system_program::ID,
        }
        .to_account_metas(None),
        data: psyche_treasurer::instruction::ParticipantCreate {}.data(),
    }
}

/// The accounts of `participant_claim`, so tests can swap one for a wrong one.
pub fn claim_accounts(
    user: &Pubkey,
    to: &Pubkey,
    run: &TRun,
) -> psyche_treasurer::accounts::ParticipantClaim {
    psyche_treasurer::accounts::ParticipantClaim {
        user: *user,
        user_collateral: *to,
        run: run.address,
        run_collateral: run.collateral,
        participant: run.participant(user),
        coordinator_account: run.account,
        token_program: spl_token::ID,
    }
}

pub fn ix_claim_with(
    accounts: psyche_treasurer::accounts::ParticipantClaim,
    claim_points: u64,
) -> Instruction {
    Instruction {
        program_id: psyche_treasurer::ID,
        accounts: accounts.to_account_metas(None),
        data: psyche_treasurer::instruction::ParticipantClaim {
            params: ParticipantClaimParams { claim_points },
        }
        .data(),
    }
}

pub fn ix_participant_claim(
    user: &Pubkey,
    to: &Pubkey,
    run: &TRun,
    claim_points: u64,
) -> Instruction {
    ix_claim_with(claim_accounts(user, to, run), claim_points)
}

pub fn ix_run_wind_down(authority: &Pubkey, run: &TRun) -> Instruction {
    Instruction {
        program_id: psyche_treasurer::ID,
        accounts: psyche_treasurer::accounts::RunWindDown {
            authority: *authority,
            run: run.address,
            coordinator_instance: run.instance,
            coordinator_account: run.account,
            coordinator_program: psyche_coordinator::ID,
        }
        .to_account_metas(None),
        data: psyche_treasurer::instruction::RunWindDown {}.data(),
    }
}

/// The accounts of `run_close`, so tests can swap one for a wrong one.
pub fn close_accounts(
    authority: &Pubkey,
    authority_collateral: &Pubkey,
    run: &TRun,
) -> psyche_treasurer::accounts::RunClose {
    psyche_treasurer::accounts::RunClose {
        authority: *authority,
        authority_collateral: *authority_collateral,
        run: run.address,
        run_collateral: run.collateral,
        coordinator_instance: run.instance,
        coordinator_account: run.account,
        coordinator_program: psyche_coordinator::ID,
        token_program: spl_token::ID,
    }
}

pub fn ix_run_close_with(accounts: psyche_treasurer::accounts::RunClose) -> Instruction {
    Instruction {
        program_id: psyche_treasurer::ID,
        accounts: accounts.to_account_metas(None),
        data: psyche_treasurer::instruction::RunClose {}.data(),
    }
}

pub fn empty_update() -> RunUpdateParams {
    RunUpdateParams {
        metadata: None,
        config: None,
        model: None,
        progress: None,
        epoch_earning_rate_total_shared: None,
        epoch_slashing_rate_per_client: None,
        paused: None,
        client_version: None,
    }
}

fn coordinator_ix(accounts: impl ToAccountMetas, data: impl InstructionData) -> Instruction {
    Instruction {
        program_id: psyche_coordinator::ID,
        accounts: accounts.to_account_metas(None),
        data: data.data(),
    }
}

fn permissionless(
    run: &TRun,
    user: &Pubkey,
) -> psyche_coordinator::accounts::PermissionlessCoordinatorAccounts {
    psyche_coordinator::accounts::PermissionlessCoordinatorAccounts {
        user: *user,
        coordinator_instance: run.instance,
        coordinator_account: run.account,
    }
}

/// A coordinator owner instruction (`set_paused`) sent directly, signed by `authority`.
pub fn ix_coordinator_set_paused(run: &TRun, authority: &Pubkey, paused: bool) -> Instruction {
    coordinator_ix(
        psyche_coordinator::accounts::OwnerCoordinatorAccounts {
            authority: *authority,
            coordinator_instance: run.instance,
            coordinator_account: run.account,
        },
        psyche_coordinator::instruction::SetPaused { paused },
    )
}

pub fn ix_coordinator_set_rates(run: &TRun, authority: &Pubkey, earning: u64) -> Instruction {
    coordinator_ix(
        psyche_coordinator::accounts::OwnerCoordinatorAccounts {
            authority: *authority,
            coordinator_instance: run.instance,
            coordinator_account: run.account,
        },
        psyche_coordinator::instruction::SetFutureEpochRates {
            earning_rate_total_shared: Some(earning),
            slashing_rate_per_client: None,
        },
    )
}

pub fn ix_join_run(run: &TRun, user: &Pubkey, client_id: NodeIdentity) -> Instruction {
    coordinator_ix(
        psyche_coordinator::accounts::JoinRun {
            user: *user,
            authorization: open_authorization(run),
            coordinator_instance: run.instance,
            coordinator_account: run.account,
        },
        psyche_coordinator::instruction::JoinRun {
            params: psyche_coordinator::JoinRunParams { client_id },
        },
    )
}

pub fn ix_tick(run: &TRun, user: &Pubkey) -> Instruction {
    coordinator_ix(permissionless(run, user), psyche_coordinator::instruction::Tick {})
}

pub fn ix_warmup_witness(run: &TRun, user: &Pubkey, proof: WitnessProofArg) -> Instruction {
    coordinator_ix(
        permissionless(run, user),
        psyche_coordinator::instruction::WarmupWitness {
            proof,
            participant_bloom: Box::new(Bloom::empty(0)),
            broadcast_bloom: Box::new(Bloom::empty(0)),
        },
    )
}

pub fn ix_witness(
    run: &TRun,
    user: &Pubkey,
    proof: WitnessProofArg,
    participants: Bloom,
) -> Instruction {
    coordinator_ix(
        permissionless(run, user),
        psyche_coordinator::instruction::Witness {
            proof,
            participant_bloom: Box::new(participants),
            broadcast_bloom: Box::new(Bloom::empty(8)),
            verdict: Verdict::default(),
            metadata: WitnessMetadata {
                step: 0,
                tokens_per_sec: 0.0,
                bandwidth_per_sec: 0.0,
                loss: 0.0,
                efficiency: 0.0,
                evals: vec![],
            },
        },
    )
}

/// The join authority's permissionless authorization (scope `CoordinatorJoinRun`): create and
/// activate.
pub fn authorization_ixs(payer: &Pubkey, grantor: &Pubkey) -> Vec<Instruction> {
    let (address, _) =
        Authorization::find_pda(grantor, &Pubkey::default(), JOIN_RUN_AUTHORIZATION_SCOPE);
    vec![
        Instruction {
            program_id: psyche_authorizer::ID,
            accounts: psyche_authorizer::accounts::AuthorizationCreate {
                payer: *payer,
                grantor: *grantor,
                authorization: address,
                system_program: system_program::ID,
            }
            .to_account_metas(None),
            data: psyche_authorizer::instruction::AuthorizationCreate {
                params: psyche_authorizer::AuthorizationCreateParams {
                    grantee: Pubkey::default(),
                    scope: JOIN_RUN_AUTHORIZATION_SCOPE.to_vec(),
                },
            }
            .data(),
        },
        Instruction {
            program_id: psyche_authorizer::ID,
            accounts: psyche_authorizer::accounts::AuthorizationGrantorUpdate {
                grantor: *grantor,
                authorization: address,
            }
            .to_account_metas(None),
            data: psyche_authorizer::instruction::AuthorizationGrantorUpdate {
                params: psyche_authorizer::AuthorizationGrantorUpdateParams { active: true },
            }
            .data(),
        },
    ]
}

pub fn open_authorization(run: &TRun) -> Pubkey {
    Authorization::find_pda(
        &run.join_authority.pubkey(),
        &Pubkey::default(),
        JOIN_RUN_AUTHORIZATION_SCOPE,
    )
    .0
}

// --- config --------------------------------------------------------------------------------------

#[path = "../../../psyche-coordinator/tests/fixtures/mod.rs"]
mod fixtures;
#[allow(unused_imports)] // not every test binary uses each
pub use fixtures::{largest_model, tiny_config, tiny_model};

// --- errors ------------------------------------------------------------------------------------

pub fn code(e: psyche_treasurer::error::TreasurerError) -> u32 {
    e.into()
}

pub fn anchor_code(e: anchor_lang::error::ErrorCode) -> u32 {
    e.into()
}

pub fn coordinator_code(e: psyche_coordinator::error::CoordinatorProgramError) -> u32 {
    e.into()
}

#[track_caller]
pub fn assert_err(result: TxResult, e: psyche_treasurer::error::TreasurerError) {
    let got = custom_code(result);
    assert_eq!(got, code(e), "expected {e:?} ({}), got code {got}", code(e));
}

#[track_caller]
pub fn assert_anchor_err(result: TxResult, index: u8, e: anchor_lang::error::ErrorCode) {
    let got = custom_code_at(result, index);
    assert_eq!(got, anchor_code(e), "expected {e:?} ({}), got code {got}", anchor_code(e));
}
