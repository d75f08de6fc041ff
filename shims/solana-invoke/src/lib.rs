//! `solana-invoke`'s four functions (see Cargo.toml for why this shim exists).
//!
//! On SBF they forward to `solana-cpi`, which ends in the same `sol_invoke_signed_rust` syscall
//! as the upstream crate (after copying the instruction into its stable layout, a small compute
//! cost the upstream crate saves). On the host they go to the syscall stubs that
//! solana-program-test installs (`solana_sysvar::program_stubs`), like `solana-program`'s own
//! `invoke` does: `solana-cpi` alone is a silent no-op off chain.

use solana_account_info::AccountInfo;
use solana_instruction::Instruction;
use solana_program_entrypoint::ProgramResult;

/// Invokes `instruction` (borrow-checks the accounts first).
pub fn invoke(instruction: &Instruction, account_infos: &[AccountInfo]) -> ProgramResult {
    invoke_signed(instruction, account_infos, &[])
}

/// Invokes `instruction` without borrow-checking the accounts.
pub fn invoke_unchecked(instruction: &Instruction, account_infos: &[AccountInfo]) -> ProgramResult {
    invoke_signed_unchecked(instruction, account_infos, &[])
}

/// Invokes `instruction` with PDA signatures, after checking that no account the callee may
/// write is borrowed by the caller (what `solana-invoke` and `solana-cpi` check too).
pub fn invoke_signed(
    instruction: &Instruction,
    account_infos: &[AccountInfo],
    signers_seeds: &[&[&[u8]]],
) -> ProgramResult {
    for meta in &instruction.accounts {
        if let Some(info) = account_infos.iter().find(|i| *i.key == meta.pubkey) {
            if meta.is_writable {
                let _ = info.try_borrow_mut_lamports()?;
                let _ = info.try_borrow_mut_data()?;
            } else {
                let _ = info.try_borrow_lamports()?;
                let _ = info.try_borrow_data()?;
            }
        }
    }
    invoke_signed_unchecked(instruction, account_infos, signers_seeds)
}

/// Invokes `instruction` with PDA signatures, without borrow-checking the accounts.
pub fn invoke_signed_unchecked(
    instruction: &Instruction,
    account_infos: &[AccountInfo],
    signers_seeds: &[&[&[u8]]],
) -> ProgramResult {
    #[cfg(target_os = "solana")]
    {
        solana_cpi::invoke_signed_unchecked(instruction, account_infos, signers_seeds)
    }
    #[cfg(not(target_os = "solana"))]
    {
        solana_sysvar::program_stubs::sol_invoke_signed(instruction, account_infos, signers_seeds)
    }
}
