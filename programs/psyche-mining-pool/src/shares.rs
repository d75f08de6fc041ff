//! The pool's arithmetic, free of accounts so it can be tested exhaustively: deposits against the
//! cap, the cap against deposits, and each lender's share of the redeemable tokens.
//!
//! Shares are fixed once the pool is frozen (no deposit after that), and the totals only grow, so
//! a lender's entitlement is a function of the pool totals and its own deposit alone: whatever
//! order lenders claim in, and in however many pieces, each ends with exactly its floor share.
//! Rounding down keeps `Σ claimed ≤ total redeemable`; what it leaves is under one base unit per
//! lender and stays in the pool.

use crate::error::MiningPoolError;

/// The pool's total deposits after depositing `amount`, refused when it would pass `cap`.
pub fn deposit_total(total_deposited: u64, amount: u64, cap: u64) -> Result<u64, MiningPoolError> {
    if amount == 0 {
        return Err(MiningPoolError::AmountZero);
    }
    let total = total_deposited.checked_add(amount).ok_or(MiningPoolError::ArithmeticOverflow)?;
    if total > cap {
        return Err(MiningPoolError::PoolCapExceeded);
    }
    Ok(total)
}

/// Refuses a cap below what was already deposited (it would make the pool over-full).
pub fn check_cap(cap: u64, total_deposited: u64) -> Result<(), MiningPoolError> {
    if cap < total_deposited {
        return Err(MiningPoolError::PoolCapBelowDeposits);
    }
    Ok(())
}

/// What a lender that deposited `deposited` of the pool's `total_deposited` collateral is owed of
/// `total_redeemable`: `floor(total_redeemable × deposited / total_deposited)`, in u128 so the
/// product cannot overflow. It is at most `total_redeemable` because `deposited ≤
/// total_deposited` (a lender's deposit is part of the total); a violation reports an overflow.
pub fn entitlement(
    total_redeemable: u64,
    deposited: u64,
    total_deposited: u64,
) -> Result<u64, MiningPoolError> {
    if total_deposited == 0 {
        return Err(MiningPoolError::NothingDeposited);
    }
    let product = u128::from(total_redeemable)
        .checked_mul(u128::from(deposited))
        .ok_or(MiningPoolError::ArithmeticOverflow)?;
    let share = product
        .checked_div(u128::from(total_deposited))
        .ok_or(MiningPoolError::ArithmeticOverflow)?;
    u64::try_from(share).map_err(|_| MiningPoolError::ArithmeticOverflow)
}

/// What the lender can still claim: its entitlement minus what it already claimed. Claimed never
/// exceeds the entitlement (claims are checked against it and entitlements only grow), so a
/// shortfall can only come from a broken invariant and reports an overflow.
pub fn claimable(
    total_redeemable: u64,
    deposited: u64,
    total_deposited: u64,
    claimed: u64,
) -> Result<u64, MiningPoolError> {
    entitlement(total_redeemable, deposited, total_deposited)?
        .checked_sub(claimed)
        .ok_or(MiningPoolError::ArithmeticOverflow)
}

/// The lender's claimed total after claiming `amount`, which must be 1..=claimable.
pub fn claim(
    total_redeemable: u64,
    deposited: u64,
    total_deposited: u64,
    claimed: u64,
    amount: u64,
) -> Result<u64, MiningPoolError> {
    if amount == 0 {
        return Err(MiningPoolError::AmountZero);
    }
    if amount > claimable(total_redeemable, deposited, total_deposited, claimed)? {
        return Err(MiningPoolError::ClaimExceedsShare);
    }
    claimed.checked_add(amount).ok_or(MiningPoolError::ArithmeticOverflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(e: MiningPoolError) -> u32 {
        e.into()
    }

    fn err<T: std::fmt::Debug>(r: Result<T, MiningPoolError>) -> u32 {
        code(r.expect_err("should be refused"))
    }

    #[test]
    fn deposits_stop_at_the_cap() {
        assert_eq!(deposit_total(0, 10, 10).unwrap(), 10);
        assert_eq!(deposit_total(5, 5, 10).unwrap(), 10);
        assert_eq!(err(deposit_total(5, 6, 10)), code(MiningPoolError::PoolCapExceeded));
        assert_eq!(err(deposit_total(5, 0, 10)), code(MiningPoolError::AmountZero));
        assert_eq!(
            err(deposit_total(u64::MAX, 1, u64::MAX)),
            code(MiningPoolError::ArithmeticOverflow)
        );
    }

    #[test]
    fn the_cap_cannot_go_below_deposits() {
        assert!(check_cap(10, 10).is_ok());
        assert!(check_cap(0, 0).is_ok());
        assert_eq!(err(check_cap(9, 10)), code(MiningPoolError::PoolCapBelowDeposits));
    }

    #[test]
    fn entitlement_rounds_down_in_u128() {
        assert_eq!(entitlement(100, 1, 3).unwrap(), 33);
        assert_eq!(entitlement(100, 2, 3).unwrap(), 66);
        assert_eq!(entitlement(100, 3, 3).unwrap(), 100);
        assert_eq!(entitlement(0, 3, 3).unwrap(), 0);
        assert_eq!(entitlement(100, 0, 3).unwrap(), 0);
        // The product overflows u64 but not u128.
        assert_eq!(entitlement(u64::MAX, u64::MAX - 1, u64::MAX).unwrap(), u64::MAX - 1);
        assert_eq!(entitlement(u64::MAX, u64::MAX, u64::MAX).unwrap(), u64::MAX);
        assert_eq!(err(entitlement(5, 1, 0)), code(MiningPoolError::NothingDeposited));
        // A deposit larger than the total breaks an invariant: refused, never truncated.
        assert_eq!(err(entitlement(u64::MAX, 2, 1)), code(MiningPoolError::ArithmeticOverflow));
    }

    #[test]
    fn claims_are_one_to_claimable() {
        assert_eq!(claim(100, 1, 3, 0, 33).unwrap(), 33);
        assert_eq!(claim(100, 1, 3, 10, 23).unwrap(), 33);
        assert_eq!(err(claim(100, 1, 3, 10, 24)), code(MiningPoolError::ClaimExceedsShare));
        assert_eq!(err(claim(100, 1, 3, 33, 1)), code(MiningPoolError::ClaimExceedsShare));
        assert_eq!(err(claim(100, 1, 3, 0, 0)), code(MiningPoolError::AmountZero));
        assert_eq!(err(claim(100, 0, 3, 0, 1)), code(MiningPoolError::ClaimExceedsShare));
        assert_eq!(err(claim(100, 0, 0, 0, 1)), code(MiningPoolError::NothingDeposited));
        assert_eq!(claimable(100, 2, 3, 60).unwrap(), 6);
        assert_eq!(err(claimable(100, 2, 3, 67)), code(MiningPoolError::ArithmeticOverflow));
    }

    /// splitmix64: a small deterministic generator, so failures reproduce.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// Uniform-ish in 0..n (n > 0).
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// A value of a random magnitude (1 to 2^bits), so tiny and huge amounts both occur.
        fn amount(&mut self, max_bits: u32) -> u64 {
            let bits = 1 + self.below(u64::from(max_bits)) as u32;
            let v = self.next() >> (64 - bits);
            v.max(1)
        }
    }

    /// One pool: `n` lenders with random deposits, earnings arriving in several redeemable
    /// deposits, and between them claims in random order and random pieces (each piece
    /// 1..=claimable, sometimes all of it, sometimes a refused over-claim). At the end everyone
    /// claims what is left. Checks the invariants the program relies on.
    fn run_pool(rng: &mut Rng, n: usize) {
        // Deposits bounded so their sum fits u64 (n ≤ 50 < 2^6).
        let deposit_bits = if rng.below(2) == 0 { 20 } else { 57 };
        let deposits: Vec<u64> = (0..n).map(|_| rng.amount(deposit_bits)).collect();
        let mut total_deposited = 0u64;
        for &d in &deposits {
            total_deposited = deposit_total(total_deposited, d, u64::MAX).unwrap();
        }
        let mut claimed = vec![0u64; n];
        let mut total_claimed = 0u64;
        let mut total_redeemable = 0u64;
        let rounds = 1 + rng.below(3);
        for _ in 0..rounds {
            let redeemable_bits = if rng.below(2) == 0 { 16 } else { 61 };
            total_redeemable = total_redeemable.checked_add(rng.amount(redeemable_bits)).unwrap();
            // Claims in a random order, each lender a random number of pieces.
            for _ in 0..rng.below(3 * n as u64 + 1) {
                let i = rng.below(n as u64) as usize;
                let left =
                    claimable(total_redeemable, deposits[i], total_deposited, claimed[i]).unwrap();
                if left == 0 {
                    let r = claim(total_redeemable, deposits[i], total_deposited, claimed[i], 1);
                    assert_eq!(err(r), code(MiningPoolError::ClaimExceedsShare));
                    continue;
                }
                let over =
                    claim(total_redeemable, deposits[i], total_deposited, claimed[i], left + 1);
                assert_eq!(err(over), code(MiningPoolError::ClaimExceedsShare));
                let amount = match rng.below(3) {
                    0 => left,
                    _ => 1 + rng.below(left),
                };
                claimed[i] =
                    claim(total_redeemable, deposits[i], total_deposited, claimed[i], amount)
                        .unwrap();
                total_claimed += amount;
                assert!(total_claimed <= total_redeemable);
            }
        }
        // Everyone claims the rest, in a random rotation.
        let start = rng.below(n as u64) as usize;
        for k in 0..n {
            let i = (start + k) % n;
            let left =
                claimable(total_redeemable, deposits[i], total_deposited, claimed[i]).unwrap();
            if left > 0 {
                claimed[i] =
                    claim(total_redeemable, deposits[i], total_deposited, claimed[i], left)
                        .unwrap();
                total_claimed += left;
            }
        }
        let mut sum = 0u128;
        for i in 0..n {
            let floor = u128::from(total_redeemable) * u128::from(deposits[i])
                / u128::from(total_deposited);
            assert_eq!(u128::from(claimed[i]), floor, "lender {i} of {n}");
            sum += u128::from(claimed[i]);
        }
        assert_eq!(sum, u128::from(total_claimed));
        assert!(sum <= u128::from(total_redeemable), "Σ claimed ≤ total");
        let leftover = u128::from(total_redeemable) - sum;
        assert!(leftover < n as u128, "leftover {leftover} with {n} lenders");
    }

    #[test]
    fn any_claim_order_gives_every_lender_its_floor_share() {
        let mut rng = Rng(0x5eed);
        for n in 1..=50 {
            for _ in 0..40 {
                run_pool(&mut rng, n);
            }
        }
    }
}
