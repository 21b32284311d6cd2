//! What the lock engine counts and times, through the [`metrics`](https://docs.rs/metrics)
//! facade (feature `metrics`): install any recorder (Prometheus, OpenTelemetry, StatsD...)
//! and these figures appear. Both faces record the same figures at the same points,
//! because both run the same machine; without the feature every function here is empty.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `lockscript_acquire_wait_seconds` | histogram | `how` | from a `lock()`/`try_lock()` call to its grant |
//! | `lockscript_acquire_attempts` | histogram | `how` | acquisition attempts a grant took (a handed-over grant counts those before it) |
//! | `lockscript_acquired_total` | counter | `how` | grants: `how` is `attempt` (the caller's own call won) or `handover` (a release handed it over) |
//! | `lockscript_acquire_failures_total` | counter | `reason` | `lock()`/`try_lock()` that ended without a grant: `timeout` or `error` |
//! | `lockscript_held_seconds` | histogram | `end` | from the grant to its end, once per lease: `released` (by a delete or a handover), `downgraded` (a write lease that became a read lease, itself a lease of its own) or `lost` |
//! | `lockscript_lost_total` | counter | `reason` | leases lost: `expired` (no renewal confirmed in time) or `refused` (the server had another owner or no key) |
//! | `lockscript_renewal_seconds` | histogram | | a confirmed renewal's round trip |
//! | `lockscript_renewal_failures_total` | counter | `reason` | renewals that failed: `error` (retried while the lease lasts) or `refused` |
//! | `lockscript_suspects_total` | counter | | leases that became suspect: a renewal failed while they were valid |
//! | `lockscript_handovers_total` | counter | | releases that handed the lock straight to a waiter of the same handle |
//! | `lockscript_background_releases_total` | counter | `result` | releases of grants nobody owns and of dropped guards: `released`, `not_held`, `failed` (the ttl frees it) |
//!
//! Every figure may also carry a `lock` label with the lock's name, but only after
//! [`label_lock_names`]`(true)`: names are often unbounded (`orders:42`, `orders:43`...)
//! and every distinct label value is a time series in your monitoring system.
//!
//! Call [`describe`] once after installing the recorder to give each figure its help text
//! and unit.
//!
//! ```
//! # #[cfg(feature = "metrics")] {
//! // With a recorder installed (metrics_exporter_prometheus::PrometheusBuilder, ...):
//! lockscript::metrics::describe();
//! lockscript::metrics::label_lock_names(false); // the default: no per-name series
//! # }
//! ```

#![cfg_attr(not(feature = "metrics"), allow(dead_code))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `lockscript_acquire_wait_seconds`.
pub const ACQUIRE_WAIT_SECONDS: &str = "lockscript_acquire_wait_seconds";
/// `lockscript_acquire_attempts`.
pub const ACQUIRE_ATTEMPTS: &str = "lockscript_acquire_attempts";
/// `lockscript_acquired_total`.
pub const ACQUIRED_TOTAL: &str = "lockscript_acquired_total";
/// `lockscript_acquire_failures_total`.
pub const ACQUIRE_FAILURES_TOTAL: &str = "lockscript_acquire_failures_total";
/// `lockscript_held_seconds`.
pub const HELD_SECONDS: &str = "lockscript_held_seconds";
/// `lockscript_lost_total`.
pub const LOST_TOTAL: &str = "lockscript_lost_total";
/// `lockscript_renewal_seconds`.
pub const RENEWAL_SECONDS: &str = "lockscript_renewal_seconds";
/// `lockscript_renewal_failures_total`.
pub const RENEWAL_FAILURES_TOTAL: &str = "lockscript_renewal_failures_total";
/// `lockscript_suspects_total`.
pub const SUSPECTS_TOTAL: &str = "lockscript_suspects_total";
/// `lockscript_handovers_total`.
pub const HANDOVERS_TOTAL: &str = "lockscript_handovers_total";
/// `lockscript_background_releases_total`.
pub const BACKGROUND_RELEASES_TOTAL: &str = "lockscript_background_releases_total";

/// Whether figures carry the lock's name as a `lock` label.
static LABEL_NAMES: AtomicBool = AtomicBool::new(false);

/// Whether every figure carries a `lock` label with the lock's name (off by default).
/// Turn it on only where the names are few and known: each distinct name becomes a
/// time series of every figure.
///
/// ```
/// # #[cfg(feature = "metrics")]
/// lockscript::metrics::label_lock_names(true);
/// ```
pub fn label_lock_names(on: bool) {
    LABEL_NAMES.store(on, Ordering::Relaxed);
}

/// Registers each figure's help text and unit with the installed recorder; call it once
/// after installing one.
///
/// ```
/// # #[cfg(feature = "metrics")]
/// lockscript::metrics::describe(); // without a recorder: does nothing
/// ```
#[cfg(feature = "metrics")]
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_histogram};
    describe_histogram!(
        ACQUIRE_WAIT_SECONDS,
        Unit::Seconds,
        "Time from a lock()/try_lock() call to its grant"
    );
    describe_histogram!(
        ACQUIRE_ATTEMPTS,
        Unit::Count,
        "Acquisition attempts a grant took"
    );
    describe_counter!(ACQUIRED_TOTAL, Unit::Count, "Locks granted, by how");
    describe_counter!(
        ACQUIRE_FAILURES_TOTAL,
        Unit::Count,
        "lock()/try_lock() calls that ended without a grant, by reason"
    );
    describe_histogram!(
        HELD_SECONDS,
        Unit::Seconds,
        "Time from a grant to its release or loss"
    );
    describe_counter!(LOST_TOTAL, Unit::Count, "Leases lost, by reason");
    describe_histogram!(
        RENEWAL_SECONDS,
        Unit::Seconds,
        "Round trip of a confirmed lease renewal"
    );
    describe_counter!(
        RENEWAL_FAILURES_TOTAL,
        Unit::Count,
        "Lease renewals that failed, by reason"
    );
    describe_counter!(
        SUSPECTS_TOTAL,
        Unit::Count,
        "Leases that became suspect: a renewal failed while they were valid"
    );
    describe_counter!(
        HANDOVERS_TOTAL,
        Unit::Count,
        "Releases that handed the lock to a waiter of the same handle"
    );
    describe_counter!(
        BACKGROUND_RELEASES_TOTAL,
        Unit::Count,
        "Background releases of grants nobody owns and of dropped guards, by result"
    );
}

/// The labels of a figure: `more`, and the lock's name when asked for.
#[cfg(feature = "metrics")]
fn labels(name: &str, more: Option<(&'static str, &'static str)>) -> Vec<metrics::Label> {
    let mut labels = Vec::with_capacity(2);
    if let Some((key, value)) = more {
        labels.push(metrics::Label::new(key, value));
    }
    if LABEL_NAMES.load(Ordering::Relaxed) {
        labels.push(metrics::Label::new("lock", name.to_owned()));
    }
    labels
}

/// A grant became a lease: waited `waited`, after `attempts`, handed over or not.
#[inline]
pub(crate) fn acquired(name: &str, waited: Duration, attempts: u32, handed_over: bool) {
    #[cfg(feature = "metrics")]
    {
        let how = Some(("how", if handed_over { "handover" } else { "attempt" }));
        metrics::histogram!(ACQUIRE_WAIT_SECONDS, labels(name, how)).record(waited.as_secs_f64());
        metrics::histogram!(ACQUIRE_ATTEMPTS, labels(name, how)).record(f64::from(attempts));
        metrics::counter!(ACQUIRED_TOTAL, labels(name, how)).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (name, waited, attempts, handed_over);
}

/// A `lock()` or `try_lock()` ended without a grant.
#[inline]
pub(crate) fn acquire_failed(name: &str, timeout: bool) {
    #[cfg(feature = "metrics")]
    {
        let reason = Some(("reason", if timeout { "timeout" } else { "error" }));
        metrics::counter!(ACQUIRE_FAILURES_TOTAL, labels(name, reason)).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (name, timeout);
}

/// How a lease ended: each lease ends once, with one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// Released by its guard (a delete or a handover) while it was held.
    Released,
    /// A write lease became a read lease (the read lease is a lease of its own).
    Downgraded,
    /// Lost: `expired` (no renewal confirmed in time) or refused by the server.
    Lost { expired: bool },
}

impl End {
    /// The `end` label of `lockscript_held_seconds`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            End::Released => "released",
            End::Downgraded => "downgraded",
            End::Lost { .. } => "lost",
        }
    }
}

/// A lease ended after `held`, as `end` says.
#[inline]
pub(crate) fn ended(name: &str, held: Duration, end: End) {
    #[cfg(feature = "metrics")]
    {
        let label = Some(("end", end.label()));
        metrics::histogram!(HELD_SECONDS, labels(name, label)).record(held.as_secs_f64());
        if let End::Lost { expired } = end {
            let reason = Some(("reason", if expired { "expired" } else { "refused" }));
            metrics::counter!(LOST_TOTAL, labels(name, reason)).increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (name, held, end);
}

/// A renewal ended: confirmed after `took`, refused, or failed.
#[inline]
pub(crate) fn renewed(name: &str, took: Duration, outcome: Result<bool, ()>) {
    #[cfg(feature = "metrics")]
    match outcome {
        Ok(true) => {
            metrics::histogram!(RENEWAL_SECONDS, labels(name, None)).record(took.as_secs_f64());
        }
        Ok(false) => metrics::counter!(
            RENEWAL_FAILURES_TOTAL,
            labels(name, Some(("reason", "refused")))
        )
        .increment(1),
        Err(()) => metrics::counter!(
            RENEWAL_FAILURES_TOTAL,
            labels(name, Some(("reason", "error")))
        )
        .increment(1),
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (name, took, outcome);
}

/// A lease became suspect: a renewal failed while it was valid.
#[inline]
pub(crate) fn suspected(name: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(SUSPECTS_TOTAL, labels(name, None)).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = name;
}

/// A release handed the lock straight to a waiter of the same handle.
#[inline]
pub(crate) fn handed_over(name: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(HANDOVERS_TOTAL, labels(name, None)).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = name;
}

/// A background release ended: `Ok(true)` released, `Ok(false)` not held any more,
/// `Err(())` failed (the ttl frees the key).
#[inline]
pub(crate) fn background_release(name: &str, result: Result<bool, ()>) {
    #[cfg(feature = "metrics")]
    {
        let result = Some((
            "result",
            match result {
                Ok(true) => "released",
                Ok(false) => "not_held",
                Err(()) => "failed",
            },
        ));
        metrics::counter!(BACKGROUND_RELEASES_TOTAL, labels(name, result)).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (name, result);
}
