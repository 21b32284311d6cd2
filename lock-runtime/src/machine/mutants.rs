//! Switches that put known bugs back, for the chaos checker's own tests: a checker is
//! trusted only once it has caught them. Compiled in only with the `mutants` feature,
//! which the test crate enables and no application should; without it every switch is a
//! constant `false`.

#[cfg(feature = "mutants")]
use std::sync::atomic::{AtomicBool, Ordering};

#[cfg(feature = "mutants")]
static NO_DEADLINE: AtomicBool = AtomicBool::new(false);

#[cfg(feature = "mutants")]
static REFUSAL_AFTER_STOP_LOSES: AtomicBool = AtomicBool::new(false);

/// Turns the lease's deadline off: the loss is no longer evaluated on the clock, only
/// signalled when the server refuses a renewal (the bug that let a holder learn of its
/// loss seconds after its lease ended).
///
/// ```no_run
/// lockscript::__private::mutants::set_no_deadline(true);
/// ```
#[cfg(feature = "mutants")]
pub fn set_no_deadline(on: bool) {
    NO_DEADLINE.store(on, Ordering::SeqCst);
}

/// Whether the deadline is off.
#[cfg(feature = "mutants")]
pub(crate) fn no_deadline() -> bool {
    NO_DEADLINE.load(Ordering::Relaxed)
}

/// Whether the deadline is off: never, in this build.
#[cfg(not(feature = "mutants"))]
pub(crate) const fn no_deadline() -> bool {
    false
}

/// Makes a renewal's refusal that comes after the release began a loss at once, as while
/// the lease is held, instead of waiting for the release's answer (issue 37, defect 5: a
/// renewal sent before the release reached the server after it, on another connection,
/// and was refused; the release had answered `Ok`, and `lost()` fired anyway).
///
/// ```no_run
/// lockscript::__private::mutants::set_refusal_after_stop_loses(true);
/// ```
#[cfg(feature = "mutants")]
pub fn set_refusal_after_stop_loses(on: bool) {
    REFUSAL_AFTER_STOP_LOSES.store(on, Ordering::SeqCst);
}

/// Whether a refusal after the stop is a loss at once.
#[cfg(feature = "mutants")]
pub(crate) fn refusal_after_stop_loses() -> bool {
    REFUSAL_AFTER_STOP_LOSES.load(Ordering::Relaxed)
}

/// Whether a refusal after the stop is a loss at once: never, in this build.
#[cfg(not(feature = "mutants"))]
pub(crate) const fn refusal_after_stop_loses() -> bool {
    false
}
