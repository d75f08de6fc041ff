use anchor_lang::prelude::*;
use psyche_coordinator::core::{CoordinatorConfig, Model, Progress, RunMetadata};
use psyche_coordinator::program::PsycheCoordinator;

use crate::constants::RUN_SEEDS_PREFIX;
use crate::error::TreasurerError;
use crate::state::Run;

/// The run's main authority changes the coordinator through the `Run` PDA, its
/// `main_authority`: each given field is forwarded to the coordinator's owner instruction, which
/// applies its own rules (config, model, progress and client version only while halted).
///
/// Refused once the run is winding down (`RunWindingDown`): a resume would let the run earn
/// points the grace period does not leave time to claim.
///
/// CPIs, in this order and only for what is given: `update(metadata, config, model, progress)`,
/// `update_client_version`, `set_future_epoch_rates`, `set_paused` (last, so a resume checks the
/// new config and model).
///
/// Accounts:
/// 0. `[signer]` authority: must be `run.main_authority`.
/// 1. `[]` run: the `Run` PDA (signs the CPIs).
/// 2. `[]` coordinator_instance: must be `run.coordinator_instance`.
/// 3. `[writable]` coordinator_account: must be `run.coordinator_account`.
/// 4. `[]` coordinator_program.
#[derive(Accounts)]
pub struct RunUpdate<'info> {
    /// The run's main authority.
    pub authority: Signer<'info>,

    /// The run; owner and discriminator checked by Anchor (only this program creates `Run`
    /// accounts, and only at their PDA).
    #[account(
        constraint = run.main_authority == authority.key() @ TreasurerError::NotRunAuthority,
        has_one = coordinator_instance @ TreasurerError::CoordinatorInstanceMismatch,
        has_one = coordinator_account @ TreasurerError::CoordinatorAccountMismatch,
    )]
    pub run: Box<Account<'info, Run>>,

    /// CHECK: equal to `run.coordinator_instance`; the coordinator checks the rest.
    pub coordinator_instance: UncheckedAccount<'info>,

    /// CHECK: equal to `run.coordinator_account`; the coordinator checks the rest.
    #[account(mut)]
    pub coordinator_account: UncheckedAccount<'info>,

    /// The psyche coordinator.
    pub coordinator_program: Program<'info, PsycheCoordinator>,
}

/// The large values are boxed: SBF stack frames are 4 KB (`Option<Box<T>>` is borsh-encoded
/// exactly as `Option<T>`, so the instruction bytes and the IDL do not change).
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct RunUpdateParams {
    pub metadata: Option<Box<RunMetadata>>,
    pub config: Option<Box<CoordinatorConfig>>,
    pub model: Option<Box<Model>>,
    pub progress: Option<Progress>,
    pub epoch_earning_rate_total_shared: Option<u64>,
    pub epoch_slashing_rate_per_client: Option<u64>,
    pub paused: Option<bool>,
    pub client_version: Option<String>,
}

impl RunUpdateParams {
    fn is_empty(&self) -> bool {
        self.metadata.is_none()
            && self.config.is_none()
            && self.model.is_none()
            && self.progress.is_none()
            && self.epoch_earning_rate_total_shared.is_none()
            && self.epoch_slashing_rate_per_client.is_none()
            && self.paused.is_none()
            && self.client_version.is_none()
    }
}

pub fn run_update_processor(ctx: Context<RunUpdate>, params: RunUpdateParams) -> Result<()> {
    require!(!params.is_empty(), TreasurerError::RunUpdateEmpty);
    require!(ctx.accounts.run.wind_down_at == 0, TreasurerError::RunWindingDown);

    let run = &ctx.accounts.run;
    let index = run.index.to_le_bytes();
    let bump = [run.bump];
    let seeds: &[&[u8]] = &[RUN_SEEDS_PREFIX, &index, &bump];
    let signer = &[seeds];
    let owner = || {
        CpiContext::new_with_signer(
            ctx.accounts.coordinator_program.to_account_info(),
            psyche_coordinator::cpi::accounts::OwnerCoordinatorAccounts {
                authority: ctx.accounts.run.to_account_info(),
                coordinator_instance: ctx.accounts.coordinator_instance.to_account_info(),
                coordinator_account: ctx.accounts.coordinator_account.to_account_info(),
            },
            signer,
        )
    };

    let RunUpdateParams {
        metadata,
        config,
        model,
        progress,
        epoch_earning_rate_total_shared,
        epoch_slashing_rate_per_client,
        paused,
        client_version,
    } = params;
    if metadata.is_some() || config.is_some() || model.is_some() || progress.is_some() {
        update(owner(), metadata, config, model, progress)?;
    }
    if let Some(version) = client_version {
        psyche_coordinator::cpi::update_client_version(owner(), version)?;
    }
    if epoch_earning_rate_total_shared.is_some() || epoch_slashing_rate_per_client.is_some() {
        psyche_coordinator::cpi::set_future_epoch_rates(
            owner(),
            epoch_earning_rate_total_shared,
            epoch_slashing_rate_per_client,
        )?;
    }
    if let Some(paused) = paused {
        psyche_coordinator::cpi::set_paused(owner(), paused)?;
    }
    Ok(())
}

/// The `update` CPI in its own frame: the unboxed values live only here (and in the CPI's
/// frame), not in the processor's.
#[inline(never)]
fn update<'info>(
    ctx: CpiContext<
        '_,
        '_,
        '_,
        'info,
        psyche_coordinator::cpi::accounts::OwnerCoordinatorAccounts<'info>,
    >,
    metadata: Option<Box<RunMetadata>>,
    config: Option<Box<CoordinatorConfig>>,
    model: Option<Box<Model>>,
    progress: Option<Progress>,
) -> Result<()> {
    psyche_coordinator::cpi::update(
        ctx,
        metadata.map(|m| *m),
        config.map(|c| *c),
        model.map(|m| *m),
        progress,
    )
}
