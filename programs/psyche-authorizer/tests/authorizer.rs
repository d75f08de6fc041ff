//! The authorizer's instructions through the real Solana runtime (solana-program-test, in the
//! shared program-test environment: natively registered, or with `PSYCHE_SBF=1` the SBF build).

use std::ops::{Deref, DerefMut};

use anchor_lang::system_program;
use anchor_lang::{AccountDeserialize, InstructionData, ToAccountMetas};
use program_test_env::{custom_code, native, BanksClientError, Program, ProgramEnv, TxResult};
use psyche_authorizer::constants::{CLOSE_DELAY_WITH_DELEGATES_SECONDS, MAX_DELEGATES};
use psyche_authorizer::error::AuthorizerError;
use psyche_authorizer::{accounts, instruction, Authorization};
use solana_sdk::instruction::Instruction;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signer};

const SCOPE: &[u8] = b"CoordinatorJoinRun";

/// The shared environment with the authorizer's instructions on top.
struct Env(ProgramEnv);

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
    async fn new() -> Self {
        let authorizer = Program {
            name: "psyche_authorizer",
            id: psyche_authorizer::ID,
            native: native!(psyche_authorizer::entry),
        };
        Env(ProgramEnv::start(&[authorizer]).await)
    }

    async fn authorization(&mut self, address: Pubkey) -> Option<Authorization> {
        let data = self.account_data(address).await?;
        Some(Authorization::try_deserialize(&mut data.as_slice()).unwrap())
    }

    async fn create(
        &mut self,
        grantor: &Keypair,
        grantee: Pubkey,
        scope: &[u8],
    ) -> Result<Pubkey, BanksClientError> {
        let (address, _) = Authorization::find_pda(&grantor.pubkey(), &grantee, scope);
        let ix = create_ix(&self.payer().pubkey(), &grantor.pubkey(), address, grantee, scope);
        self.send(ix, &[grantor]).await.map(|_| address)
    }

    async fn grantor_update(
        &mut self,
        grantor: &Keypair,
        address: Pubkey,
        active: bool,
    ) -> TxResult {
        let ix = Instruction {
            program_id: psyche_authorizer::ID,
            accounts: accounts::AuthorizationGrantorUpdate {
                grantor: grantor.pubkey(),
                authorization: address,
            }
            .to_account_metas(None),
            data: instruction::AuthorizationGrantorUpdate {
                params: psyche_authorizer::AuthorizationGrantorUpdateParams { active },
            }
            .data(),
        };
        self.send(ix, &[grantor]).await
    }

    async fn grantee_update(
        &mut self,
        grantee: &Keypair,
        address: Pubkey,
        delegates_clear: bool,
        delegates_added: Vec<Pubkey>,
    ) -> TxResult {
        let ix = Instruction {
            program_id: psyche_authorizer::ID,
            accounts: accounts::AuthorizationGranteeUpdate {
                payer: self.payer().pubkey(),
                grantee: grantee.pubkey(),
                authorization: address,
                system_program: system_program::ID,
            }
            .to_account_metas(None),
            data: instruction::AuthorizationGranteeUpdate {
                params: psyche_authorizer::AuthorizationGranteeUpdateParams {
                    delegates_clear,
                    delegates_added,
                },
            }
            .data(),
        };
        self.send(ix, &[grantee]).await
    }

    async fn close(&mut self, grantor: &Keypair, address: Pubkey, spill: Pubkey) -> TxResult {
        let ix = Instruction {
            program_id: psyche_authorizer::ID,
            accounts: accounts::AuthorizationClose {
                grantor: grantor.pubkey(),
                spill,
                authorization: address,
            }
            .to_account_metas(None),
            data: instruction::AuthorizationClose {
                params: psyche_authorizer::AuthorizationCloseParams {},
            }
            .data(),
        };
        self.send(ix, &[grantor]).await
    }
}

fn create_ix(
    payer: &Pubkey,
    grantor: &Pubkey,
    address: Pubkey,
    grantee: Pubkey,
    scope: &[u8],
) -> Instruction {
    Instruction {
        program_id: psyche_authorizer::ID,
        accounts: accounts::AuthorizationCreate {
            payer: *payer,
            grantor: *grantor,
            authorization: address,
            system_program: system_program::ID,
        }
        .to_account_metas(None),
        data: instruction::AuthorizationCreate {
            params: psyche_authorizer::AuthorizationCreateParams { grantee, scope: scope.to_vec() },
        }
        .data(),
    }
}

fn code(e: AuthorizerError) -> u32 {
    e.into()
}

fn anchor_code(e: anchor_lang::error::ErrorCode) -> u32 {
    e.into()
}

#[tokio::test]
async fn create_activate_and_validate() {
    let mut env = Env::new().await;
    let grantor = Keypair::new();
    let grantee = Keypair::new();
    let address = env.create(&grantor, grantee.pubkey(), SCOPE).await.unwrap();

    let auth = env.authorization(address).await.unwrap();
    let (_, bump) = Authorization::find_pda(&grantor.pubkey(), &grantee.pubkey(), SCOPE);
    assert_eq!(
        auth,
        Authorization {
            bump,
            grantor: grantor.pubkey(),
            grantee: grantee.pubkey(),
            scope: SCOPE.to_vec(),
            active: false,
            delegates: vec![],
            grantor_update_unix_timestamp: 0,
        }
    );
    // Created inactive: not valid for anyone yet.
    assert!(!auth.is_valid_for(&grantor.pubkey(), &grantee.pubkey(), SCOPE));

    env.grantor_update(&grantor, address, true).await.unwrap();
    let now = env.now().await;
    let auth = env.authorization(address).await.unwrap();
    assert!(auth.active);
    assert_eq!(auth.grantor_update_unix_timestamp, now);
    assert!(auth.is_valid_for(&grantor.pubkey(), &grantee.pubkey(), SCOPE));
    // Wrong user, grantor or scope.
    assert!(!auth.is_valid_for(&grantor.pubkey(), &Keypair::new().pubkey(), SCOPE));
    assert!(!auth.is_valid_for(&grantee.pubkey(), &grantee.pubkey(), SCOPE));
    assert!(!auth.is_valid_for(&grantor.pubkey(), &grantee.pubkey(), b"OtherScope"));

    // Deactivation makes it invalid again.
    env.grantor_update(&grantor, address, false).await.unwrap();
    let auth = env.authorization(address).await.unwrap();
    assert!(!auth.is_valid_for(&grantor.pubkey(), &grantee.pubkey(), SCOPE));
}

#[tokio::test]
async fn permissionless_grantee_admits_everyone() {
    let mut env = Env::new().await;
    let grantor = Keypair::new();
    let address = env.create(&grantor, Pubkey::default(), SCOPE).await.unwrap();
    env.grantor_update(&grantor, address, true).await.unwrap();
    let auth = env.authorization(address).await.unwrap();
    for _ in 0..3 {
        assert!(auth.is_valid_for(&grantor.pubkey(), &Keypair::new().pubkey(), SCOPE));
    }
    assert!(!auth.is_valid_for(&Keypair::new().pubkey(), &Keypair::new().pubkey(), SCOPE));
}

#[tokio::test]
async fn create_rejects_long_scope_duplicates_and_missing_grantor_signature() {
    let mut env = Env::new().await;
    let grantor = Keypair::new();
    let grantee = Pubkey::new_unique();

    // 33 bytes cannot be a seed; the PDA cannot even be derived, so build the instruction with a
    // placeholder address: the program must refuse before anything else matters.
    let long = [7u8; 33];
    let ix =
        create_ix(&env.payer().pubkey(), &grantor.pubkey(), Pubkey::new_unique(), grantee, &long);
    assert_eq!(custom_code(env.send(ix, &[&grantor]).await), code(AuthorizerError::ScopeTooLong));

    let address = env.create(&grantor, grantee, SCOPE).await.unwrap();
    // The same (grantor, grantee, scope) twice: the PDA already exists.
    assert!(env.create(&grantor, grantee, SCOPE).await.is_err());
    assert!(env.authorization(address).await.is_some());

    // The grantor's signature is required (the meta says signer, the transaction lacks it).
    let other_scope = b"x";
    let (address, _) = Authorization::find_pda(&grantor.pubkey(), &grantee, other_scope);
    let mut ix = create_ix(&env.payer().pubkey(), &grantor.pubkey(), address, grantee, other_scope);
    ix.accounts[1].is_signer = false;
    assert_eq!(
        custom_code(env.send(ix, &[]).await),
        anchor_code(anchor_lang::error::ErrorCode::AccountNotSigner)
    );
}

#[tokio::test]
async fn only_the_grantor_updates_and_only_the_grantee_edits_delegates() {
    let mut env = Env::new().await;
    let grantor = Keypair::new();
    let grantee = Keypair::new();
    let stranger = Keypair::new();
    let address = env.create(&grantor, grantee.pubkey(), SCOPE).await.unwrap();

    assert_eq!(
        custom_code(env.grantor_update(&stranger, address, true).await),
        code(AuthorizerError::NotGrantor)
    );
    assert_eq!(
        custom_code(env.grantor_update(&grantee, address, true).await),
        code(AuthorizerError::NotGrantor)
    );
    assert_eq!(
        custom_code(env.grantee_update(&stranger, address, false, vec![stranger.pubkey()]).await),
        code(AuthorizerError::NotGrantee)
    );
    assert_eq!(
        custom_code(env.grantee_update(&grantor, address, false, vec![grantor.pubkey()]).await),
        code(AuthorizerError::NotGrantee)
    );
    assert_eq!(
        custom_code(env.close(&stranger, address, stranger.pubkey()).await),
        code(AuthorizerError::NotGrantor)
    );
    let auth = env.authorization(address).await.unwrap();
    assert!(!auth.active && auth.delegates.is_empty());
}

#[tokio::test]
async fn delegates_are_added_cleared_bounded_and_resized() {
    let mut env = Env::new().await;
    let grantor = Keypair::new();
    let grantee = Keypair::new();
    let address = env.create(&grantor, grantee.pubkey(), SCOPE).await.unwrap();
    env.grantor_update(&grantor, address, true).await.unwrap();

    let d1 = Pubkey::new_unique();
    let d2 = Pubkey::new_unique();
    let d3 = Pubkey::new_unique();
    env.grantee_update(&grantee, address, false, vec![d1, d2]).await.unwrap();
    let auth = env.authorization(address).await.unwrap();
    assert_eq!(auth.delegates, vec![d1, d2]);
    assert!(auth.is_valid_for(&grantor.pubkey(), &d1, SCOPE));
    assert!(auth.is_valid_for(&grantor.pubkey(), &d2, SCOPE));
    assert!(!auth.is_valid_for(&grantor.pubkey(), &d3, SCOPE));

    // Append without clearing, then clear and replace.
    env.grantee_update(&grantee, address, false, vec![d3]).await.unwrap();
    assert_eq!(env.authorization(address).await.unwrap().delegates, vec![d1, d2, d3]);
    env.grantee_update(&grantee, address, true, vec![d2]).await.unwrap();
    let auth = env.authorization(address).await.unwrap();
    assert_eq!(auth.delegates, vec![d2]);
    assert!(!auth.is_valid_for(&grantor.pubkey(), &d1, SCOPE));

    // The account is exactly as large as its content and stays rent exempt (shrinks refund).
    let account = env.ctx.banks_client.get_account(address).await.unwrap().unwrap();
    assert_eq!(account.data.len(), Authorization::space_with_discriminator(SCOPE.len(), 1));
    let rent = env.ctx.banks_client.get_rent().await.unwrap();
    assert_eq!(account.lamports, rent.minimum_balance(account.data.len()));

    // The bound: 64 fit (in two steps), one more does not, and the failed call changes nothing.
    let many: Vec<Pubkey> = (0..MAX_DELEGATES - 1).map(|_| Pubkey::new_unique()).collect();
    env.grantee_update(&grantee, address, false, many[..31].to_vec()).await.unwrap();
    env.grantee_update(&grantee, address, false, many[31..].to_vec()).await.unwrap();
    assert_eq!(env.authorization(address).await.unwrap().delegates.len(), MAX_DELEGATES);
    assert_eq!(
        custom_code(env.grantee_update(&grantee, address, false, vec![d1]).await),
        code(AuthorizerError::TooManyDelegates)
    );
    assert_eq!(env.authorization(address).await.unwrap().delegates.len(), MAX_DELEGATES);
    // Clearing and re-adding up to the bound is fine.
    env.grantee_update(&grantee, address, true, vec![d1]).await.unwrap();
    assert_eq!(env.authorization(address).await.unwrap().delegates, vec![d1]);
}

#[tokio::test]
async fn close_requires_inactive_and_refunds_spill() {
    let mut env = Env::new().await;
    let grantor = Keypair::new();
    let address = env.create(&grantor, Pubkey::default(), SCOPE).await.unwrap();
    env.grantor_update(&grantor, address, true).await.unwrap();

    let spill = Pubkey::new_unique();
    assert_eq!(
        custom_code(env.close(&grantor, address, spill).await),
        code(AuthorizerError::AuthorizationActiveIsTrue)
    );

    env.grantor_update(&grantor, address, false).await.unwrap();
    let rent = env.lamports(address).await;
    // Without delegates, an inactive authorization closes at once.
    env.close(&grantor, address, spill).await.unwrap();
    assert!(env.authorization(address).await.is_none());
    assert_eq!(env.lamports(spill).await, rent);
}

#[tokio::test]
async fn close_with_delegates_waits_thirty_days_after_the_last_grantor_update() {
    let mut env = Env::new().await;
    let grantor = Keypair::new();
    let grantee = Keypair::new();
    env.fund(&grantee.pubkey()).await;
    let address = env.create(&grantor, grantee.pubkey(), SCOPE).await.unwrap();
    env.grantor_update(&grantor, address, true).await.unwrap();
    env.grantee_update(&grantee, address, false, vec![Pubkey::new_unique()]).await.unwrap();
    env.grantor_update(&grantor, address, false).await.unwrap();

    let spill = Pubkey::new_unique();
    let too_early = code(AuthorizerError::AuthorizationClosingConditionsNotReachedYet);
    assert_eq!(custom_code(env.close(&grantor, address, spill).await), too_early);
    env.warp(CLOSE_DELAY_WITH_DELEGATES_SECONDS - 1).await;
    assert_eq!(custom_code(env.close(&grantor, address, spill).await), too_early);

    // A grantor update restarts the delay.
    env.grantor_update(&grantor, address, false).await.unwrap();
    env.warp(1).await;
    assert_eq!(custom_code(env.close(&grantor, address, spill).await), too_early);
    env.warp(CLOSE_DELAY_WITH_DELEGATES_SECONDS - 1).await;
    env.close(&grantor, address, spill).await.unwrap();
    assert!(env.authorization(address).await.is_none());
    assert!(env.lamports(spill).await > 0);
}
