//! Program-test harness: both programs in the shared program-test environment
//! (`program-test-env`: natively registered or, with `PSYCHE_SBF=1`, as the SBF builds of
//! scripts/build-sbf.sh); the coordinator's heap count, instruction builders, run drivers and
//! account readers. Used by the `program_*.rs` tests (`mod harness;`).

#![allow(dead_code)]

use std::ops::{Deref, DerefMut};

use anchor_lang::solana_program::system_instruction;
use anchor_lang::system_program;
use anchor_lang::{AccountDeserialize, InstructionData, ToAccountMetas};
use program_test_env::{native, Program, ProgramEnv};
use psyche_authorizer::Authorization;
use psyche_coordinator::constants::JOIN_RUN_AUTHORIZATION_SCOPE;
use psyche_coordinator::core::model::{Checkpoint, Model, OptimizerDefinition};
use psyche_coordinator::core::{
    Bloom, CoordinatorConfig, CoordinatorState, HealthCheck, NodeIdentity, Progress, RunMetadata,
    RunState, Verdict, WitnessMetadata, WitnessProofArg,
};
use psyche_coordinator::error::CoordinatorProgramError;
use psyche_coordinator::{
    CoordinatorAccount, CoordinatorInstance, InitCoordinatorParams, PeerRecord,
};
use solana_sdk::account_info::AccountInfo;
use solana_sdk::entrypoint::ProgramResult;
use solana_sdk::instruction::Instruction;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signer};
use solana_sdk::transaction::TransactionError;

#[allow(unused_imports)] // not every test binary uses each
pub use program_test_env::{
    custom_code, custom_code_at, rent_exempt, sbf_mode, seeded_keypair, TxResult, START_SLOT,
    START_TIME,
};

/// The coordinator's entrypoint with its heap counted (`heap`).
fn counted_entry<'info>(
    program_id: &Pubkey,
    accounts: &'info [AccountInfo<'info>],
    data: &[u8],
) -> ProgramResult {
    heap::start();
    let result = psyche_coordinator::entry(program_id, accounts, data);
    heap::stop();
    result
}

/// What the coordinator's code allocates while it runs natively, counted the way SBF's bump
/// allocator spends its 32 KB heap: it never frees, so every allocation (rounded up to its
/// alignment) counts, and a `realloc` is a fresh allocation. Only allocations on the thread that
/// runs the program, between entry and exit, are counted (the runtime's own are not the
/// program's heap). What the SBF entrypoint itself allocates (the `AccountInfo` list) happens
/// before `entry` and is not counted here; `program_costs.rs` adds it per account.
pub mod heap {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};

    thread_local! {
        static COUNTING: Cell<bool> = const { Cell::new(false) };
    }
    static USED: AtomicUsize = AtomicUsize::new(0);
    static LAST: AtomicUsize = AtomicUsize::new(0);

    pub struct BumpCounter;

    // SAFETY: forwards to the system allocator; only counts.
    unsafe impl GlobalAlloc for BumpCounter {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if COUNTING.with(Cell::get) {
                USED.fetch_add(layout.size().next_multiple_of(layout.align()), Ordering::Relaxed);
            }
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static ALLOCATOR: BumpCounter = BumpCounter;

    /// Syscalls are the runtime's work, not the program's: natively they run as program-test's
    /// stubs on the program's thread (a log line grows the log collector), so counting pauses
    /// inside them. Wraps the stubs program-test installed; call after its first start.
    pub fn exclude_syscalls() {
        use std::sync::Once;
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            let inner = stubs::set_syscall_stubs(Box::new(Paused(None)));
            stubs::set_syscall_stubs(Box::new(Paused(Some(inner))));
        });
    }

    use anchor_lang::solana_program::instruction::Instruction;
    use anchor_lang::solana_program::{account_info::AccountInfo, pubkey::Pubkey};
    use solana_sdk::program_stubs as stubs;

    struct Paused(Option<Box<dyn stubs::SyscallStubs>>);

    impl Paused {
        fn run<T>(&self, f: impl FnOnce(&dyn stubs::SyscallStubs) -> T) -> T {
            let was = COUNTING.with(|c| c.replace(false));
            let out = f(self.0.as_deref().expect("wrapped stubs"));
            COUNTING.with(|c| c.set(was));
            out
        }
    }

    impl stubs::SyscallStubs for Paused {
        fn sol_log(&self, message: &str) {
            self.run(|s| s.sol_log(message))
        }
        fn sol_log_compute_units(&self) {
            self.run(|s| s.sol_log_compute_units())
        }
        fn sol_remaining_compute_units(&self) -> u64 {
            self.run(|s| s.sol_remaining_compute_units())
        }
        fn sol_invoke_signed(
            &self,
            instruction: &Instruction,
            account_infos: &[AccountInfo],
            signers_seeds: &[&[&[u8]]],
        ) -> anchor_lang::solana_program::entrypoint::ProgramResult {
            self.run(|s| s.sol_invoke_signed(instruction, account_infos, signers_seeds))
        }
        fn sol_get_sysvar(
            &self,
            sysvar_id_addr: *const u8,
            var_addr: *mut u8,
            offset: u64,
            length: u64,
        ) -> u64 {
            self.run(|s| s.sol_get_sysvar(sysvar_id_addr, var_addr, offset, length))
        }
        fn sol_get_clock_sysvar(&self, var_addr: *mut u8) -> u64 {
            self.run(|s| s.sol_get_clock_sysvar(var_addr))
        }
        fn sol_get_epoch_schedule_sysvar(&self, var_addr: *mut u8) -> u64 {
            self.run(|s| s.sol_get_epoch_schedule_sysvar(var_addr))
        }
        fn sol_get_fees_sysvar(&self, var_addr: *mut u8) -> u64 {
            self.run(|s| s.sol_get_fees_sysvar(var_addr))
        }
        fn sol_get_rent_sysvar(&self, var_addr: *mut u8) -> u64 {
            self.run(|s| s.sol_get_rent_sysvar(var_addr))
        }
        fn sol_get_epoch_rewards_sysvar(&self, var_addr: *mut u8) -> u64 {
            self.run(|s| s.sol_get_epoch_rewards_sysvar(var_addr))
        }
        fn sol_get_last_restart_slot(&self, var_addr: *mut u8) -> u64 {
            self.run(|s| s.sol_get_last_restart_slot(var_addr))
        }
        fn sol_get_epoch_stake(&self, vote_address: *const u8) -> u64 {
            self.run(|s| s.sol_get_epoch_stake(vote_address))
        }
        unsafe fn sol_memcpy(&self, dst: *mut u8, src: *const u8, n: usize) {
            // SAFETY: forwarded with the caller's guarantees.
            self.run(|s| unsafe { s.sol_memcpy(dst, src, n) })
        }
        unsafe fn sol_memmove(&self, dst: *mut u8, src: *const u8, n: usize) {
            // SAFETY: forwarded with the caller's guarantees.
            self.run(|s| unsafe { s.sol_memmove(dst, src, n) })
        }
        unsafe fn sol_memcmp(&self, s1: *const u8, s2: *const u8, n: usize, result: *mut i32) {
            // SAFETY: forwarded with the caller's guarantees.
            self.run(|s| unsafe { s.sol_memcmp(s1, s2, n, result) })
        }
        unsafe fn sol_memset(&self, p: *mut u8, c: u8, n: usize) {
            // SAFETY: forwarded with the caller's guarantees.
            self.run(|s| unsafe { s.sol_memset(p, c, n) })
        }
        fn sol_get_return_data(&self) -> Option<(Pubkey, Vec<u8>)> {
            self.run(|s| s.sol_get_return_data())
        }
        fn sol_set_return_data(&self, data: &[u8]) {
            self.run(|s| s.sol_set_return_data(data))
        }
        fn sol_log_data(&self, fields: &[&[u8]]) {
            self.run(|s| s.sol_log_data(fields))
        }
        fn sol_get_processed_sibling_instruction(&self, index: usize) -> Option<Instruction> {
            self.run(|s| s.sol_get_processed_sibling_instruction(index))
        }
        fn sol_get_stack_height(&self) -> u64 {
            self.run(|s| s.sol_get_stack_height())
        }
    }

    pub fn start() {
        USED.store(0, Ordering::Relaxed);
        COUNTING.with(|c| c.set(true));
    }

    pub fn stop() {
        COUNTING.with(|c| c.set(false));
        LAST.store(USED.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Bytes the last coordinator instruction run natively allocated.
    pub fn last() -> usize {
        LAST.load(Ordering::Relaxed)
    }
}

/// What one transaction cost (`Env::send_measured`): the shared environment's measure and,
/// natively, the heap the coordinator allocated.
pub struct Measured {
    pub result: Result<(), TransactionError>,
    pub compute_units: u64,
    pub tx_bytes: usize,
    pub heap: usize,
    pub logs: Vec<String>,
}

/// A run created by `Env::create_run`.
pub struct Run {
    pub run_id: String,
    pub instance: Pubkey,
    pub account: Pubkey,
    pub authority: Keypair,
    pub join_authority: Keypair,
}

/// A client wallet with its P2P key.
pub struct Client {
    pub wallet: Keypair,
    pub p2p: [u8; 32],
}

impl Client {
    pub fn new(p2p_byte: u8) -> Self {
        Self { wallet: Keypair::new(), p2p: [p2p_byte; 32] }
    }

    /// A reproducible client (wallet derived from `label`).
    pub fn seeded(label: &str, p2p_byte: u8) -> Self {
        Self { wallet: seeded_keypair(label.as_bytes()), p2p: [p2p_byte; 32] }
    }

    pub fn id(&self) -> NodeIdentity {
        NodeIdentity { signer: self.wallet.pubkey().to_bytes(), p2p_identity: self.p2p }
    }
}

/// The shared environment (sending, metadata, clock, reads) with the coordinator's own helpers
/// on top.
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
                name: "psyche_coordinator",
                id: psyche_coordinator::ID,
                native: native!(counted_entry),
            },
            Program {
                name: "psyche_authorizer",
                id: psyche_authorizer::ID,
                native: native!(psyche_authorizer::entry),
            },
        ];
        let mut env = Env(ProgramEnv::start(&programs).await);
        if !sbf_mode() {
            heap::exclude_syscalls();
        }
        // Start from a fixed time and slot so seeds and timestamps are reproducible.
        env.set_time(START_TIME).await;
        env
    }

    /// Sends `ix` with a compute-unit limit, as a client would, and reports what it cost
    /// (`ProgramEnv::send_measured`) and, natively, the heap the program allocated.
    pub async fn send_measured(
        &mut self,
        ix: Instruction,
        signers: &[&Keypair],
        cu_limit: u32,
    ) -> Measured {
        let m = self.0.send_measured(&[ix], signers, cu_limit).await;
        Measured {
            result: m.result,
            compute_units: m.compute_units,
            tx_bytes: m.tx_bytes,
            heap: heap::last(),
            logs: m.logs,
        }
    }

    // --- reads -------------------------------------------------------------------------------

    /// The run's zero-copy account, copied out (boxed: it is ~150 KB).
    pub async fn coordinator(&mut self, run: &Run) -> Box<CoordinatorAccount> {
        let data = self.account_data(run.account).await.expect("coordinator account exists");
        decode_coordinator_account(&data)
    }

    pub async fn instance(&mut self, run: &Run) -> Option<CoordinatorInstance> {
        let data = self.account_data(run.instance).await?;
        Some(CoordinatorInstance::try_deserialize(&mut data.as_slice()).unwrap())
    }

    /// The `PeerRecord` at `address`, if the account exists (discriminator checked).
    pub async fn peer_record(&mut self, address: Pubkey) -> Option<PeerRecord> {
        let data = self.account_data(address).await?;
        Some(PeerRecord::try_deserialize(&mut data.as_slice()).unwrap())
    }

    pub async fn run_state(&mut self, run: &Run) -> RunState {
        self.coordinator(run).await.state.run_state()
    }

    // --- runs --------------------------------------------------------------------------------

    /// The two instructions that create a (public) run: allocate the zero-copy account, then
    /// `init_coordinator` (one transaction, signed by the payer and the new account).
    pub fn create_run_ixs(
        &self,
        run_id: &str,
        account: &Keypair,
        main: &Pubkey,
        join: &Pubkey,
    ) -> Vec<Instruction> {
        self.create_run_ixs_with(run_id, account, main, join, false)
    }

    /// `create_run_ixs` for a local run (`local_run`) or a public one.
    pub fn create_run_ixs_with(
        &self,
        run_id: &str,
        account: &Keypair,
        main: &Pubkey,
        join: &Pubkey,
        local_run: bool,
    ) -> Vec<Instruction> {
        let payer = self.payer().pubkey();
        let (instance, _) = CoordinatorInstance::find_pda(run_id);
        let lamports = rent_exempt(CoordinatorAccount::SPACE);
        vec![
            system_instruction::create_account(
                &payer,
                &account.pubkey(),
                lamports,
                CoordinatorAccount::SPACE as u64,
                &psyche_coordinator::ID,
            ),
            ix_init_coordinator(
                &payer,
                instance,
                account.pubkey(),
                InitCoordinatorParams {
                    main_authority: *main,
                    join_authority: *join,
                    run_id: run_id.to_string(),
                    client_version: "test".to_string(),
                    local_run,
                },
            ),
        ]
    }

    /// A public run (peer records may not name loopback, private or DNS targets).
    pub async fn create_run(&mut self, run_id: &str) -> Run {
        self.create_run_with(run_id, false).await
    }

    pub async fn create_run_with(&mut self, run_id: &str, local_run: bool) -> Run {
        // Keys derived from the run id: reproducible, distinct per run.
        let authority = seeded_keypair(format!("{run_id}/authority").as_bytes());
        let join_authority = seeded_keypair(format!("{run_id}/join_authority").as_bytes());
        let account = seeded_keypair(format!("{run_id}/account").as_bytes());
        let ixs = self.create_run_ixs_with(
            run_id,
            &account,
            &authority.pubkey(),
            &join_authority.pubkey(),
            local_run,
        );
        self.send_many(&ixs, &[&account]).await.expect("create run");
        Run {
            run_id: run_id.to_string(),
            instance: CoordinatorInstance::find_pda(run_id).0,
            account: account.pubkey(),
            authority,
            join_authority,
        }
    }

    /// A run with the tiny config and model, resumed (WaitingForMembers), and a permissionless
    /// join authorization.
    pub async fn started_run(&mut self, run_id: &str) -> Run {
        self.started_run_with(run_id, tiny_config()).await
    }

    /// `started_run` with another coordinator config (the tiny model).
    pub async fn started_run_with(&mut self, run_id: &str, config: CoordinatorConfig) -> Run {
        let run = self.create_run(run_id).await;
        self.configure(&run, config, tiny_model()).await;
        self.send(ix_set_paused(&run, false), &[&run.authority]).await.expect("resume");
        self.permissionless_authorization(&run).await;
        run
    }

    pub async fn configure(&mut self, run: &Run, config: CoordinatorConfig, model: Model) {
        let ix = ix_update(run, &run.authority.pubkey(), None, Some(config), Some(model), None);
        self.send(ix, &[&run.authority]).await.expect("configure");
    }

    // --- authorizations ----------------------------------------------------------------------

    /// Creates (and optionally activates) the authorization of `(grantor, grantee, scope)`.
    pub async fn authorization(
        &mut self,
        grantor: &Keypair,
        grantee: Pubkey,
        scope: &[u8],
        active: bool,
    ) -> Pubkey {
        let (address, _) = Authorization::find_pda(&grantor.pubkey(), &grantee, scope);
        let create = Instruction {
            program_id: psyche_authorizer::ID,
            accounts: psyche_authorizer::accounts::AuthorizationCreate {
                payer: self.payer().pubkey(),
                grantor: grantor.pubkey(),
                authorization: address,
                system_program: system_program::ID,
            }
            .to_account_metas(None),
            data: psyche_authorizer::instruction::AuthorizationCreate {
                params: psyche_authorizer::AuthorizationCreateParams {
                    grantee,
                    scope: scope.to_vec(),
                },
            }
            .data(),
        };
        let mut ixs = vec![create];
        if active {
            ixs.push(ix_grantor_update(grantor, address, true));
        }
        self.send_many(&ixs, &[grantor]).await.expect("authorization");
        address
    }

    pub async fn permissionless_authorization(&mut self, run: &Run) -> Pubkey {
        let join_authority = run.join_authority.insecure_clone();
        self.authorization(&join_authority, Pubkey::default(), JOIN_RUN_AUTHORIZATION_SCOPE, true)
            .await
    }

    /// The permissionless join authorization of `run` (created by `started_run`).
    pub fn open_authorization(run: &Run) -> Pubkey {
        Authorization::find_pda(
            &run.join_authority.pubkey(),
            &Pubkey::default(),
            JOIN_RUN_AUTHORIZATION_SCOPE,
        )
        .0
    }

    pub async fn join(&mut self, run: &Run, client: &Client) -> TxResult {
        let ix =
            ix_join_run(run, &client.wallet.pubkey(), Env::open_authorization(run), client.id());
        self.send(ix, &[&client.wallet]).await
    }

    pub async fn tick(&mut self, run: &Run) -> TxResult {
        let payer = self.payer();
        self.send(ix_tick(run, &payer.pubkey()), &[]).await
    }
}

/// Decodes the account bytes (discriminator checked) into a boxed copy.
pub fn decode_coordinator_account(data: &[u8]) -> Box<CoordinatorAccount> {
    use anchor_lang::Discriminator;
    assert_eq!(data.len(), CoordinatorAccount::SPACE);
    assert_eq!(&data[..8], CoordinatorAccount::DISCRIMINATOR);
    let mut boxed: Box<CoordinatorAccount> = bytemuck::zeroed_box();
    bytemuck::bytes_of_mut(boxed.as_mut()).copy_from_slice(&data[8..]);
    boxed
}

// --- errors ------------------------------------------------------------------------------------

pub fn code(e: CoordinatorProgramError) -> u32 {
    e.into()
}

pub fn anchor_code(e: anchor_lang::error::ErrorCode) -> u32 {
    e.into()
}

#[track_caller]
pub fn assert_err(result: TxResult, e: CoordinatorProgramError) {
    let got = custom_code(result);
    assert_eq!(got, code(e), "expected {e:?} ({}), got code {got}", code(e));
}

// --- instruction builders ------------------------------------------------------------------------

fn ix(accounts: impl ToAccountMetas, data: impl InstructionData) -> Instruction {
    Instruction {
        program_id: psyche_coordinator::ID,
        accounts: accounts.to_account_metas(None),
        data: data.data(),
    }
}

fn owner_accounts(
    run: &Run,
    authority: &Pubkey,
) -> psyche_coordinator::accounts::OwnerCoordinatorAccounts {
    psyche_coordinator::accounts::OwnerCoordinatorAccounts {
        authority: *authority,
        coordinator_instance: run.instance,
        coordinator_account: run.account,
    }
}

fn permissionless_accounts(
    run: &Run,
    user: &Pubkey,
) -> psyche_coordinator::accounts::PermissionlessCoordinatorAccounts {
    psyche_coordinator::accounts::PermissionlessCoordinatorAccounts {
        user: *user,
        coordinator_instance: run.instance,
        coordinator_account: run.account,
    }
}

pub fn ix_init_coordinator(
    payer: &Pubkey,
    instance: Pubkey,
    account: Pubkey,
    params: InitCoordinatorParams,
) -> Instruction {
    ix(
        psyche_coordinator::accounts::InitCoordinator {
            payer: *payer,
            coordinator_instance: instance,
            coordinator_account: account,
            system_program: system_program::ID,
        },
        psyche_coordinator::instruction::InitCoordinator { params },
    )
}

pub fn ix_free_coordinator(run: &Run, authority: &Pubkey, spill: &Pubkey) -> Instruction {
    ix(
        psyche_coordinator::accounts::FreeCoordinator {
            authority: *authority,
            spill: *spill,
            coordinator_instance: run.instance,
            coordinator_account: run.account,
        },
        psyche_coordinator::instruction::FreeCoordinator {
            params: psyche_coordinator::FreeCoordinatorParams {},
        },
    )
}

pub fn ix_update(
    run: &Run,
    authority: &Pubkey,
    metadata: Option<RunMetadata>,
    config: Option<CoordinatorConfig>,
    model: Option<Model>,
    progress: Option<Progress>,
) -> Instruction {
    ix(
        owner_accounts(run, authority),
        psyche_coordinator::instruction::Update { metadata, config, model, progress },
    )
}

pub fn ix_update_client_version(run: &Run, authority: &Pubkey, new_version: &str) -> Instruction {
    ix(
        owner_accounts(run, authority),
        psyche_coordinator::instruction::UpdateClientVersion {
            new_version: new_version.to_string(),
        },
    )
}

pub fn ix_set_future_epoch_rates(
    run: &Run,
    authority: &Pubkey,
    earning: Option<u64>,
    slashing: Option<u64>,
) -> Instruction {
    ix(
        owner_accounts(run, authority),
        psyche_coordinator::instruction::SetFutureEpochRates {
            earning_rate_total_shared: earning,
            slashing_rate_per_client: slashing,
        },
    )
}

/// `set_paused` signed by the run's authority.
pub fn ix_set_paused(run: &Run, paused: bool) -> Instruction {
    ix_set_paused_by(run, &run.authority.pubkey(), paused)
}

pub fn ix_set_paused_by(run: &Run, authority: &Pubkey, paused: bool) -> Instruction {
    ix(owner_accounts(run, authority), psyche_coordinator::instruction::SetPaused { paused })
}

pub fn ix_join_run(
    run: &Run,
    user: &Pubkey,
    authorization: Pubkey,
    client_id: NodeIdentity,
) -> Instruction {
    ix(
        psyche_coordinator::accounts::JoinRun {
            user: *user,
            authorization,
            coordinator_instance: run.instance,
            coordinator_account: run.account,
        },
        psyche_coordinator::instruction::JoinRun {
            params: psyche_coordinator::JoinRunParams { client_id },
        },
    )
}

pub fn ix_tick(run: &Run, user: &Pubkey) -> Instruction {
    ix(permissionless_accounts(run, user), psyche_coordinator::instruction::Tick {})
}

pub fn ix_witness(
    run: &Run,
    user: &Pubkey,
    proof: WitnessProofArg,
    participant_bloom: Bloom,
    broadcast_bloom: Bloom,
    metadata: WitnessMetadata,
) -> Instruction {
    let (p, b) = (participant_bloom, broadcast_bloom);
    ix_witness_with_verdict(run, user, proof, p, b, Verdict::default(), metadata)
}

/// A witness that also carries a verification verdict (only a sampled round's verifiers may).
pub fn ix_witness_with_verdict(
    run: &Run,
    user: &Pubkey,
    proof: WitnessProofArg,
    participant_bloom: Bloom,
    broadcast_bloom: Bloom,
    verdict: Verdict,
    metadata: WitnessMetadata,
) -> Instruction {
    ix(
        permissionless_accounts(run, user),
        psyche_coordinator::instruction::Witness {
            proof,
            participant_bloom: Box::new(participant_bloom),
            broadcast_bloom: Box::new(broadcast_bloom),
            verdict,
            metadata,
        },
    )
}

pub fn ix_warmup_witness(
    run: &Run,
    user: &Pubkey,
    proof: WitnessProofArg,
    participant_bloom: Bloom,
    broadcast_bloom: Bloom,
) -> Instruction {
    ix(
        permissionless_accounts(run, user),
        psyche_coordinator::instruction::WarmupWitness {
            proof,
            participant_bloom: Box::new(participant_bloom),
            broadcast_bloom: Box::new(broadcast_bloom),
        },
    )
}

pub fn ix_health_check(run: &Run, user: &Pubkey, checks: Vec<HealthCheck>) -> Instruction {
    ix(permissionless_accounts(run, user), psyche_coordinator::instruction::HealthCheck { checks })
}

pub fn ix_checkpoint(run: &Run, user: &Pubkey, checkpoint: Checkpoint) -> Instruction {
    ix(
        permissionless_accounts(run, user),
        psyche_coordinator::instruction::Checkpoint { checkpoint },
    )
}

pub fn ix_set_peer_addrs(instance: Pubkey, signer: &Pubkey, addrs: &[&str]) -> Instruction {
    ix_set_peer_addrs_at(instance, signer, PeerRecord::find_pda(&instance, signer).0, addrs)
}

/// `set_peer_addrs` with any `peer_record` address (the program must refuse a wrong one).
pub fn ix_set_peer_addrs_at(
    instance: Pubkey,
    signer: &Pubkey,
    peer_record: Pubkey,
    addrs: &[&str],
) -> Instruction {
    ix(
        psyche_coordinator::accounts::SetPeerAddrs {
            signer: *signer,
            coordinator_instance: instance,
            peer_record,
            system_program: system_program::ID,
        },
        psyche_coordinator::instruction::SetPeerAddrs {
            params: psyche_coordinator::SetPeerAddrsParams {
                addrs: addrs.iter().map(|a| a.to_string()).collect(),
            },
        },
    )
}

pub fn ix_close_peer_record(signer: &Pubkey, peer_record: Pubkey) -> Instruction {
    ix(
        psyche_coordinator::accounts::ClosePeerRecord { signer: *signer, peer_record },
        psyche_coordinator::instruction::ClosePeerRecord {},
    )
}

pub fn ix_grantor_update(grantor: &Keypair, authorization: Pubkey, active: bool) -> Instruction {
    Instruction {
        program_id: psyche_authorizer::ID,
        accounts: psyche_authorizer::accounts::AuthorizationGrantorUpdate {
            grantor: grantor.pubkey(),
            authorization,
        }
        .to_account_metas(None),
        data: psyche_authorizer::instruction::AuthorizationGrantorUpdate {
            params: psyche_authorizer::AuthorizationGrantorUpdateParams { active },
        }
        .data(),
    }
}

// --- protocol helpers ------------------------------------------------------------------------------

#[path = "../fixtures/mod.rs"]
mod fixtures;
#[allow(unused_imports)] // not every test binary uses each
pub use fixtures::{largest_model, tiny_config, tiny_model};

pub fn adamw() -> OptimizerDefinition {
    OptimizerDefinition::AdamW {
        betas: [0.9, 0.95],
        weight_decay: 0.1,
        eps: 1e-8,
        clip_grad_norm: Some(1.0),
    }
}

pub fn distro() -> OptimizerDefinition {
    OptimizerDefinition::Distro {
        clip_grad_norm: Some(1.0),
        weight_decay: Some(0.1),
        compression_decay: 0.999,
        compression_topk: 8,
        compression_chunk: 64,
        quantize_1bit: true,
    }
}

/// The witness proof of epoch client `index` in the current round, if it is elected.
pub fn witness_proof(state: &CoordinatorState, index: u64) -> Option<WitnessProofArg> {
    let sel = state.committee_selection(state.current_round()).ok()?;
    let (position, witness) = sel.get_witness(index)?;
    witness.then_some(WitnessProofArg { position, index, witness })
}

/// The proof a warmup witness carries: only the index matters (the core checks membership).
pub fn warmup_proof(index: u64) -> WitnessProofArg {
    WitnessProofArg { position: 0, index, witness: true }
}

pub fn empty_metadata() -> WitnessMetadata {
    WitnessMetadata {
        step: 0,
        tokens_per_sec: 0.0,
        bandwidth_per_sec: 0.0,
        loss: 0.0,
        efficiency: 0.0,
        evals: vec![],
    }
}

// --- driving a run -----------------------------------------------------------------------------

impl Env {
    /// Joins `clients`, waits out the extra second and ticks into Warmup.
    pub async fn start_warmup(&mut self, run: &Run, clients: &[Client]) {
        for c in clients {
            self.join(run, c).await.expect("join");
        }
        self.warp(1).await;
        self.tick(run).await.expect("tick into warmup");
        assert_eq!(self.run_state(run).await, RunState::Warmup);
    }

    /// `start_warmup`, then warmup witnesses from every client until training starts.
    pub async fn start_training(&mut self, run: &Run, clients: &[Client]) {
        self.start_warmup(run, clients).await;
        for c in clients {
            if self.run_state(run).await != RunState::Warmup {
                break;
            }
            let account = self.coordinator(run).await;
            let index = account.state.coordinator.index_of(&c.id()).expect("epoch client") as u64;
            let ix = ix_warmup_witness(
                run,
                &c.wallet.pubkey(),
                warmup_proof(index),
                Bloom::empty(0),
                Bloom::empty(0),
            );
            self.send(ix, &[&c.wallet]).await.expect("warmup witness");
        }
        assert_eq!(self.run_state(run).await, RunState::RoundTrain);
    }

    /// Every elected witness among `clients` sends a witness whose participant bloom holds every
    /// epoch client except those in `unseen`. Returns how many witnesses were sent.
    pub async fn witness_round(
        &mut self,
        run: &Run,
        clients: &[Client],
        unseen: &[&Client],
    ) -> usize {
        let ixs = self.witness_ixs(run, clients, unseen).await;
        for (ix, i) in &ixs {
            self.send(ix.clone(), &[&clients[*i].wallet]).await.expect("witness");
        }
        ixs.len()
    }

    /// The witness instructions of `witness_round`, each with the index in `clients` of the
    /// elected witness that signs it.
    pub async fn witness_ixs(
        &mut self,
        run: &Run,
        clients: &[Client],
        unseen: &[&Client],
    ) -> Vec<(Instruction, usize)> {
        self.witness_ixs_with(run, clients, unseen, |_, _| Verdict::default()).await
    }

    /// `witness_ixs` with each witness's verdict given by `verdict(state, proof)`.
    pub async fn witness_ixs_with(
        &mut self,
        run: &Run,
        clients: &[Client],
        unseen: &[&Client],
        verdict: impl Fn(&CoordinatorState, &WitnessProofArg) -> Verdict,
    ) -> Vec<(Instruction, usize)> {
        let account = self.coordinator(run).await;
        let coordinator = &account.state.coordinator;
        let mut participants = Bloom::empty(7);
        for c in coordinator.epoch_state.clients() {
            if !unseen.iter().any(|u| u.id() == c.id) {
                participants.add(&psyche_coordinator::core::hash::sha256(&c.id.signer));
            }
        }
        let mut out = Vec::new();
        for (i, c) in clients.iter().enumerate() {
            let Some(index) = coordinator.index_of(&c.id()) else { continue };
            let Some(proof) = witness_proof(coordinator, index as u64) else { continue };
            let ix = ix_witness_with_verdict(
                run,
                &c.wallet.pubkey(),
                proof,
                participants,
                Bloom::empty(8),
                verdict(coordinator, &proof),
                empty_metadata(),
            );
            out.push((ix, i));
        }
        out
    }

    /// Witnesses for the current round, then the witness timeout: the next round starts.
    pub async fn next_round(&mut self, run: &Run, clients: &[Client], unseen: &[&Client]) {
        self.witness_round(run, clients, unseen).await;
        self.warp(1).await;
        self.tick(run).await.expect("tick");
    }
}
