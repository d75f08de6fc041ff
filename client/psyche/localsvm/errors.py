"""Transaction errors: their JSON form (as a validator serializes ``TransactionError``) and their
``Display`` text, which a validator puts in ``"Transaction simulation failed: <text>"``.

The JSON form comes from solders (``FailedTransactionMetadata.to_json``) or is built here for the
errors this package raises itself; the texts are those of ``solana-transaction-error`` and
``solana-instruction`` 2.2.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TxErr", "describe", "rent_error"]

TxErr = Any
"""A transaction error in its JSON form, e.g. ``"BlockhashNotFound"`` or
``{"InstructionError": [0, {"Custom": 6003}]}``."""

_TX: dict[str, str] = {
    "AccountInUse": "Account in use",
    "AccountLoadedTwice": "Account loaded twice",
    "AccountNotFound": "Attempt to debit an account but found no record of a prior credit.",
    "ProgramAccountNotFound": "Attempt to load a program that does not exist",
    "InsufficientFundsForFee": "Insufficient funds for fee",
    "InvalidAccountForFee": "This account may not be used to pay transaction fees",
    "AlreadyProcessed": "This transaction has already been processed",
    "BlockhashNotFound": "Blockhash not found",
    "CallChainTooDeep": "Loader call chain is too deep",
    "MissingSignatureForFee": "Transaction requires a fee but has no signature present",
    "InvalidAccountIndex": "Transaction contains an invalid account reference",
    "SignatureFailure": "Transaction did not pass signature verification",
    "InvalidProgramForExecution": "This program may not be used for executing instructions",
    "SanitizeFailure": "Transaction failed to sanitize accounts offsets correctly",
    "ClusterMaintenance": "Transactions are currently disabled due to cluster maintenance",
    "AccountBorrowOutstanding": (
        "Transaction processing left an account with an outstanding borrowed reference"
    ),
    "WouldExceedMaxBlockCostLimit": "Transaction would exceed max Block Cost Limit",
    "UnsupportedVersion": "Transaction version is unsupported",
    "InvalidWritableAccount": "Transaction loads a writable account that cannot be written",
    "WouldExceedMaxAccountCostLimit": (
        "Transaction would exceed max account limit within the block"
    ),
    "WouldExceedAccountDataBlockLimit": (
        "Transaction would exceed account data limit within the block"
    ),
    "TooManyAccountLocks": "Transaction locked too many accounts",
    "AddressLookupTableNotFound": ("Transaction loads an address table account that doesn't exist"),
    "InvalidAddressLookupTableOwner": (
        "Transaction loads an address table account with an invalid owner"
    ),
    "InvalidAddressLookupTableData": (
        "Transaction loads an address table account with invalid data"
    ),
    "InvalidAddressLookupTableIndex": "Transaction address table lookup uses an invalid index",
    "InvalidRentPayingAccount": (
        "Transaction leaves an account with a lower balance than rent-exempt minimum"
    ),
    "WouldExceedMaxVoteCostLimit": "Transaction would exceed max Vote Cost Limit",
    "WouldExceedAccountDataTotalLimit": "Transaction would exceed total account data limit",
    "MaxLoadedAccountsDataSizeExceeded": (
        "LoadedAccountsDataSize exceeded MAX_LOADED_ACCOUNTS_DATA_SIZE_BYTES"
    ),
    "InvalidLoadedAccountsDataSizeLimit": (
        "LoadedAccountsDataSizeLimit set for transaction must be greater than 0."
    ),
    "ResanitizationNeeded": "ResanitizationNeeded",
    "UnbalancedTransaction": "Sum of account balances before and after transaction do not match",
    "ProgramCacheHitMaxLimit": "Program cache hit max limit",
    "CommitCancelled": "CommitCancelled",
}

_IX: dict[str, str] = {
    "GenericError": "generic instruction error",
    "InvalidArgument": "invalid program argument",
    "InvalidInstructionData": "invalid instruction data",
    "InvalidAccountData": "invalid account data for instruction",
    "AccountDataTooSmall": "account data too small for instruction",
    "InsufficientFunds": "insufficient funds for instruction",
    "IncorrectProgramId": "incorrect program id for instruction",
    "MissingRequiredSignature": "missing required signature for instruction",
    "AccountAlreadyInitialized": "instruction requires an uninitialized account",
    "UninitializedAccount": "instruction requires an initialized account",
    "UnbalancedInstruction": "sum of account balances before and after instruction do not match",
    "ModifiedProgramId": "instruction illegally modified the program id of an account",
    "ExternalAccountLamportSpend": (
        "instruction spent from the balance of an account it does not own"
    ),
    "ExternalAccountDataModified": "instruction modified data of an account it does not own",
    "ReadonlyLamportChange": "instruction changed the balance of a read-only account",
    "ReadonlyDataModified": "instruction modified data of a read-only account",
    "DuplicateAccountIndex": "instruction contains duplicate accounts",
    "ExecutableModified": "instruction changed executable bit of an account",
    "RentEpochModified": "instruction modified rent epoch of an account",
    "NotEnoughAccountKeys": "insufficient account keys for instruction",
    "AccountDataSizeChanged": (
        "program other than the account's owner changed the size of the account data"
    ),
    "AccountNotExecutable": "instruction expected an executable account",
    "AccountBorrowFailed": (
        "instruction tries to borrow reference for an account which is already borrowed"
    ),
    "AccountBorrowOutstanding": "instruction left account with an outstanding borrowed reference",
    "DuplicateAccountOutOfSync": "instruction modifications of multiply-passed account differ",
    "InvalidError": "program returned invalid error code",
    "ExecutableDataModified": "instruction changed executable accounts data",
    "ExecutableLamportChange": "instruction changed the balance of an executable account",
    "ExecutableAccountNotRentExempt": "executable accounts must be rent exempt",
    "UnsupportedProgramId": "Unsupported program id",
    "CallDepth": "Cross-program invocation call depth too deep",
    "MissingAccount": "An account required by the instruction is missing",
    "ReentrancyNotAllowed": "Cross-program invocation reentrancy not allowed for this instruction",
    "MaxSeedLengthExceeded": "Length of the seed is too long for address generation",
    "InvalidSeeds": "Provided seeds do not result in a valid address",
    "InvalidRealloc": "Failed to reallocate account data",
    "ComputationalBudgetExceeded": "Computational budget exceeded",
    "PrivilegeEscalation": "Cross-program invocation with unauthorized signer or writable account",
    "ProgramEnvironmentSetupFailure": "Failed to create program execution environment",
    "ProgramFailedToComplete": "Program failed to complete",
    "ProgramFailedToCompile": "Program failed to compile",
    "Immutable": "Account is immutable",
    "IncorrectAuthority": "Incorrect authority provided",
    "AccountNotRentExempt": "An account does not have enough lamports to be rent-exempt",
    "InvalidAccountOwner": "Invalid account owner",
    "ArithmeticOverflow": "Program arithmetic overflowed",
    "UnsupportedSysvar": "Unsupported sysvar",
    "IllegalOwner": "Provided owner is not allowed",
    "MaxAccountsDataAllocationsExceeded": (
        "Accounts data allocations exceeded the maximum allowed per transaction"
    ),
    "MaxAccountsExceeded": "Max accounts exceeded",
    "MaxInstructionTraceLengthExceeded": "Max instruction trace length exceeded",
    "BuiltinProgramsMustConsumeComputeUnits": "Builtin programs must consume compute units",
}


def rent_error(account_index: int) -> TxErr:
    return {"InsufficientFundsForRent": {"account_index": account_index}}


def _instruction(err: Any) -> str:
    if isinstance(err, str):
        return _IX.get(err, err)
    if isinstance(err, dict) and len(err) == 1:
        ((name, value),) = err.items()
        if name == "Custom" and isinstance(value, int):
            return f"custom program error: {value:#x}"
        if name == "BorshIoError":
            return f"Failed to serialize or deserialize account data: {value}"
        return f"{name}: {value}"
    return str(err)


def describe(err: TxErr) -> str:
    """The validator's text for a transaction error."""
    if isinstance(err, str):
        return _TX.get(err, err)
    if isinstance(err, dict) and len(err) == 1:
        ((name, value),) = err.items()
        if name == "InstructionError" and isinstance(value, list) and len(value) == 2:
            return f"Error processing Instruction {value[0]}: {_instruction(value[1])}"
        if name == "InsufficientFundsForRent" and isinstance(value, dict):
            index = value.get("account_index")
            return f"Transaction results in an account ({index}) with insufficient funds for rent"
        if name == "DuplicateInstruction":
            return f"Transaction contains a duplicate instruction ({value}) that is not allowed"
        if name == "ProgramExecutionTemporarilyRestricted" and isinstance(value, dict):
            index = value.get("account_index")
            return (
                f"Execution of the program referenced by account at index {index} is "
                "temporarily restricted."
            )
    return str(err)
