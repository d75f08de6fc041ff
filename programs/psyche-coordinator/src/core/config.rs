//! `CoordinatorConfig` and `Progress` with their checks and derived quantities
//! (`client/psyche/protocol/coordinator_config.py`; docs/protocol.md, "Run configuration",
//! "Batch size, data index and cold start" and "Quorum").

use anchor_lang::prelude::*;
use bytemuck::{Pod, Zeroable};

use super::types::{MAX_CLIENTS, MAX_WITNESSES};

/// An epoch ends 2 rounds after it winds down (`last_step = step + 2`).
pub const DRAIN_STEPS: u32 = 2;

/// Longest time limit: its deadline, from any unix time before 2106, still fits the u64 clock.
pub const TIME_LIMIT_MAX: u64 = u64::MAX - (1 << 32);

/// Timing, membership and batch-size rules of a run (field order = on-chain order, no padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable, AnchorSerialize, AnchorDeserialize)]
#[repr(C)]
pub struct CoordinatorConfig {
    pub warmup_time: u64,
    pub cooldown_time: u64,
    pub max_round_train_time: u64,
    pub round_witness_time: u64,
    pub global_batch_size_warmup_tokens: u64,
    pub epoch_time: u64,
    pub total_steps: u32,
    pub init_min_clients: u16,
    pub min_clients: u16,
    pub witness_nodes: u16,
    pub global_batch_size_start: u16,
    pub global_batch_size_end: u16,
    pub verification_percent: u8,
    pub waiting_for_members_extra_time: u8,
}

fn rule(ok: bool, message: &'static str) -> core::result::Result<(), &'static str> {
    if ok {
        Ok(())
    } else {
        Err(message)
    }
}

impl CoordinatorConfig {
    /// Python's `CoordinatorConfig.check`: the first broken rule, in the same order.
    pub fn check(&self) -> core::result::Result<(), &'static str> {
        let c = self;
        rule(c.epoch_time > 0, "config.epoch_time must be greater than 0")?;
        rule(c.warmup_time < c.epoch_time, "config.warmup_time must be less than epoch_time")?;
        rule(c.max_round_train_time > 0, "config.max_round_train_time must be greater than 0")?;
        rule(
            c.max_round_train_time < c.epoch_time,
            "config.max_round_train_time must be less than epoch_time",
        )?;
        rule(c.round_witness_time > 0, "config.round_witness_time must be greater than 0")?;
        rule(c.min_clients > 0, "config.min_clients must be greater than 0")?;
        rule(
            c.init_min_clients >= c.min_clients,
            "config.init_min_clients must be at least min_clients",
        )?;
        rule(
            usize::from(c.init_min_clients) <= MAX_CLIENTS,
            "config.init_min_clients must be at most 256",
        )?;
        rule(
            c.global_batch_size_start > 0,
            "config.global_batch_size_start must be greater than 0",
        )?;
        rule(c.global_batch_size_end > 0, "config.global_batch_size_end must be greater than 0")?;
        rule(
            c.global_batch_size_end >= c.global_batch_size_start,
            "config.global_batch_size_end must be at least global_batch_size_start",
        )?;
        rule(c.total_steps > 0, "config.total_steps must be greater than 0")?;
        for (limit, message) in [
            (c.warmup_time, "config.warmup_time must end before the u64 clock does"),
            (c.cooldown_time, "config.cooldown_time must end before the u64 clock does"),
            (
                c.max_round_train_time,
                "config.max_round_train_time must end before the u64 clock does",
            ),
            (c.round_witness_time, "config.round_witness_time must end before the u64 clock does"),
            (c.epoch_time, "config.epoch_time must end before the u64 clock does"),
        ] {
            rule(limit <= TIME_LIMIT_MAX, message)?;
        }
        rule(
            c.total_steps <= u32::MAX - DRAIN_STEPS,
            "config.total_steps must leave room for the 2 drain steps in the u32 step counter",
        )?;
        rule(
            u128::from(c.total_steps - 1)
                <= u128::from(u16::MAX) * u128::from(c.slowest_epoch_steps()),
            "config.total_steps must be reachable within the u16 epoch counter at the slowest \
             epoch length",
        )?;
        rule(c.witness_nodes <= c.min_clients, "config.witness_nodes must be at most min_clients")?;
        rule(
            usize::from(c.witness_nodes) <= MAX_WITNESSES,
            "config.witness_nodes must be at most 32",
        )?;
        rule(c.cooldown_time > 0, "config.cooldown_time must be greater than 0")?;
        rule(
            c.waiting_for_members_extra_time > 0,
            "config.waiting_for_members_extra_time must be greater than 0",
        )?;
        rule(c.verification_percent <= 100, "config.verification_percent must be at most 100")
    }

    /// Python's `CoordinatorConfig.slowest_epoch_steps`: steps of one epoch when Warmup and
    /// every round run to their time limits (at least one trained round, then the 2 drain
    /// rounds). Needs `max_round_train_time` and `round_witness_time` > 0 (checked before).
    pub fn slowest_epoch_steps(&self) -> u64 {
        let warmup = self.warmup_time.max(1);
        let round_time =
            u128::from(self.max_round_train_time) + u128::from(self.round_witness_time);
        let left = u128::from(self.epoch_time.saturating_sub(warmup));
        let trained = left.div_ceil(round_time).max(1);
        // trained <= epoch_time, so it fits a u64 and adding 2 cannot overflow a u128 cast.
        (trained as u64).saturating_add(u64::from(DRAIN_STEPS))
    }

    /// Samples per step after `tokens` tokens: linear ramp from start to end over
    /// `global_batch_size_warmup_tokens`, rounding half away from zero, exactly as Python's
    /// `start + (end - start) * (tokens / warm)` in f64 (the quotient correctly rounded).
    pub fn get_batch_size(&self, tokens: u128) -> u64 {
        let (start, end) = (self.global_batch_size_start, self.global_batch_size_end);
        let warm = self.global_batch_size_warmup_tokens;
        if tokens >= u128::from(warm) {
            return u64::from(end);
        }
        // tokens < warm <= u64::MAX here, and warm > 0.
        let q = ratio_f64(tokens as u64, warm);
        let x = f64::from(start) + (f64::from(end) - f64::from(start)) * q;
        // x lies between start and end, so it is a small non-negative number.
        (x + 0.5).floor() as u64
    }

    /// Witnesses per round for `n_clients` epoch clients.
    pub fn witness_count(&self, n_clients: usize) -> usize {
        if self.witness_nodes != 0 {
            usize::from(self.witness_nodes)
        } else {
            n_clients.min(MAX_WITNESSES)
        }
    }

    /// Witness quorum (docs/protocol.md, "Quorum"): W <= 3 gives {1, 2, 2}; otherwise
    /// max(1, floor(2W/3)).
    pub fn quorum(&self, n: usize) -> usize {
        let w = if self.witness_nodes != 0 { usize::from(self.witness_nodes) } else { n };
        match w {
            0 | 1 => 1,
            2 | 3 => 2,
            _ => (w * 2 / 3).max(1),
        }
    }
}

/// `a / b` as the f64 nearest to the exact quotient (ties to even), like Python's `int / int`;
/// requires `a < b`. Dividing two f64 conversions would round twice once either exceeds 2^53.
pub fn ratio_f64(a: u64, b: u64) -> f64 {
    if a == 0 || b == 0 {
        return 0.0;
    }
    const EXACT: u64 = 1 << 53;
    if a < EXACT && b < EXACT {
        // Both convert exactly and IEEE division rounds once.
        return a as f64 / b as f64;
    }
    let (a, b) = (u128::from(a), u128::from(b));
    let bits = |v: u128| 128 - v.leading_zeros();
    // Scale so the integer quotient has 54 bits: 53 for the mantissa plus a rounding bit.
    // a << s stays below b << 54 < 2^118, so nothing overflows.
    let mut s = 53 + bits(b) - bits(a);
    let mut n = (a << s) / b;
    if n < (1u128 << 53) {
        s += 1;
        n = (a << s) / b;
    }
    let sticky = (a << s) % b != 0;
    let mut m = (n >> 1) as u64;
    let round_bit = n & 1 == 1;
    if round_bit && (sticky || m & 1 == 1) {
        m += 1;
    }
    // m <= 2^53 is exact in f64, and scaling by a power of two is exact.
    (m as f64) * 2f64.powi(1 - s as i32)
}

/// Where the run is: epoch counter, global step (starts at 1) and the first sample index of the
/// current epoch. `_pad` makes the u16 → u32 gap explicit (it is also in the borsh argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable, AnchorSerialize, AnchorDeserialize)]
#[repr(C)]
pub struct Progress {
    pub epoch: u16,
    pub _pad: [u8; 2],
    pub step: u32,
    pub epoch_start_data_index: u64,
}

impl Progress {
    pub fn new(epoch: u16, step: u32, epoch_start_data_index: u64) -> Self {
        Self { epoch, _pad: [0; 2], step, epoch_start_data_index }
    }

    /// The step counter starts at 1 (docs/protocol.md, "Run configuration").
    pub fn check(&self) -> core::result::Result<(), &'static str> {
        rule(self.step > 0, "progress.step must be greater than 0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_is_correctly_rounded_like_python() {
        // (a, b, bits of Python's a / b); the first five differ from f64(a) / f64(b).
        let cases: [(u64, u64, u64); 8] = [
            (7283207964119141688, 17503044119837455416, 0x3fdaa18fbcd0f4cb),
            (11632994891556335706, 17495376644577262627, 0x3fe547029927acbd),
            (914761360679426581, 10819347204666098895, 0x3fb5a4fb36711af8),
            (1932937663302849943, 2474656174189090507, 0x3fe8feb7a2adecb8),
            (9157231070389319136, 10428771870220415031, 0x3fec192e2ba6a22e),
            (1, 18446744073709551615, 0x3bf0000000000000),
            (18446744073709551614, 18446744073709551615, 0x3ff0000000000000),
            (12345678901234567, 98765432109876543, 0x3fbffffffb1b9668),
        ];
        for (a, b, bits) in cases {
            assert_eq!(ratio_f64(a, b).to_bits(), bits, "{a} / {b}");
        }
        assert_eq!(ratio_f64(1, 3), 1.0 / 3.0);
        assert_eq!(ratio_f64(0, 3), 0.0);
    }

    #[test]
    fn batch_size_ramp_matches_python() {
        let c = CoordinatorConfig {
            warmup_time: 1,
            cooldown_time: 1,
            max_round_train_time: 1,
            round_witness_time: 1,
            global_batch_size_warmup_tokens: (1 << 62) + 7,
            epoch_time: 5,
            total_steps: 5,
            init_min_clients: 1,
            min_clients: 1,
            witness_nodes: 0,
            global_batch_size_start: 3,
            global_batch_size_end: 60000,
            verification_percent: 0,
            waiting_for_members_extra_time: 1,
        };
        // Values from psyche.protocol.coordinator_config.CoordinatorConfig.get_batch_size.
        let cases: [(u128, u64); 7] = [
            (0, 3),
            (1, 3),
            (1 << 61, 30002),
            ((1 << 61) + 12345, 30002),
            (1 << 62, 60000),
            (3 * (1 << 60) + 999, 45001),
            ((1 << 62) + 6, 60000),
        ];
        for (tokens, want) in cases {
            assert_eq!(c.get_batch_size(tokens), want, "{tokens}");
        }
        assert_eq!(c.get_batch_size(u128::MAX), 60000);
        let c0 = CoordinatorConfig { global_batch_size_warmup_tokens: 0, ..c };
        assert_eq!(c0.get_batch_size(0), 60000);
    }

    #[test]
    fn quorum_table() {
        let mut c: CoordinatorConfig = Zeroable::zeroed();
        let want = [(0, 1), (1, 1), (2, 2), (3, 2), (4, 2), (5, 3), (6, 4), (32, 21)];
        for (n, q) in want {
            assert_eq!(c.quorum(n), q, "n = {n}");
        }
        c.witness_nodes = 3;
        assert_eq!(c.quorum(30), 2);
        assert_eq!(c.witness_count(10), 3);
        c.witness_nodes = 0;
        assert_eq!(c.witness_count(40), 32);
    }
}
