//! The fault plan: for every port call, whether it fails and how, decided from the schedule's
//! seed and the call's identity (operation, key, and how often that key was called before),
//! never from the order concurrent calls happen to run in, so a schedule replays exactly.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// What happens to one port call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// Fails before applying with a retryable throttling error.
    Throttle,
    /// Applied, then the response is lost (a retryable error).
    LoseResponse,
    /// The invocation crashes before the call: nothing applied, and the invocation's result
    /// is discarded. Its other calls still run: which of a handler's concurrent calls would
    /// have completed before the crash is decided by their order, which a replay cannot keep
    /// (the handlers gather some work through hash sets); calls on distinct keys commute, so
    /// the end state is one a real crash can leave.
    CrashBefore,
    /// The invocation crashes after the call was applied.
    CrashAfter,
    /// Before the call, another stage runs one step (an adversarial interleaving).
    Preempt,
}

impl Fault {
    /// Its name in the trace and the summary.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Throttle => "throttle",
            Fault::LoseResponse => "lost-response",
            Fault::CrashBefore => "crash-before",
            Fault::CrashAfter => "crash-after",
            Fault::Preempt => "interleave",
        }
    }
}

/// Per-call probabilities of each fault, in parts per thousand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rates {
    /// [`Fault::Throttle`].
    pub throttle: u32,
    /// [`Fault::LoseResponse`] (write calls only).
    pub lose_response: u32,
    /// [`Fault::CrashBefore`] and [`Fault::CrashAfter`], each.
    pub crash: u32,
    /// [`Fault::Preempt`].
    pub preempt: u32,
}

/// A 64-bit mix (SplitMix64's finaliser): the same input gives the same output on every
/// platform and run, unlike `std`'s randomly keyed hasher.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// [`mix`] folded over the bytes of `parts`.
pub fn hash(seed: u64, parts: &[&str]) -> u64 {
    let mut h = mix(seed);
    for part in parts {
        for b in part.bytes() {
            h = mix(h ^ u64::from(b));
        }
        h = mix(h ^ 0xff);
    }
    h
}

/// Digits of a producer epoch (`p:{epoch}:{lane}:{seq}`, docs/row-contract.md): random per
/// producer instance, so never part of a fault decision.
const EPOCH_HEX_DIGITS: usize = 32;

/// `key` with every run of [`EPOCH_HEX_DIGITS`] or more hex digits replaced by `*`.
pub fn stable_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut run = String::new();
    for c in key.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_hexdigit() {
            run.push(c);
            continue;
        }
        if run.len() >= EPOCH_HEX_DIGITS {
            out.push('*');
        } else {
            out.push_str(&run);
        }
        run.clear();
        out.push(c);
    }
    out.pop();
    out
}

#[derive(Debug, Default)]
struct State {
    calls: BTreeMap<(String, String), u32>,
    tally: BTreeMap<&'static str, u64>,
    crashed: bool,
    enabled: bool,
}

/// The schedule's fault plan, shared by every fault-injecting port.
#[derive(Debug)]
pub struct FaultPlan {
    seed: u64,
    rates: Rates,
    state: Mutex<State>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere, which the panic already reports.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FaultPlan {
    /// A plan for `seed` at `rates`, enabled.
    pub fn new(seed: u64, rates: Rates) -> Self {
        Self {
            seed,
            rates,
            state: Mutex::new(State {
                enabled: true,
                ..State::default()
            }),
        }
    }

    /// Stop (or resume) injecting: the final drain of a schedule runs fault-free.
    pub fn set_enabled(&self, on: bool) {
        lock(&self.state).enabled = on;
    }

    /// Whether faults are being injected (off in the final drain).
    pub fn enabled(&self) -> bool {
        lock(&self.state).enabled
    }

    /// The fault for this call of `operation` on `key`; `write` calls may also lose their
    /// response or crash after applying.
    pub fn decide(&self, operation: &str, key: &str, write: bool) -> Option<Fault> {
        let mut s = lock(&self.state);
        if !s.enabled {
            return None;
        }
        let key = stable_key(key);
        let n = s
            .calls
            .entry((operation.to_owned(), key.clone()))
            .or_default();
        *n += 1;
        let roll = hash(self.seed, &[operation, &key, &n.to_string()]) % 1000;
        let r = self.rates;
        let mut edge = 0;
        let mut pick = None;
        for (fault, rate, allowed) in [
            (Fault::Throttle, r.throttle, true),
            (Fault::LoseResponse, r.lose_response, write),
            (Fault::CrashBefore, r.crash, true),
            (Fault::CrashAfter, r.crash, write),
            (Fault::Preempt, r.preempt, true),
        ] {
            if !allowed {
                continue;
            }
            edge += u64::from(rate);
            if roll < edge {
                pick = Some(fault);
                break;
            }
        }
        if let Some(f) = pick {
            *s.tally.entry(f.name()).or_default() += 1;
            if matches!(f, Fault::CrashBefore | Fault::CrashAfter) {
                s.crashed = true;
            }
        }
        pick
    }

    /// Count a fault the harness injected itself (a stream or delivery fault).
    pub fn count(&self, class: &'static str) {
        *lock(&self.state).tally.entry(class).or_default() += 1;
    }

    /// True when an injection site keyed by `parts` fires at `per_mille`.
    pub fn roll(&self, per_mille: u32, parts: &[&str]) -> bool {
        lock(&self.state).enabled && hash(self.seed ^ 0x5eed, parts) % 1000 < u64::from(per_mille)
    }

    /// Start an invocation: not crashed.
    pub fn begin(&self) {
        lock(&self.state).crashed = false;
    }

    /// End an invocation: true when it crashed (its result must be discarded).
    pub fn end(&self) -> bool {
        std::mem::take(&mut lock(&self.state).crashed)
    }

    /// Whether the current invocation has crashed.
    pub fn crashed(&self) -> bool {
        lock(&self.state).crashed
    }

    /// Faults injected so far, by class.
    pub fn tally(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.state).tally.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_depend_on_the_call_not_on_the_order() {
        let rates = Rates {
            throttle: 300,
            lose_response: 100,
            crash: 0,
            preempt: 100,
        };
        let a = FaultPlan::new(7, rates);
        let b = FaultPlan::new(7, rates);
        let xs: Vec<_> = (0..20)
            .map(|i| a.decide("put", &i.to_string(), true))
            .collect();
        let ys: Vec<_> = (0..20)
            .rev()
            .map(|i| b.decide("put", &i.to_string(), true))
            .collect();
        assert_eq!(xs, ys.into_iter().rev().collect::<Vec<_>>());
        assert!(xs.iter().any(Option::is_some) && xs.iter().any(Option::is_none));
    }

    #[test]
    fn epochs_are_masked_out_of_keys() {
        let id = format!("p:{}:3:42", "ab".repeat(16));
        assert_eq!(stable_key(&id), "p:*:3:42");
        assert_eq!(stable_key("acct#dim#2026"), "acct#dim#2026");
    }

    #[test]
    fn a_crash_marks_the_invocation_until_it_ends() {
        let plan = FaultPlan::new(
            1,
            Rates {
                crash: 500,
                ..Rates::default()
            },
        );
        plan.begin();
        let mut i = 0;
        while !plan.crashed() {
            plan.decide("op", &i.to_string(), false);
            i += 1;
        }
        assert!(plan.end());
        assert!(!plan.crashed());
        plan.set_enabled(false);
        assert_eq!(plan.decide("op", "k", true), None);
    }
}
