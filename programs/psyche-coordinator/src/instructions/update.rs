use anchor_lang::prelude::*;

use crate::core::{CoordinatorConfig, Model, Progress, RunMetadata, RunState};
use crate::error::CoordinatorProgramError;
use crate::instructions::OwnerCoordinatorAccounts;

/// The owner changes the run's metadata (any time) and/or its config, model and progress (only
/// while halted). Each given value must pass its sanity check, and the cold-start warmup steps
/// must fit the resulting config. Accounts: `OwnerCoordinatorAccounts`.
pub fn update_processor(
    ctx: Context<OwnerCoordinatorAccounts>,
    metadata: Option<RunMetadata>,
    config: Option<CoordinatorConfig>,
    model: Option<Model>,
    progress: Option<Progress>,
) -> Result<()> {
    let mut account = ctx.accounts.coordinator_account.load_mut()?;
    account.check_version()?;
    let state = &mut account.state;
    let run_state = state.run_state();
    require!(run_state != RunState::Finished, CoordinatorProgramError::UpdateConfigFinished);
    if config.is_some() || model.is_some() || progress.is_some() {
        require!(run_state.halted(), CoordinatorProgramError::UpdateConfigNotHalted);
    }

    // Validate everything before writing anything.
    if let Some(config) = &config {
        config.check().map_err(|rule| {
            msg!("{}", rule);
            CoordinatorProgramError::ConfigSanityCheckFailed
        })?;
    }
    if let Some(model) = &model {
        model.check().map_err(|rule| {
            msg!("{}", rule);
            CoordinatorProgramError::ModelSanityCheckFailed
        })?;
    }
    if let Some(progress) = &progress {
        progress.check().map_err(|rule| {
            msg!("{}", rule);
            CoordinatorProgramError::ProgressSanityCheckFailed
        })?;
    }
    if config.is_some() || model.is_some() {
        let final_config = config.unwrap_or(state.coordinator.config);
        let final_model = match &model {
            Some(m) => Some(m.clone()),
            None => state.coordinator.model.load(),
        };
        if let Some(m) = final_model {
            m.check_cold_start_warmup_steps(&final_config).map_err(|rule| {
                msg!("{}", rule);
                CoordinatorProgramError::ModelSanityCheckFailed
            })?;
        }
    }

    if let Some(metadata) = metadata {
        state.metadata = metadata;
    }
    if let Some(config) = config {
        state.coordinator.config = config;
    }
    if let Some(model) = &model {
        require!(state.coordinator.model.store(model), CoordinatorProgramError::ModelTooLarge);
    }
    if let Some(progress) = progress {
        state.coordinator.progress = progress;
        // Queued lost intervals index the data of the old progress; a restart drops them.
        state.coordinator.epoch_state.clear_lost();
    }
    account.bump_nonce()
}
