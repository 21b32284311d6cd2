//! Switches that put known bugs back, for the chaos checker's own tests: a checker is
//! trusted only once it has caught them. Compiled in only with the `mutants` feature,
//! which the test crate enables and no application should; without it every switch is a
//! constant `false`.

#[cfg(feature = "mutants")]
use std::sync::atomic::{AtomicBool, Ordering};

#[cfg(feature = "mutants")]
static NO_DEADLINE: AtomicBool = AtomicBool::new(false);

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
