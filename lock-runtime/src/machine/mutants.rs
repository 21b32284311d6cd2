//! Switches that put known bugs back, for the checkers' own tests (the chaos checker's
//! and the model checker's): a checker is trusted only once it has caught them. Compiled
//! in only with the `mutants` feature, which the test crate enables and no application
//! should; without it every switch is a constant `false`.

/// One switch: `$set` turns the bug on or off, `$on` tells the machine whether it is
/// on (a constant `false` without the feature).
macro_rules! switch {
    ($(#[$doc:meta])* $set:ident, $on:ident, $flag:ident) => {
        #[cfg(feature = "mutants")]
        static $flag: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

        $(#[$doc])*
        #[cfg(feature = "mutants")]
        pub fn $set(on: bool) {
            $flag.store(on, std::sync::atomic::Ordering::SeqCst);
        }

        /// Whether the bug is put back.
        #[cfg(feature = "mutants")]
        pub(crate) fn $on() -> bool {
            $flag.load(std::sync::atomic::Ordering::Relaxed)
        }

        /// Whether the bug is put back: never, in this build.
        #[cfg(not(feature = "mutants"))]
        pub(crate) const fn $on() -> bool {
            false
        }
    };
}

switch!(
    /// Turns the lease's deadline off: the loss is no longer evaluated on the clock, only
    /// signalled when the server refuses a renewal (the bug that let a holder learn of its
    /// loss seconds after its lease ended).
    ///
    /// ```no_run
    /// lockscript::__private::mutants::set_no_deadline(true);
    /// ```
    set_no_deadline,
    no_deadline,
    NO_DEADLINE
);

switch!(
    /// Makes a renewal's refusal that comes after the release began a loss at once, as
    /// while the lease is held, instead of waiting for the release's answer (issue 37,
    /// defect 5: a renewal sent before the release reached the server after it, on
    /// another connection, and was refused; the release had answered `Ok`, and `lost()`
    /// fired anyway).
    ///
    /// ```no_run
    /// lockscript::__private::mutants::set_refusal_after_stop_loses(true);
    /// ```
    set_refusal_after_stop_loses,
    refusal_after_stop_loses,
    REFUSAL_AFTER_STOP_LOSES
);

switch!(
    /// Makes a background release of a grant whose command got no answer stop at its
    /// first "nothing to release", as if that proved there was no grant (issue 37,
    /// defect 6: on a pool the release ran on another connection before the delayed
    /// attempt, found nothing and stopped; the attempt then granted the lock to a token
    /// nobody owns, held by nobody for its whole TTL).
    ///
    /// ```no_run
    /// lockscript::__private::mutants::set_orphan_release_stops_at_nothing(true);
    /// ```
    set_orphan_release_stops_at_nothing,
    orphan_release_stops_at_nothing,
    ORPHAN_RELEASE_STOPS_AT_NOTHING
);

switch!(
    /// Counts a confirmed renewal or extension for its own ttl even while another
    /// command of the lease with a shorter ttl was in flight beside it (the bug of an
    /// `extend` queued behind other calls: whichever ran last on the server set the key's
    /// end, and the holder believed in the longer one).
    ///
    /// ```no_run
    /// lockscript::__private::mutants::set_overlap_ignored(true);
    /// ```
    set_overlap_ignored,
    overlap_ignored,
    OVERLAP_IGNORED
);

switch!(
    /// Keeps a lease's validity end while an `extend` for less than what is left is in
    /// flight or got no answer (the bug the model checker found: `extend(200 ms)` on a
    /// lease valid 300 ms more ran on the server, its answer was lost, and the holder kept
    /// believing in the 300 ms while the key expired at 200).
    ///
    /// ```no_run
    /// lockscript::__private::mutants::set_shorter_extend_trusted(true);
    /// ```
    set_shorter_extend_trusted,
    shorter_extend_trusted,
    SHORTER_EXTEND_TRUSTED
);

switch!(
    /// Ends a background release of a grant whose command got no answer on the first
    /// "nothing to release" answered at or after the grant's TTL end, whenever that try
    /// was sent (the bug the model checker found: a try sent before the end ran before
    /// the delayed attempt, its answer came at the end, and the release stopped with the
    /// attempt's grant on the server for its whole TTL).
    ///
    /// ```no_run
    /// lockscript::__private::mutants::set_last_look_by_its_answer(true);
    /// ```
    set_last_look_by_its_answer,
    last_look_by_its_answer,
    LAST_LOOK_BY_ITS_ANSWER
);

switch!(
    /// Makes a native command the server refuses (`ERR unknown command`, `ERR syntax
    /// error`, `NOPERM`) an error like any other, instead of the proof that it did not run
    /// (issue 37, defect 2: a pipeline's error hid which command failed, so a server
    /// replaced by an older one refused every native renewal, the handle never went to
    /// scripts, and the lease was lost with its key alive).
    ///
    /// ```no_run
    /// lockscript::__private::mutants::set_native_refusal_unseen(true);
    /// ```
    set_native_refusal_unseen,
    native_refusal_unseen,
    NATIVE_REFUSAL_UNSEEN
);

switch!(
    /// Makes a refused notification beside a native release the release's own error, as
    /// a pipeline's error was before each command's reply was read on its own (issue 37,
    /// defect 1: a user without pub/sub rights; the refusal was taken for a refused
    /// `DELIFEQ`, the release went again as compare-del.lua, found the key it had just
    /// deleted gone, and reported `NotHeld`).
    ///
    /// ```no_run
    /// lockscript::__private::mutants::set_notification_error_is_the_calls(true);
    /// ```
    set_notification_error_is_the_calls,
    notification_error_is_the_calls,
    NOTIFICATION_ERROR_IS_THE_CALLS
);

switch!(
    /// Makes an attempt's background release look for its grant until the attempt's
    /// start plus the lease, as before the acquire transaction (which may go out a round
    /// trip after the attempt started, after the connection's clock question): the
    /// release's last look can come before the grant, which then stays for its TTL,
    /// owned by nobody (found by the model checker in the first cut of the transaction).
    ///
    /// ```no_run
    /// lockscript::__private::mutants::set_attempt_release_from_its_start(true);
    /// ```
    set_attempt_release_from_its_start,
    attempt_release_from_its_start,
    ATTEMPT_RELEASE_FROM_ITS_START
);

switch!(
    /// Learns the server's clock against the time `TIME` was sent, not when its reply
    /// was read (the first cut of the acquire transaction): the clock learnt runs ahead
    /// of the server's by up to a round trip, a counter restarted from it too, and a
    /// restart of the server without its data, restarting the counter from the server's
    /// clock, repeats a fence (found by the model checker).
    ///
    /// ```no_run
    /// lockscript::__private::mutants::set_clock_learnt_at_the_send(true);
    /// ```
    set_clock_learnt_at_the_send,
    clock_learnt_at_the_send,
    CLOCK_LEARNT_AT_THE_SEND
);

switch!(
    /// Estimates the server's clock on this process's wall clock instead of its monotonic
    /// clock (the acquire transaction before the model checker had clock steps): a wall
    /// clock stepped forward after a connection learnt the server's clock carries the
    /// estimate, and a counter restarted from it, ahead of the server's by the step, and
    /// tokens fall when that counter idles out and restarts from the server's clock.
    ///
    /// ```no_run
    /// lockscript::__private::mutants::set_wall_clock_estimate(true);
    /// ```
    set_wall_clock_estimate,
    wall_clock_estimate,
    WALL_CLOCK_ESTIMATE
);
