use anchor_lang::prelude::*;

use crate::constants::MAX_EPOCH_RATE;
use crate::error::CoordinatorProgramError;
use crate::instructions::OwnerCoordinatorAccounts;

/// The owner sets the points of epochs that start from now on (an epoch's rates are fixed when
/// its Warmup begins). `None` keeps a rate. A rate above `MAX_EPOCH_RATE` is refused
/// (`EpochRateTooLarge`): it could overflow the ledger and make every epoch end fail.
/// Accounts: `OwnerCoordinatorAccounts`.
pub fn set_future_epoch_rates_processor(
    ctx: Context<OwnerCoordinatorAccounts>,
    earning_rate_total_shared: Option<u64>,
    slashing_rate_per_client: Option<u64>,
) -> Result<()> {
    for rate in [earning_rate_total_shared, slashing_rate_per_client].into_iter().flatten() {
        require!(rate <= MAX_EPOCH_RATE, CoordinatorProgramError::EpochRateTooLarge);
    }
    let mut account = ctx.accounts.coordinator_account.load_mut()?;
    account.check_version()?;
    let rates = &mut account.state.clients_state.future_epoch_rates;
    if let Some(rate) = earning_rate_total_shared {
        rates.earning_rate_total_shared = rate;
    }
    if let Some(rate) = slashing_rate_per_client {
        rates.slashing_rate_per_client = rate;
    }
    account.bump_nonce()
}
