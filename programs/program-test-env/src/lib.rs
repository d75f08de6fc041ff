//! The solana-program-test environment every program test of the workspace runs in, so that all
//! of them run the programs the same way: natively registered entrypoints or, with
//! `PSYCHE_SBF=1`, the SBF builds of scripts/build-sbf.sh (`<name>.so` from `SBF_OUT_DIR`); one
//! fixed fee payer; every transaction sent the one synchronous way (`process`) and its metadata
//! (compute units, logs) read back the same way; the cluster clock. What belongs to one program
//! (its instructions, decoding its accounts, its error codes) stays with that program's tests.

use solana_program_runtime::invoke_context::BuiltinFunctionWithContext;
use solana_program_test::{BanksClient, ProgramTest, ProgramTestContext};
use solana_sdk::account::Account;
use solana_sdk::clock::Clock;
use solana_sdk::compute_budget::ComputeBudgetInstruction;
use solana_sdk::instruction::{Instruction, InstructionError};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signer};
use solana_sdk::transaction::{Transaction, TransactionError};

// `native!` expands in the tests' crates, which need not name these.
#[doc(hidden)]
pub use solana_program_test as __program_test;
#[doc(hidden)]
pub use solana_sdk as __sdk;

pub use solana_program_test::BanksClientError;

pub type TxResult = Result<(), BanksClientError>;

/// Clock a test starts from (`ProgramEnv::set_time(START_TIME)`), so seeds and timestamps repeat.
pub const START_TIME: i64 = 1_700_000_000;
/// The slot `ProgramEnv::set_time` sets.
pub const START_SLOT: u64 = 1_000;

/// Whether the program tests run the SBF builds (`PSYCHE_SBF=1`) rather than native code.
pub fn sbf_mode() -> bool {
    std::env::var("PSYCHE_SBF").is_ok_and(|v| v == "1")
}

/// A keypair derived from `label` (sha256 of it as the ed25519 seed): the same on every run, so
/// recorded transactions repeat.
pub fn seeded_keypair(label: &(impl AsRef<[u8]> + ?Sized)) -> Keypair {
    let seed = solana_sdk::hash::hash(label.as_ref()).to_bytes();
    solana_sdk::signer::keypair::keypair_from_seed(&seed).expect("32-byte seed")
}

pub fn rent_exempt(space: usize) -> u64 {
    solana_sdk::rent::Rent::default().minimum_balance(space)
}

/// A program the environment loads: `<name>.so` in SBF mode, `native` otherwise.
#[derive(Clone, Copy)]
pub struct Program {
    pub name: &'static str,
    pub id: Pubkey,
    /// The natively registered entrypoint (`native!`).
    pub native: Option<BuiltinFunctionWithContext>,
}

/// The natively registered form of an Anchor program's `entry` (or of a function with its
/// signature), for `Program::native`.
///
/// Anchor's generated `entry` ties the slice and the account infos to one lifetime
/// (`&'info [AccountInfo<'info>]`); `processor!` needs a `ProcessInstruction`, generic over
/// both, so it cannot take `entry` directly (a known Anchor / program-test mismatch). The runtime
/// keeps the infos alive for the whole call, so unifying the lifetimes is sound.
#[macro_export]
macro_rules! native {
    ($entry:path) => {{
        fn native_entry<'a, 'b>(
            program_id: &$crate::__sdk::pubkey::Pubkey,
            accounts: &'a [$crate::__sdk::account_info::AccountInfo<'b>],
            data: &[u8],
        ) -> $crate::__sdk::entrypoint::ProgramResult {
            use $crate::__sdk::account_info::AccountInfo;
            // SAFETY: only shortens 'b to 'a ('b: 'a); the infos outlive this call.
            let accounts = unsafe {
                ::std::mem::transmute::<&'a [AccountInfo<'b>], &'a [AccountInfo<'a>]>(accounts)
            };
            $entry(program_id, accounts, data)
        }
        $crate::__program_test::processor!(native_entry)
    }};
}

/// Executes `tx` on the working bank and returns only once the bank is done with it.
/// `process_transaction` hands the transaction to the banks server's own thread and returns when
/// its signature status is visible, which the runtime records before it releases the accounts'
/// locks; a `process_transaction_with_metadata` sent right after could then find an account
/// still locked and come back unexecuted (`AccountInUse`, no metadata), as the cost tests did
/// under load. Every transaction of these tests goes this one synchronous way.
pub async fn process(banks: &mut BanksClient, tx: Transaction) -> TxResult {
    let out = banks.process_transaction_with_metadata(tx).await?;
    out.result.map_err(BanksClientError::TransactionError)
}

/// What one transaction cost (`ProgramEnv::send_measured`).
pub struct Measured {
    pub result: Result<(), TransactionError>,
    /// What the runtime metered: meaningful for SBF builds only (a natively registered program
    /// consumes none; the BPF programs it calls, such as SPL Token, are still counted).
    pub compute_units: u64,
    /// The serialized transaction's size.
    pub tx_bytes: usize,
    pub logs: Vec<String>,
}

pub struct ProgramEnv {
    pub ctx: ProgramTestContext,
    /// Fee payer and rent payer of every transaction: derived from a fixed seed (not
    /// program-test's random mint key) so recorded instructions are reproducible.
    payer: Keypair,
    /// Makes each transaction unique (a compute-unit price), so two otherwise identical ones in
    /// the same slot are not rejected as already processed.
    tx_counter: u64,
}

impl ProgramEnv {
    /// Starts the runtime with `programs` (at least one) and a funded payer.
    pub async fn start(programs: &[Program]) -> Self {
        let sbf = sbf_mode();
        // Without a native entrypoint program-test loads `<name>.so` (from `SBF_OUT_DIR`).
        let native = |p: &Program| if sbf { None } else { p.native };
        let (first, rest) = programs.split_first().expect("at least one program");
        let mut pt = ProgramTest::new(first.name, first.id, native(first));
        for p in rest {
            pt.add_program(p.name, p.id, native(p));
        }
        pt.prefer_bpf(sbf);
        let payer = seeded_keypair(b"payer");
        pt.add_account(
            payer.pubkey(),
            Account {
                lamports: 1_000_000 * 1_000_000_000,
                owner: solana_system_interface::program::ID,
                ..Default::default()
            },
        );
        ProgramEnv { ctx: pt.start_with_context().await, payer, tx_counter: 0 }
    }

    pub fn payer(&self) -> Keypair {
        self.payer.insecure_clone()
    }

    /// `ixs` after the compute-budget instructions (a unit limit if `cu_limit` is given, then the
    /// unique price), signed by the payer and `signers`, on a fresh blockhash: long tests outlive
    /// the 150-blockhash validity window.
    pub async fn transaction(
        &mut self,
        ixs: &[Instruction],
        signers: &[&Keypair],
        cu_limit: Option<u32>,
    ) -> Transaction {
        self.tx_counter += 1;
        let mut all: Vec<&Keypair> = vec![&self.payer];
        for k in signers {
            if !all.iter().any(|a| a.pubkey() == k.pubkey()) {
                all.push(k);
            }
        }
        let mut list = Vec::with_capacity(ixs.len() + 2);
        if let Some(cu) = cu_limit {
            list.push(ComputeBudgetInstruction::set_compute_unit_limit(cu));
        }
        list.push(ComputeBudgetInstruction::set_compute_unit_price(self.tx_counter));
        list.extend_from_slice(ixs);
        let blockhash = self.ctx.banks_client.get_latest_blockhash().await.unwrap();
        Transaction::new_signed_with_payer(&list, Some(&self.payer.pubkey()), &all, blockhash)
    }

    /// Sends `ixs` (after a compute-budget instruction, so the first of `ixs` is instruction 1)
    /// signed by the payer and `signers`.
    pub async fn send_many(&mut self, ixs: &[Instruction], signers: &[&Keypair]) -> TxResult {
        let tx = self.transaction(ixs, signers, None).await;
        process(&mut self.ctx.banks_client, tx).await
    }

    pub async fn send(&mut self, ix: Instruction, signers: &[&Keypair]) -> TxResult {
        self.send_many(&[ix], signers).await
    }

    /// Sends `ixs` with a compute-unit limit, as a client would, and reports what the
    /// transaction's metadata says it cost and its size.
    pub async fn send_measured(
        &mut self,
        ixs: &[Instruction],
        signers: &[&Keypair],
        cu_limit: u32,
    ) -> Measured {
        let tx = self.transaction(ixs, signers, Some(cu_limit)).await;
        // Wire size: the signature count (a one-byte short-vec below 128), the signatures, the
        // message.
        assert!(tx.signatures.len() < 128);
        let tx_bytes = 1 + 64 * tx.signatures.len() + tx.message_data().len();
        let out = self.ctx.banks_client.process_transaction_with_metadata(tx).await.unwrap();
        let Some(meta) = out.metadata else {
            panic!("no transaction metadata (the transaction was not executed): {:?}", out.result)
        };
        Measured {
            result: out.result,
            compute_units: meta.compute_units_consumed,
            tx_bytes,
            logs: meta.log_messages,
        }
    }

    /// Moves 10 SOL from the payer to `to`.
    pub async fn fund(&mut self, to: &Pubkey) {
        let ix = solana_system_interface::instruction::transfer(
            &self.payer.pubkey(),
            to,
            10_000_000_000,
        );
        self.send(ix, &[]).await.unwrap();
    }

    // --- clock -------------------------------------------------------------------------------

    pub async fn clock(&mut self) -> Clock {
        self.ctx.banks_client.get_sysvar().await.unwrap()
    }

    pub async fn now(&mut self) -> i64 {
        self.clock().await.unix_timestamp
    }

    /// Sets the cluster time to `unix_timestamp`, at slot `START_SLOT`.
    pub async fn set_time(&mut self, unix_timestamp: i64) {
        let mut clock = self.clock().await;
        clock.unix_timestamp = unix_timestamp;
        clock.slot = START_SLOT;
        self.ctx.set_sysvar(&clock);
    }

    /// Moves the clock `seconds` forward (and the slot by one, so seeds differ per warp).
    pub async fn warp(&mut self, seconds: i64) {
        let mut clock = self.clock().await;
        clock.unix_timestamp += seconds;
        clock.slot += 1;
        self.ctx.set_sysvar(&clock);
    }

    // --- reads -------------------------------------------------------------------------------

    pub async fn account(&mut self, address: Pubkey) -> Option<Account> {
        self.ctx.banks_client.get_account(address).await.unwrap()
    }

    pub async fn account_data(&mut self, address: Pubkey) -> Option<Vec<u8>> {
        self.account(address).await.map(|a| a.data)
    }

    pub async fn lamports(&mut self, address: Pubkey) -> u64 {
        self.ctx.banks_client.get_balance(address).await.unwrap()
    }
}

// --- errors ----------------------------------------------------------------------------------

/// The custom error code of a failed transaction, which must come from instruction `index`
/// (0 is the compute-budget instruction of `send`).
#[track_caller]
pub fn custom_code_at(result: TxResult, index: u8) -> u32 {
    match result.expect_err("the transaction should fail").unwrap() {
        TransactionError::InstructionError(i, InstructionError::Custom(code)) if i == index => code,
        other => panic!("unexpected error {other:?}"),
    }
}

/// `custom_code_at` the first instruction after `send`'s compute-budget one.
#[track_caller]
pub fn custom_code(result: TxResult) -> u32 {
    custom_code_at(result, 1)
}
