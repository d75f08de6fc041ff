use anchor_lang::prelude::*;

use crate::instructions::OwnerCoordinatorAccounts;

/// The owner sets the points of epochs that start from now on (an epoch's rates are fixed when
/// its Warmup begins). `None` keeps a rate. Accounts: `OwnerCoordinatorAccounts`.
pub fn set_future_epoch_rates_processor(
    ctx: Context<OwnerCoordinatorAccounts>,
    earning_rate_total_shared: Option<u64>,
    slashing_rate_per_client: Option<u64>,
) -> Result<()> {
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
