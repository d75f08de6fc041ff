//! Program-test harness for the mining pool: the program in the shared program-test environment
//! (`program-test-env`: registered natively or, with `PSYCHE_SBF=1`, the SBF build from
//! `SBF_OUT_DIR`), with the SPL Token program that solana-program-test bundles (its BPF build,
//! `spl_token-3.5.0.so`); mint and token-account helpers, instruction builders, account readers
//! and error helpers. Used by the tests of this directory (`mod harness;`).

#![allow(dead_code)]

use std::ops::{Deref, DerefMut};

use anchor_lang::solana_program::system_instruction;
use anchor_lang::system_program;
use anchor_lang::{AccountDeserialize, InstructionData, ToAccountMetas};
use anchor_spl::token::spl_token;
use program_test_env::{native, Program, ProgramEnv};
use psyche_mining_pool::error::MiningPoolError;
use psyche_mining_pool::{
    accounts, instruction, Lender, LenderClaimParams, LenderDepositParams, Pool, PoolCreateParams,
    PoolExtractParams, PoolRedeemableDepositParams, PoolUpdateParams,
};
use solana_sdk::instruction::Instruction;
use solana_sdk::program_pack::Pack;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signer};

#[allow(unused_imports)] // not every test binary uses each
pub use program_test_env::{
    custom_code, custom_code_at, rent_exempt, sbf_mode, seeded_keypair, Measured, TxResult,
};

/// The shared environment (sending, metadata, reads) with the pool's own helpers on top.
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
        let pool = Program {
            name: "psyche_mining_pool",
            id: psyche_mining_pool::ID,
            native: native!(psyche_mining_pool::entry),
        };
        let env = Env(ProgramEnv::start(&[pool]).await);
        // solana-program-test ships SPL Token as a BPF program; without it nothing here works.
        let token = env.ctx.banks_client.clone().get_account(spl_token::ID).await.unwrap();
        assert!(token.is_some_and(|a| a.executable), "SPL Token is not loaded");
        env
    }

    // --- reads -------------------------------------------------------------------------------

    pub async fn pool(&mut self, address: Pubkey) -> Pool {
        let data = self.account_data(address).await.expect("pool exists");
        Pool::try_deserialize(&mut data.as_slice()).unwrap()
    }

    pub async fn lender(&mut self, address: Pubkey) -> Lender {
        let data = self.account_data(address).await.expect("lender exists");
        Lender::try_deserialize(&mut data.as_slice()).unwrap()
    }

    pub async fn token_account(&mut self, address: Pubkey) -> spl_token::state::Account {
        let data = self.account_data(address).await.expect("token account exists");
        spl_token::state::Account::unpack(&data).unwrap()
    }

    pub async fn balance(&mut self, address: Pubkey) -> u64 {
        self.token_account(address).await.amount
    }

    // --- SPL Token -----------------------------------------------------------------------------

    /// Instructions creating the mint `mint` (6 decimals, the payer as mint authority).
    pub fn create_mint_ixs(&self, mint: &Pubkey) -> Vec<Instruction> {
        let payer = self.payer().pubkey();
        vec![
            system_instruction::create_account(
                &payer,
                mint,
                rent_exempt(spl_token::state::Mint::LEN),
                spl_token::state::Mint::LEN as u64,
                &spl_token::ID,
            ),
            spl_token::instruction::initialize_mint2(&spl_token::ID, mint, &payer, None, 6)
                .unwrap(),
        ]
    }

    /// Instructions creating the token account `account` of `mint` owned by `owner`.
    pub fn create_token_account_ixs(
        &self,
        account: &Pubkey,
        mint: &Pubkey,
        owner: &Pubkey,
    ) -> Vec<Instruction> {
        vec![
            system_instruction::create_account(
                &self.payer().pubkey(),
                account,
                rent_exempt(spl_token::state::Account::LEN),
                spl_token::state::Account::LEN as u64,
                &spl_token::ID,
            ),
            spl_token::instruction::initialize_account3(&spl_token::ID, account, mint, owner)
                .unwrap(),
        ]
    }

    pub fn mint_to_ix(&self, mint: &Pubkey, account: &Pubkey, amount: u64) -> Instruction {
        spl_token::instruction::mint_to(
            &spl_token::ID,
            mint,
            account,
            &self.payer().pubkey(),
            &[],
            amount,
        )
        .unwrap()
    }

    /// A new mint at the keypair derived from `label`.
    pub async fn create_mint(&mut self, label: &str) -> Pubkey {
        let key = seeded_keypair(label);
        let ixs = self.create_mint_ixs(&key.pubkey());
        self.send_many(&ixs, &[&key]).await.expect("create mint");
        key.pubkey()
    }

    /// A new token account of `mint` for `owner` at the keypair derived from `label`, holding
    /// `amount` freshly minted tokens.
    pub async fn create_token_account(
        &mut self,
        label: &str,
        mint: &Pubkey,
        owner: &Pubkey,
        amount: u64,
    ) -> Pubkey {
        let key = seeded_keypair(label);
        let mut ixs = self.create_token_account_ixs(&key.pubkey(), mint, owner);
        if amount > 0 {
            ixs.push(self.mint_to_ix(mint, &key.pubkey(), amount));
        }
        self.send_many(&ixs, &[&key]).await.expect("create token account");
        key.pubkey()
    }

    pub async fn mint_to(&mut self, mint: &Pubkey, account: &Pubkey, amount: u64) {
        let ix = self.mint_to_ix(mint, account, amount);
        self.send(ix, &[]).await.expect("mint_to");
    }

    // --- pools and lenders ----------------------------------------------------------------------

    /// Creates the two mints, the pool `index` with cap `cap`, and the authority's own token
    /// accounts (`authority_collateral` empty, `authority_redeemable` holding `redeemable`).
    pub async fn create_pool(
        &mut self,
        label: &str,
        index: u64,
        cap: u64,
        redeemable: u64,
    ) -> PoolKeys {
        let keys = self.pool_keys(label, index).await;
        let ix = ix_pool_create(&self.payer().pubkey(), &keys, cap);
        self.send(ix, &[&keys.authority]).await.expect("pool_create");
        self.mint_to(&keys.redeemable_mint, &keys.authority_redeemable, redeemable).await;
        keys
    }

    /// The mints and the authority's token accounts of a pool, without creating the pool.
    pub async fn pool_keys(&mut self, label: &str, index: u64) -> PoolKeys {
        let authority = seeded_keypair(&format!("{label}/authority"));
        let collateral_mint = self.create_mint(&format!("{label}/collateral_mint")).await;
        let redeemable_mint = self.create_mint(&format!("{label}/redeemable_mint")).await;
        let authority_collateral = self
            .create_token_account(
                &format!("{label}/authority_collateral"),
                &collateral_mint,
                &authority.pubkey(),
                0,
            )
            .await;
        let authority_redeemable = self
            .create_token_account(
                &format!("{label}/authority_redeemable"),
                &redeemable_mint,
                &authority.pubkey(),
                0,
            )
            .await;
        PoolKeys::new(
            index,
            authority,
            collateral_mint,
            redeemable_mint,
            authority_collateral,
            authority_redeemable,
        )
    }

    /// A user with token accounts of both mints (`collateral` tokens to lend) and its lender
    /// account, created.
    pub async fn create_lender(
        &mut self,
        pool: &PoolKeys,
        label: &str,
        collateral: u64,
    ) -> LenderKeys {
        let lender = self.lender_keys(pool, label, collateral).await;
        let ix = ix_lender_create(
            &self.payer().pubkey(),
            &lender.user.pubkey(),
            pool.pool,
            lender.lender,
        );
        self.send(ix, &[&lender.user]).await.expect("lender_create");
        lender
    }

    /// A user's keys and token accounts, without its lender account.
    pub async fn lender_keys(
        &mut self,
        pool: &PoolKeys,
        label: &str,
        collateral: u64,
    ) -> LenderKeys {
        let user = seeded_keypair(&format!("{label}/user"));
        let collateral_account = self
            .create_token_account(
                &format!("{label}/collateral"),
                &pool.collateral_mint,
                &user.pubkey(),
                collateral,
            )
            .await;
        let redeemable_account = self
            .create_token_account(
                &format!("{label}/redeemable"),
                &pool.redeemable_mint,
                &user.pubkey(),
                0,
            )
            .await;
        let lender = Lender::find_pda(&pool.pool, &user.pubkey()).0;
        LenderKeys { user, lender, collateral: collateral_account, redeemable: redeemable_account }
    }

    pub async fn update(
        &mut self,
        pool: &PoolKeys,
        cap: Option<u64>,
        freeze: Option<bool>,
    ) -> TxResult {
        let ix = ix_pool_update(&pool.authority.pubkey(), pool.pool, cap, freeze);
        self.send(ix, &[&pool.authority]).await
    }

    pub async fn freeze(&mut self, pool: &PoolKeys) {
        self.update(pool, None, Some(true)).await.expect("freeze");
    }

    pub async fn deposit(&mut self, pool: &PoolKeys, lender: &LenderKeys, amount: u64) -> TxResult {
        let ix = ix_lender_deposit(
            &lender.user.pubkey(),
            lender.collateral,
            pool,
            lender.lender,
            amount,
        );
        self.send(ix, &[&lender.user]).await
    }

    pub async fn claim(&mut self, pool: &PoolKeys, lender: &LenderKeys, amount: u64) -> TxResult {
        let ix =
            ix_lender_claim(&lender.user.pubkey(), lender.redeemable, pool, lender.lender, amount);
        self.send(ix, &[&lender.user]).await
    }

    pub async fn extract(&mut self, pool: &PoolKeys, amount: u64) -> TxResult {
        let ix = ix_pool_extract(&pool.authority.pubkey(), pool.authority_collateral, pool, amount);
        self.send(ix, &[&pool.authority]).await
    }

    pub async fn redeemable_deposit(&mut self, pool: &PoolKeys, amount: u64) -> TxResult {
        let ix = ix_pool_redeemable_deposit(
            &pool.authority.pubkey(),
            pool.authority_redeemable,
            pool,
            amount,
        );
        self.send(ix, &[&pool.authority]).await
    }
}

/// A pool's addresses and its authority.
pub struct PoolKeys {
    pub index: u64,
    pub pool: Pubkey,
    pub pool_collateral: Pubkey,
    pub pool_redeemable: Pubkey,
    pub authority: Keypair,
    pub collateral_mint: Pubkey,
    pub redeemable_mint: Pubkey,
    /// The authority's token accounts (extraction target, earnings source).
    pub authority_collateral: Pubkey,
    pub authority_redeemable: Pubkey,
}

impl PoolKeys {
    pub fn new(
        index: u64,
        authority: Keypair,
        collateral_mint: Pubkey,
        redeemable_mint: Pubkey,
        authority_collateral: Pubkey,
        authority_redeemable: Pubkey,
    ) -> Self {
        let pool = Pool::find_pda(index).0;
        PoolKeys {
            index,
            pool,
            pool_collateral: Pool::find_collateral_pda(&pool).0,
            pool_redeemable: Pool::find_redeemable_pda(&pool).0,
            authority,
            collateral_mint,
            redeemable_mint,
            authority_collateral,
            authority_redeemable,
        }
    }
}

/// A lending user: its wallet, lender PDA and token accounts.
pub struct LenderKeys {
    pub user: Keypair,
    pub lender: Pubkey,
    pub collateral: Pubkey,
    pub redeemable: Pubkey,
}

// --- instruction builders ------------------------------------------------------------------------

fn ix(accounts: impl ToAccountMetas, data: impl InstructionData) -> Instruction {
    Instruction {
        program_id: psyche_mining_pool::ID,
        accounts: accounts.to_account_metas(None),
        data: data.data(),
    }
}

pub fn ix_pool_create(payer: &Pubkey, pool: &PoolKeys, cap: u64) -> Instruction {
    ix(
        accounts::PoolCreate {
            payer: *payer,
            authority: pool.authority.pubkey(),
            pool: pool.pool,
            collateral_mint: pool.collateral_mint,
            redeemable_mint: pool.redeemable_mint,
            pool_collateral: pool.pool_collateral,
            pool_redeemable: pool.pool_redeemable,
            token_program: spl_token::ID,
            system_program: system_program::ID,
        },
        instruction::PoolCreate {
            params: PoolCreateParams { index: pool.index, max_deposit_collateral_amount: cap },
        },
    )
}

pub fn ix_pool_update(
    authority: &Pubkey,
    pool: Pubkey,
    cap: Option<u64>,
    freeze: Option<bool>,
) -> Instruction {
    ix(
        accounts::PoolUpdate { authority: *authority, pool },
        instruction::PoolUpdate {
            params: PoolUpdateParams { max_deposit_collateral_amount: cap, freeze },
        },
    )
}

pub fn ix_pool_extract(
    authority: &Pubkey,
    authority_collateral: Pubkey,
    pool: &PoolKeys,
    amount: u64,
) -> Instruction {
    ix_pool_extract_with(authority, authority_collateral, pool.pool, pool.pool_collateral, amount)
}

/// `pool_extract` with any pool token account (the program must refuse a wrong one).
pub fn ix_pool_extract_with(
    authority: &Pubkey,
    authority_collateral: Pubkey,
    pool: Pubkey,
    pool_collateral: Pubkey,
    amount: u64,
) -> Instruction {
    ix(
        accounts::PoolExtract {
            authority: *authority,
            authority_collateral,
            pool,
            pool_collateral,
            token_program: spl_token::ID,
        },
        instruction::PoolExtract { params: PoolExtractParams { collateral_amount: amount } },
    )
}

pub fn ix_pool_redeemable_deposit(
    authority: &Pubkey,
    authority_redeemable: Pubkey,
    pool: &PoolKeys,
    amount: u64,
) -> Instruction {
    ix_pool_redeemable_deposit_with(
        authority,
        authority_redeemable,
        pool.pool,
        pool.pool_redeemable,
        amount,
    )
}

pub fn ix_pool_redeemable_deposit_with(
    authority: &Pubkey,
    authority_redeemable: Pubkey,
    pool: Pubkey,
    pool_redeemable: Pubkey,
    amount: u64,
) -> Instruction {
    ix(
        accounts::PoolRedeemableDeposit {
            authority: *authority,
            authority_redeemable,
            pool,
            pool_redeemable,
            token_program: spl_token::ID,
        },
        instruction::PoolRedeemableDeposit {
            params: PoolRedeemableDepositParams { redeemable_amount: amount },
        },
    )
}

pub fn ix_lender_create(
    payer: &Pubkey,
    user: &Pubkey,
    pool: Pubkey,
    lender: Pubkey,
) -> Instruction {
    ix(
        accounts::LenderCreate {
            payer: *payer,
            user: *user,
            pool,
            lender,
            system_program: system_program::ID,
        },
        instruction::LenderCreate {},
    )
}

pub fn ix_lender_deposit(
    user: &Pubkey,
    user_collateral: Pubkey,
    pool: &PoolKeys,
    lender: Pubkey,
    amount: u64,
) -> Instruction {
    ix_lender_deposit_with(user, user_collateral, pool.pool, pool.pool_collateral, lender, amount)
}

pub fn ix_lender_deposit_with(
    user: &Pubkey,
    user_collateral: Pubkey,
    pool: Pubkey,
    pool_collateral: Pubkey,
    lender: Pubkey,
    amount: u64,
) -> Instruction {
    ix(
        accounts::LenderDeposit {
            user: *user,
            user_collateral,
            pool,
            pool_collateral,
            lender,
            token_program: spl_token::ID,
        },
        instruction::LenderDeposit { params: LenderDepositParams { collateral_amount: amount } },
    )
}

pub fn ix_lender_claim(
    user: &Pubkey,
    user_redeemable: Pubkey,
    pool: &PoolKeys,
    lender: Pubkey,
    amount: u64,
) -> Instruction {
    ix_lender_claim_with(user, user_redeemable, pool.pool, pool.pool_redeemable, lender, amount)
}

pub fn ix_lender_claim_with(
    user: &Pubkey,
    user_redeemable: Pubkey,
    pool: Pubkey,
    pool_redeemable: Pubkey,
    lender: Pubkey,
    amount: u64,
) -> Instruction {
    ix(
        accounts::LenderClaim {
            user: *user,
            user_redeemable,
            pool,
            pool_redeemable,
            lender,
            token_program: spl_token::ID,
        },
        instruction::LenderClaim { params: LenderClaimParams { redeemable_amount: amount } },
    )
}

// --- errors ------------------------------------------------------------------------------------

pub fn code(e: MiningPoolError) -> u32 {
    e.into()
}

pub fn anchor_code(e: anchor_lang::error::ErrorCode) -> u32 {
    e.into()
}

#[track_caller]
pub fn assert_err(result: TxResult, e: MiningPoolError) {
    let got = custom_code(result);
    assert_eq!(got, code(e), "expected {e:?} ({}), got code {got}", code(e));
}

#[track_caller]
pub fn assert_anchor_err(result: TxResult, e: anchor_lang::error::ErrorCode) {
    let got = custom_code(result);
    assert_eq!(got, anchor_code(e), "expected {e:?} ({}), got code {got}", anchor_code(e));
}

/// An SPL Token error raised inside the program's transfer CPI.
#[track_caller]
pub fn assert_token_err(result: TxResult, e: spl_token::error::TokenError) {
    let got = custom_code(result);
    let want = e.clone() as u32;
    assert_eq!(got, want, "expected token error {e:?}, got code {got}");
}

/// Lowercase hex of `bytes` (instruction data in the vectors).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
