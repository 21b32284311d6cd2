//! The checker for lock histories (every grant recorded as fencing token, start, end),
//! the percentile the demo and the bench report them with, and the clock every process
//! of the machine shares.

use std::fmt::Debug;

/// Nanoseconds on `CLOCK_MONOTONIC`: the same clock in every process of the machine.
///
/// ```
/// let a = lockscript_test::history::monotonic_ns();
/// assert!(lockscript_test::history::monotonic_ns() >= a);
/// ```
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec).unwrap_or(0);
    secs * 1_000_000_000 + nanos
}

/// Fails unless the grants never overlap and their fencing tokens rise strictly in the
/// order the grants started. Sorts `history` by start time.
///
/// ```
/// let mut history = vec![(2, 10, 20), (1, 0, 5)];
/// lockscript_test::history::assert_exclusive(&mut history);
/// ```
pub fn assert_exclusive<T: Ord + Copy + Debug>(history: &mut [(u64, T, T)]) {
    history.sort_by_key(|&(_, start, _)| start);
    for pair in history.windows(2) {
        let (fence_a, start_a, end_a) = pair[0];
        let (fence_b, start_b, _) = pair[1];
        assert!(
            start_a <= end_a,
            "a grant ends before it starts: {:?}",
            pair[0]
        );
        assert!(
            end_a <= start_b,
            "two holders at once: grant {fence_a} ({start_a:?}..{end_a:?}) overlaps grant {fence_b} starting {start_b:?}"
        );
        assert!(
            fence_a < fence_b,
            "fencing tokens do not rise: {fence_a} then {fence_b}"
        );
    }
}

/// The `p` quantile (0..=1) of `durations`, in milliseconds (to the microsecond).
///
/// ```
/// use std::time::Duration;
/// let d = [Duration::from_micros(1_500), Duration::from_micros(500)];
/// assert_eq!(lockscript_test::history::quantile_ms(&d, 1.0), 1.5);
/// ```
#[must_use]
pub fn quantile_ms(durations: &[std::time::Duration], p: f64) -> f64 {
    let mut us: Vec<u64> = durations
        .iter()
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .collect();
    us.sort_unstable();
    let micros = u32::try_from(percentile(&us, p).unwrap_or(0)).unwrap_or(u32::MAX);
    f64::from(micros) / 1000.0
}

/// Prints one line of a benchmark program: `what` (padded to `width`), then the p50,
/// p99 and max of `durations` in milliseconds, and their count.
///
/// ```
/// lockscript_test::history::print_latencies("a call", 20, &[std::time::Duration::from_millis(1)]);
/// ```
pub fn print_latencies(what: &str, width: usize, durations: &[std::time::Duration]) {
    println!(
        "{what:<width$} p50 {:>7.3} ms  p99 {:>7.3} ms  max {:>7.3} ms  (n={})",
        quantile_ms(durations, 0.5),
        quantile_ms(durations, 0.99),
        quantile_ms(durations, 1.0),
        durations.len()
    );
}

/// The `p`-quantile (0..=1, nearest rank) of an ascending slice; `None` when empty.
///
/// ```
/// assert_eq!(lockscript_test::history::percentile(&[1, 2, 3, 4, 5], 0.5), Some(3));
/// ```
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    let last = sorted.len().checked_sub(1)?;
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = ((last as f64) * p.clamp(0.0, 1.0)).round() as usize;
    sorted.get(i).copied()
}

#[cfg(test)]
mod tests {
    use super::assert_exclusive;

    #[test]
    #[should_panic(expected = "two holders at once")]
    fn overlap_is_caught() {
        assert_exclusive(&mut [(1, 0, 10), (2, 5, 15)]);
    }

    #[test]
    #[should_panic(expected = "fencing tokens do not rise")]
    fn falling_fence_is_caught() {
        assert_exclusive(&mut [(2, 0, 10), (1, 10, 15)]);
    }

    #[test]
    fn back_to_back_grants_pass() {
        assert_exclusive(&mut [(3, 20, 30), (1, 0, 10), (2, 10, 20)]);
    }
}
