//! The treasurer's claim arithmetic, free of accounts so it can be tested on its own: what a
//! participant may still claim of the points the coordinator credited its wallet, what that
//! pays, and the totals a claim leaves behind.
//!
//! A point is paid at most once because both sides only grow: the coordinator's ledger
//! (`earned`, `slashed`) and the participant's `claimed_points`. What is left to claim is
//! `earned − slashed − claimed_points`, saturating at 0, so a slash after a payout lowers what can
//! still be claimed, never what was paid. Every point pays the same `collateral_per_point`, fixed
//! when the run is created.

use crate::error::TreasurerError;

/// Refuses a rate of 0: every point must pay something, or claims would spend points for nothing.
pub fn check_collateral_per_point(collateral_per_point: u64) -> Result<(), TreasurerError> {
    if collateral_per_point == 0 {
        return Err(TreasurerError::CollateralPerPointZero);
    }
    Ok(())
}

/// Refuses an empty claim. `participant_claim` checks it before it reads the ledger, so an
/// empty claim is refused as such whatever the ledger holds.
pub fn check_claim_points(claim_points: u64) -> Result<(), TreasurerError> {
    if claim_points == 0 {
        return Err(TreasurerError::ClaimZero);
    }
    Ok(())
}

/// The points the coordinator credited a client, net of what it lost to ejections.
pub fn net_earned(earned: u64, slashed: u64) -> u64 {
    earned.saturating_sub(slashed)
}

/// The points left to claim of `net_earned` after `claimed_points` were paid.
pub fn claimable(net_earned: u64, claimed_points: u64) -> u64 {
    net_earned.saturating_sub(claimed_points)
}

/// The collateral `points` pay at `collateral_per_point`.
pub fn payment(points: u64, collateral_per_point: u64) -> Result<u64, TreasurerError> {
    points.checked_mul(collateral_per_point).ok_or(TreasurerError::ArithmeticOverflow)
}

/// What was paid so far, to one participant (`Participant`) or by the whole run (`Run`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Claimed {
    pub points: u64,
    pub collateral: u64,
}

impl Claimed {
    fn plus(self, points: u64, collateral: u64) -> Result<Claimed, TreasurerError> {
        Ok(Claimed {
            points: self.points.checked_add(points).ok_or(TreasurerError::ArithmeticOverflow)?,
            collateral: self
                .collateral
                .checked_add(collateral)
                .ok_or(TreasurerError::ArithmeticOverflow)?,
        })
    }
}

/// An accepted claim: the collateral it pays and the totals it leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub amount: u64,
    pub participant: Claimed,
    pub run: Claimed,
}

/// A claim of `claim_points` (1..=claimable) by a participant credited `net_earned` points that
/// has been paid `participant` so far, in a run that has paid `run` and whose escrow holds
/// `escrow`. Every total is computed before the caller writes anything, so an overflow leaves no
/// half-claim; an escrow short of the payment refuses the claim and the points stay claimable.
pub fn claim(
    claim_points: u64,
    net_earned: u64,
    participant: Claimed,
    run: Claimed,
    collateral_per_point: u64,
    escrow: u64,
) -> Result<Claim, TreasurerError> {
    check_claim_points(claim_points)?;
    if claim_points > claimable(net_earned, participant.points) {
        return Err(TreasurerError::ClaimExceedsEarned);
    }
    let amount = payment(claim_points, collateral_per_point)?;
    if escrow < amount {
        return Err(TreasurerError::EscrowShort);
    }
    Ok(Claim {
        amount,
        participant: participant.plus(claim_points, amount)?,
        run: run.plus(claim_points, amount)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Claimed = Claimed { points: 0, collateral: 0 };

    fn code(e: TreasurerError) -> u32 {
        e.into()
    }

    fn err<T: std::fmt::Debug>(r: Result<T, TreasurerError>) -> u32 {
        code(r.expect_err("should be refused"))
    }

    fn claimed(points: u64, collateral: u64) -> Claimed {
        Claimed { points, collateral }
    }

    #[test]
    fn a_rate_of_zero_is_refused() {
        assert_eq!(
            err(check_collateral_per_point(0)),
            code(TreasurerError::CollateralPerPointZero)
        );
        assert!(check_collateral_per_point(1).is_ok());
        assert!(check_collateral_per_point(u64::MAX).is_ok());
    }

    #[test]
    fn an_empty_claim_is_refused() {
        assert_eq!(err(check_claim_points(0)), code(TreasurerError::ClaimZero));
        assert!(check_claim_points(1).is_ok());
        // Whatever else the claim would meet: zero is refused first.
        assert_eq!(err(claim(0, 0, NONE, NONE, 0, 0)), code(TreasurerError::ClaimZero));
        assert_eq!(
            err(claim(0, 100, claimed(200, 0), NONE, u64::MAX, 0)),
            code(TreasurerError::ClaimZero)
        );
    }

    #[test]
    fn slashes_and_payouts_saturate_at_zero() {
        assert_eq!(net_earned(200, 50), 150);
        assert_eq!(net_earned(200, 200), 0);
        assert_eq!(net_earned(50, 200), 0);
        assert_eq!(net_earned(u64::MAX, 0), u64::MAX);
        assert_eq!(claimable(150, 100), 50);
        assert_eq!(claimable(150, 150), 0);
        // Slashed after a payout: nothing more to claim, nothing taken back.
        assert_eq!(claimable(net_earned(200, 150), 100), 0);
    }

    #[test]
    fn payments_refuse_overflow() {
        assert_eq!(payment(120, 1_000).unwrap(), 120_000);
        assert_eq!(payment(u64::MAX, 1).unwrap(), u64::MAX);
        assert_eq!(payment(1, u64::MAX).unwrap(), u64::MAX);
        assert_eq!(payment(0, u64::MAX).unwrap(), 0);
        assert_eq!(err(payment(2, u64::MAX / 2 + 1)), code(TreasurerError::ArithmeticOverflow));
        assert_eq!(err(payment(u64::MAX, 2)), code(TreasurerError::ArithmeticOverflow));
    }

    #[test]
    fn a_claim_pays_its_points_and_adds_to_both_totals() {
        let c = claim(120, 200, NONE, claimed(30, 30_000), 1_000, 120_000).unwrap();
        assert_eq!(
            c,
            Claim {
                amount: 120_000,
                participant: claimed(120, 120_000),
                run: claimed(150, 150_000),
            }
        );
    }

    #[test]
    fn no_point_is_paid_twice() {
        let first = claim(120, 200, NONE, NONE, 1_000, u64::MAX).unwrap();
        assert_eq!(
            err(claim(81, 200, first.participant, first.run, 1_000, u64::MAX)),
            code(TreasurerError::ClaimExceedsEarned)
        );
        let rest = claim(80, 200, first.participant, first.run, 1_000, u64::MAX).unwrap();
        assert_eq!(rest.participant, claimed(200, 200_000));
        assert_eq!(rest.run, claimed(200, 200_000));
        // Everything paid: even one point more is refused, as is the same claim again.
        for points in [1, 80, 200] {
            assert_eq!(
                err(claim(points, 200, rest.participant, rest.run, 1_000, u64::MAX)),
                code(TreasurerError::ClaimExceedsEarned)
            );
        }
        // New credit makes exactly the new points claimable.
        let more = claim(50, 250, rest.participant, rest.run, 1_000, u64::MAX).unwrap();
        assert_eq!(more.participant, claimed(250, 250_000));
    }

    #[test]
    fn claiming_more_than_earned_is_refused() {
        assert_eq!(
            err(claim(1, 0, NONE, NONE, 1, u64::MAX)),
            code(TreasurerError::ClaimExceedsEarned)
        );
        assert_eq!(
            err(claim(201, 200, NONE, NONE, 1, u64::MAX)),
            code(TreasurerError::ClaimExceedsEarned)
        );
        // Paid more than the ledger now nets (a slash after the payout).
        assert_eq!(
            err(claim(1, 150, claimed(200, 200), NONE, 1, u64::MAX)),
            code(TreasurerError::ClaimExceedsEarned)
        );
        // Over-claiming is refused before the payment is computed or the escrow looked at.
        assert_eq!(
            err(claim(u64::MAX, 1, NONE, NONE, u64::MAX, 0)),
            code(TreasurerError::ClaimExceedsEarned)
        );
    }

    #[test]
    fn the_escrow_must_cover_the_payment() {
        assert!(claim(80, 80, NONE, NONE, 1_000, 80_000).is_ok());
        assert_eq!(
            err(claim(80, 80, NONE, NONE, 1_000, 79_999)),
            code(TreasurerError::EscrowShort)
        );
        assert_eq!(err(claim(1, 80, NONE, NONE, 1_000, 0)), code(TreasurerError::EscrowShort));
        // An overflowing payment is an overflow, not a short escrow.
        assert_eq!(
            err(claim(2, 2, NONE, NONE, u64::MAX, u64::MAX)),
            code(TreasurerError::ArithmeticOverflow)
        );
    }

    #[test]
    fn overflowing_totals_refuse_the_claim() {
        let overflow = code(TreasurerError::ArithmeticOverflow);
        let full = u64::MAX;
        // The participant's collateral (its points are capped by the ledger, a u64).
        assert_eq!(err(claim(1, 2, claimed(1, full), NONE, 1, full)), overflow);
        // The run's points and collateral (sums over every participant).
        assert_eq!(err(claim(1, 1, NONE, claimed(full, 0), 1, full)), overflow);
        assert_eq!(err(claim(1, 1, NONE, claimed(0, full), 1, full)), overflow);
        // Exactly at the limit is fine.
        let c = claim(1, 1, NONE, claimed(full - 1, full - 1), 1, 1).unwrap();
        assert_eq!(c.run, claimed(full, full));
    }

    /// Claims in random pieces (some over-claims, some against a short escrow) pay each point
    /// exactly once: at the end every participant was paid its net points, at the rate.
    #[test]
    fn claims_in_any_pieces_pay_each_point_once() {
        // splitmix64: deterministic, so a failure reproduces.
        let mut state = 0x7e45_u64;
        let mut next = move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for _ in 0..200 {
            let rate = 1 + next() % 1_000_000;
            let n = 1 + (next() % 8) as usize;
            let net: Vec<u64> = (0..n).map(|_| next() % 10_000).collect();
            let mut paid = vec![NONE; n];
            let mut run = NONE;
            let mut escrow = net.iter().sum::<u64>() * rate;
            for _ in 0..64 {
                let i = (next() % n as u64) as usize;
                let left = claimable(net[i], paid[i].points);
                let points = 1 + next() % (left + 2);
                let short = next() % 8 == 0;
                let held = if short { payment(points, rate).unwrap() - 1 } else { escrow };
                match claim(points, net[i], paid[i], run, rate, held) {
                    Ok(c) => {
                        assert!(points <= left && !short);
                        assert_eq!(c.amount, points * rate);
                        escrow -= c.amount;
                        (paid[i], run) = (c.participant, c.run);
                    }
                    Err(e) if points > left => {
                        assert_eq!(code(e), code(TreasurerError::ClaimExceedsEarned))
                    }
                    Err(e) => assert_eq!(code(e), code(TreasurerError::EscrowShort)),
                }
            }
            for (p, &earned) in paid.iter_mut().zip(&net) {
                let left = claimable(earned, p.points);
                if left > 0 {
                    let c = claim(left, earned, *p, run, rate, escrow).unwrap();
                    escrow -= c.amount;
                    (*p, run) = (c.participant, c.run);
                }
                assert_eq!(*p, claimed(earned, earned * rate));
            }
            assert_eq!(run.points, net.iter().sum::<u64>());
            assert_eq!(run.collateral, run.points * rate);
            assert_eq!(escrow, 0);
        }
    }
}
