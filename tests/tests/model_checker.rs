//! The model checker (`lockscript_test::model`, issue 42): the bounded search finds no
//! violation in the lock machine, and each defect put back is found, with a shortest
//! history that shows it.

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use lockscript::__private::mutants;
use lockscript_test::model::server::Denied;
use lockscript_test::model::{Config, Events, Property, Report, Violation, explore};

/// Every search in a module of its own, so that a run of the other tests skips them by one
/// name (`--skip model_search`, this module and the queue's: the server matrix, which
/// they do not need).
mod model_search {
    use super::*;

    /// The switches that put defects back are process-wide: a search that plants one runs
    /// alone; the others (which plant nothing) run side by side, one per core.
    static SWITCHES: RwLock<()> = RwLock::new(());

    /// For a test that plants no defect.
    fn beside_others() -> RwLockReadGuard<'static, ()> {
        SWITCHES.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// For a test that plants a defect: no other search runs meanwhile.
    fn alone() -> RwLockWriteGuard<'static, ()> {
        SWITCHES.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// A defect put back for as long as it lives.
    struct Planted(fn(bool));

    impl Planted {
        fn new(switch: fn(bool)) -> Self {
            switch(true);
            Self(switch)
        }
    }

    impl Drop for Planted {
        fn drop(&mut self) {
            (self.0)(false);
        }
    }

    /// The search's figures, for the CI log and the reliability guide.
    fn search(what: &str, config: &Config) -> Report {
        let report = explore(config);
        println!("{what}: {report}");
        report
    }

    /// Searches `config` and returns the violation of `property` it must find, in a short
    /// history.
    fn found(what: &str, config: &Config, property: Property) -> Violation {
        let report = search(what, config);
        let violation = report.violation.expect("the planted defect is found");
        assert_eq!(violation.rule, property.name(), "{violation}");
        assert!(violation.actions <= 13, "a short history: {violation}");
        violation
    }

    /// Searches `config`, which must hold every promise.
    fn clean(what: &str, config: &Config) {
        let report = search(what, config);
        assert!(report.violation.is_none(), "{report}");
        assert!(report.states > 1_000, "the search went somewhere: {report}");
    }

    #[test]
    fn the_bounded_search_finds_no_violation() {
        let _switches = beside_others();
        clean("bounded search", &Config::default());
    }

    /// The released-then-lost renewal of issue 37 (defect 5) put back: a renewal sent before
    /// the release, run after it on the handle's other connection and refused, makes the
    /// lease lost though the release returned `Ok`.
    #[test]
    fn a_refusal_after_the_release_is_found_as_a_released_lease_lost() {
        let _alone = alone();
        let _planted = Planted::new(mutants::set_refusal_after_stop_loses);
        found(
            "refusal after release, planted",
            &Config::default(),
            Property::ReleasedNotLost,
        );
        // It takes two connections: on one, the renewal runs before the release.
        let mut one_connection = Config {
            clients: 1,
            ..Config::default()
        };
        one_connection.events.reorder = false;
        clean(
            "refusal after release, planted, one connection",
            &one_connection,
        );
    }

    /// The lease deadline switched off (the chaos checker's own planted defect): a holder
    /// whose watchdog is paused past its lease still finds it valid. Each property that
    /// rests on the deadline finds it on its own.
    #[test]
    fn a_lease_without_its_deadline_is_found_by_each_property_it_breaks() {
        let _alone = alone();
        let _planted = Planted::new(mutants::set_no_deadline);
        for property in [
            Property::LostByValidityEnd,
            Property::ServerAgrees,
            Property::Exclusion,
        ] {
            let config = Config {
                properties: vec![property],
                ..Config::default()
            };
            found(
                &format!("no deadline, planted, {}", property.name()),
                &config,
                property,
            );
        }
    }

    /// A defect in the model's own server: a fencing counter lost in a restart starts again
    /// from 1, not from the server's clock. The fence check finds the repeat.
    #[test]
    fn a_fencing_counter_restarting_from_one_is_found() {
        let _switches = beside_others();
        let config = Config {
            counter_from_one: true,
            ..Config::default()
        };
        found("counter from 1, planted", &config, Property::FencesRise);
    }

    /// The orphan over a pool of issue 37 (defect 6) put back: an attempt gets no answer, its
    /// background release goes out on the handle's other connection, runs first, finds nothing
    /// and stops; the delayed attempt then grants the lock to a token nobody owns.
    #[test]
    fn a_background_release_that_stops_at_nothing_is_found_as_an_orphan() {
        let _alone = alone();
        let _planted = Planted::new(mutants::set_orphan_release_stops_at_nothing);
        found(
            "orphan release stops at nothing, planted",
            &Config::default(),
            Property::NothingOrphaned,
        );
        // As the review met it: not a dropped `lock()`, an attempt that timed out.
        let mut timed_out = Config::default();
        timed_out.events.cancels = false;
        found(
            "orphan release stops at nothing, planted, no cancels",
            &timed_out,
            Property::NothingOrphaned,
        );
        // It takes two connections: on one, the attempt runs before its release.
        let mut one_connection = Config {
            depth: 14,
            ..Config::default()
        };
        one_connection.events.reorder = false;
        clean(
            "orphan release stops at nothing, planted, one connection",
            &one_connection,
        );
    }

    /// A `try_lock()` beside a `lock()`: one attempt, then `Ok(None)` or a guard, dropped
    /// midway or not, keeps every promise.
    #[test]
    fn a_try_lock_beside_a_lock_keeps_every_promise() {
        let _switches = beside_others();
        let config = Config {
            try_locks: 1,
            rounds: 2,
            depth: 12,
            ..Config::default()
        };
        clean("try_lock beside lock", &config);
    }

    /// Two commands of one lease in flight at once counted for the longer ttl put back: an
    /// `extend` for 200 ms sent beside a 300 ms renewal runs last on the server, and the
    /// holder believes in the renewal's 300 ms.
    #[test]
    fn an_extend_beside_a_renewal_counted_for_the_longer_ttl_is_found() {
        let _alone = alone();
        let _planted = Planted::new(mutants::set_overlap_ignored);
        found(
            "overlap ignored, planted",
            &Config::default(),
            Property::ServerAgrees,
        );
        // Without `extend` (renewals all ask for one ttl) there is nothing to find.
        let mut no_extend = Config {
            depth: 14,
            ..Config::default()
        };
        no_extend.events.extends = false;
        clean("overlap ignored, planted, no extend", &no_extend);
    }

    /// Found by this checker (`--faults 3`): an `extend` for less than what is left of the
    /// lease, run on the server with its answer lost, left the holder believing in the
    /// longer lease while the key expired at the shorter one. Put back, it is found again
    /// (fixed, the same world holds every promise: see the next test's clean search).
    #[test]
    fn an_extend_for_less_than_is_left_whose_answer_is_lost_is_found() {
        let _alone = alone();
        let config = Config {
            faults: 3,
            depth: 11,
            ..Config::default()
        };
        {
            let _planted = Planted::new(mutants::set_shorter_extend_trusted);
            found(
                "shorter extend trusted, planted",
                &config,
                Property::ServerAgrees,
            );
        }
    }

    /// Found by this checker (`--faults 3`): a background release's try sent before the
    /// grant's TTL end ran before the delayed attempt, its "nothing" came back at the end,
    /// and the release stopped with the attempt's grant on the server, owned by nobody.
    /// Put back, it is found again; fixed, three faults find nothing up to 13 actions.
    /// Leases of 200 ms: the release now looks until the attempt's bound plus the lease
    /// (the last look's end), and with 300 ms leases the history that shows the defect is a
    /// tick longer than this search (the planted run at 13 actions, 300 ms, found nothing).
    #[test]
    fn a_last_look_judged_by_its_answer_not_its_send_is_found() {
        let _alone = alone();
        let config = Config {
            faults: 3,
            depth: 13,
            ttl: 2,
            ..Config::default()
        };
        {
            let _planted = Planted::new(mutants::set_last_look_by_its_answer);
            found(
                "last look by its answer, planted",
                &config,
                Property::NothingOrphaned,
            );
        }
        clean("three faults", &config);
    }

    /// The world of the native commands: the server starts with `SET … IFEQ` and
    /// `DELIFEQ` (Valkey 9), each handle asks it beside its first lease call and goes
    /// native once it knows, and an older server may take over with the data (a failover
    /// to a replica of an older version), refusing them from then on.
    fn native_world() -> Config {
        let mut config = Config {
            native: true,
            depth: 14,
            ..Config::default()
        };
        config.events.downgrades = 1;
        config
    }

    /// Native renewals and releases, the question asked beside them, and a server that
    /// refuses them after a downgrade keep every promise.
    #[test]
    fn native_commands_and_a_downgrade_keep_every_promise() {
        let _switches = beside_others();
        clean("native commands, a downgrade", &native_world());
    }

    /// The hidden refusal of issue 37 (defect 2) put back: a native command refused by an
    /// older server taken for an error like any other, the handle never goes to scripts,
    /// and a lease no fault touched is lost (the review's lease was lost at 2 s with its
    /// key alive). Not found without the downgrade.
    #[test]
    fn a_native_refusal_taken_for_an_error_is_found_as_an_untouched_lease_lost() {
        let _alone = alone();
        let _planted = Planted::new(mutants::set_native_refusal_unseen);
        let mut one = Config {
            native: true,
            clients: 1,
            faults: 1,
            depth: 22,
            horizon: 10,
            ..Config::default()
        };
        one.events.downgrades = 1;
        let report = search("native refusal unseen, planted", &one);
        let violation = report.violation.expect("the planted defect is found");
        assert_eq!(violation.rule, Property::Kept.name(), "{violation}");
        // Two of them the connection's clock question before its first acquire transaction.
        assert!(violation.actions <= 20, "a short history: {violation}");
        one.events.downgrades = 0;
        clean("native refusal unseen, planted, no downgrade", &one);
    }

    /// A lock user whose ACL refuses the native commands (which `COMMAND DOCS` still
    /// documents) or `PUBLISH` on the release channel keeps every promise in the native
    /// world: a refused native command goes again as its script, and a refused notification
    /// beside a native release leaves the release its delete's reply.
    #[test]
    fn an_acl_refusing_native_commands_or_the_notification_keeps_every_promise() {
        let _switches = beside_others();
        for denied in [Denied::Native, Denied::Publish] {
            let config = Config {
                denied,
                depth: 13,
                ..native_world()
            };
            clean(
                &format!("native world, the ACL refusing {denied:?}"),
                &config,
            );
        }
    }

    /// The refused notification of issue 37 (defect 1) put back: a user without pub/sub
    /// rights, the `PUBLISH` beside a native release refused, taken for the release's own
    /// error; the release goes again as compare-del.lua, finds the key it had just deleted
    /// gone, and answers `NotHeld` for a lease no fault touched.
    #[test]
    fn a_refused_notification_taken_for_the_releases_error_is_found() {
        let _alone = alone();
        let _planted = Planted::new(mutants::set_notification_error_is_the_calls);
        let mut one = Config {
            native: true,
            denied: Denied::Publish,
            clients: 1,
            faults: 0,
            depth: 16,
            ..Config::default()
        };
        let report = search("notification error is the call's, planted", &one);
        let violation = report.violation.expect("the planted defect is found");
        assert_eq!(violation.rule, Property::Kept.name(), "{violation}");
        // Two of them the connection's clock question before its first acquire transaction.
        assert!(violation.actions <= 14, "a short history: {violation}");
        // With `PUBLISH` allowed there is nothing to find, even with a fault and a second
        // client.
        one.denied = Denied::Nothing;
        one.clients = 2;
        one.faults = 1;
        one.depth = 14;
        clean(
            "notification error is the call's, planted, PUBLISH allowed",
            &one,
        );
    }

    /// The acquire transaction's world: native commands on (a plain attempt is the
    /// transaction after the connection's clock question), three faults.
    fn transaction_world(depth: usize) -> Config {
        Config {
            native: true,
            faults: 3,
            depth,
            ..Config::default()
        }
    }

    /// The acquire transaction keeps every promise with three faults of the world: the
    /// clock question and the transaction each late, lost or overtaken, the server
    /// restarted with or without its data between them.
    #[test]
    fn the_acquire_transaction_keeps_every_promise_with_three_faults() {
        let _switches = beside_others();
        clean("acquire transaction, three faults", &transaction_world(11));
    }

    /// The first cut's background release put back: it looked for an attempt's grant until
    /// the attempt's start plus the lease, and the transaction, sent after the clock
    /// question, granted after its last look.
    #[test]
    fn a_release_that_stops_at_the_attempts_start_plus_the_lease_is_found() {
        let _alone = alone();
        let _planted = Planted::new(mutants::set_attempt_release_from_its_start);
        let report = search(
            "attempt's release from its start, planted",
            &transaction_world(11),
        );
        let violation = report.violation.expect("the planted defect is found");
        assert_eq!(
            violation.rule,
            Property::NothingOrphaned.name(),
            "{violation}"
        );
        assert!(violation.actions <= 11, "a short history: {violation}");
    }

    /// The first cut's clock put back: learnt against the send of `TIME`, it ran a round
    /// trip ahead of the server's, a counter restarted from it too, and a restart without
    /// the data repeated a fence.
    #[test]
    fn a_clock_learnt_at_the_send_is_found_as_a_repeated_fence() {
        let _alone = alone();
        let _planted = Planted::new(mutants::set_clock_learnt_at_the_send);
        let report = search("clock learnt at the send, planted", &transaction_world(11));
        let violation = report.violation.expect("the planted defect is found");
        assert_eq!(violation.rule, Property::FencesRise.name(), "{violation}");
        assert!(violation.actions <= 11, "a short history: {violation}");
    }

    /// A world whose clocks step (native commands on, so attempts go as the acquire
    /// transaction and estimate the server's clock): two faults, one of them the step.
    fn clock_world(depth: usize) -> Config {
        Config {
            native: true,
            depth,
            ..Config::default()
        }
    }

    /// The server's wall clock stepped back less than a fencing counter's idle time (its
    /// lease and the retention: 400 ms here; the step 300 ms): every promise kept, fences
    /// rising across the counter's expiry and restart from the clock that went back, leases
    /// longer on the server than their holders count.
    #[test]
    fn a_servers_clock_stepped_back_less_than_a_counters_idle_time_keeps_every_promise() {
        let _switches = beside_others();
        let mut config = clock_world(14);
        config.events.clock_back = 3;
        clean("the server's clock stepped back 300 ms", &config);
    }

    /// The bound is tight: a step back as long as the counter's idle time (400 ms) lets a
    /// counter that idled out restart where it was, and a fence repeats. The reliability
    /// guide's promise reads "less than".
    #[test]
    fn a_step_back_as_long_as_a_counters_idle_time_is_found_as_a_repeated_fence() {
        let _switches = beside_others();
        let mut config = clock_world(14);
        config.events.clock_back = 4;
        let report = search("the server's clock stepped back 400 ms", &config);
        let violation = report.violation.expect("a repeated fence");
        assert_eq!(violation.rule, Property::FencesRise.name(), "{violation}");
    }

    /// A forward jump of the server's clock beyond the drift margin (200 ms, past the 5 ms
    /// margin of a 300 ms lease, and past the renewal the watchdog sends every 100 ms) ends
    /// a lease on the server while its holder still counts on it: found as two holders at
    /// once when only exclusion is checked. The guide's exclusion promise excludes such
    /// jumps; this shows the checker sees them.
    #[test]
    fn a_forward_jump_beyond_the_drift_margin_is_found_as_two_holders() {
        let _switches = beside_others();
        let mut config = clock_world(14);
        config.events.clock_ahead = 2;
        config.properties = vec![Property::Exclusion];
        let report = search("the server's clock jumped 200 ms ahead", &config);
        let violation = report.violation.expect("two holders");
        assert_eq!(violation.rule, Property::Exclusion.name(), "{violation}");
    }

    /// A client's wall clock stepped ahead (500 ms, more than a counter's idle time) after
    /// its connection learnt the server's clock: nothing changes, since the estimate runs
    /// on the monotonic clock. With the estimate on the wall clock put back (the code before
    /// the model had clock steps), the next counter that connection restarts starts ahead
    /// of the server's clock by the step (found as such: a later restart from the clock
    /// would repeat its fences), in 20 actions: the counter must idle out after the step
    /// (400 ms). So the world is cut to what that takes, searched to 30 actions: the step
    /// its one fault, no other event.
    #[test]
    fn a_clients_wall_clock_step_is_harmless_and_an_estimate_on_it_is_found() {
        let _alone = alone();
        let quiet = Events {
            timeouts: false,
            reorder: false,
            pauses: false,
            restarts: 0,
            cancels: false,
            extends: false,
            drops: false,
            restarts_keeping: 0,
            wall_ahead: 5,
            ..Events::default()
        };
        let config = Config {
            events: quiet,
            faults: 1,
            ..clock_world(30)
        };
        clean("a client's wall clock stepped, the step alone", &config);
        let _planted = Planted::new(mutants::set_wall_clock_estimate);
        let report = search("the estimate on the wall clock, planted", &config);
        let violation = report.violation.expect("the planted defect is found");
        assert_eq!(violation.rule, Property::FencesRise.name(), "{violation}");
        assert!(violation.actions <= 20, "a short history: {violation}");
    }

    /// The lock user's ACL changed midway, twice (rights revoked, then restored): the native
    /// commands the handles found refused with `NOPERM` from one call to the next, or the
    /// release channel's `PUBLISH`. Every promise kept; and a defect the fixed ACL caught is
    /// caught when the ACL changes under a handle that already went native.
    #[test]
    fn an_acl_changed_midway_keeps_every_promise_and_its_defects_are_found() {
        let _alone = alone();
        let world = |to| {
            let mut config = Config {
                depth: 12,
                ..native_world()
            };
            config.events.acl_changes = 2;
            config.events.acl_to = to;
            config
        };
        for to in [Denied::Native, Denied::Publish] {
            clean(
                &format!("the ACL changed midway to refuse {to:?}"),
                &world(to),
            );
        }
        // The notification's refusal taken for the release's error, the ACL revoking
        // `PUBLISH` under a handle whose release goes native. (The hidden native refusal
        // needs 20 actions or more, as with a downgrade: the guide's table.)
        let _planted = Planted::new(mutants::set_notification_error_is_the_calls);
        let mut config = world(Denied::Publish);
        config.events.downgrades = 0;
        config.events.acl_changes = 1;
        config.depth = 15;
        let report = search("the ACL changed to refuse PUBLISH, planted", &config);
        let violation = report.violation.expect("the planted defect is found");
        assert_eq!(violation.rule, Property::Kept.name(), "{violation}");
    }
}

/// The queue's world: fair locks, readers and writers, permits and kinds mixed on one
/// name, against fair-queue.lua itself (the searches and the defects they must find).
mod model_search_queue {
    use lockscript::__private::model::Grants;
    use lockscript_test::model::Report;
    use lockscript_test::model::queue::{Defect, QueueConfig, QueueProperty, explore_queue};

    fn search(what: &str, config: &QueueConfig) -> Report {
        let report = explore_queue(config);
        println!("{what}: {report}");
        report
    }

    /// Searches `config`, which must keep every promise.
    fn clean(what: &str, config: &QueueConfig) {
        let report = search(what, config);
        assert!(report.violation.is_none(), "{report}");
        assert!(report.states > 1_000, "the search went somewhere: {report}");
    }

    /// Searches `config` with `defect` planted in fair-queue.lua: the violation of
    /// `property` must be found, with its history.
    fn found(what: &str, config: &QueueConfig, defect: Defect, property: QueueProperty) {
        let mut config = config.clone();
        config.defect = Some(defect);
        let report = search(what, &config);
        let violation = report.violation.expect("the planted defect is found");
        assert_eq!(violation.rule, property.name(), "{violation}");
        assert!(!violation.history.is_empty(), "{violation}");
    }

    /// `grants`, every history of up to `depth` actions without a fault, then every one
    /// of up to `faulty` actions with one fault (each of the world's, anywhere).
    fn worlds(grants: &[Grants], depth: usize, faulty: usize) -> [QueueConfig; 2] {
        let mut quiet = QueueConfig::of(grants);
        quiet.faults = 0;
        quiet.depth = depth;
        let mut one_fault = QueueConfig::of(grants);
        one_fault.depth = faulty;
        [quiet, one_fault]
    }

    #[test]
    fn three_fair_waiters_keep_every_promise_and_a_queue_served_from_its_end_is_found() {
        let fair = [Grants::FairLock; 3];
        let [quiet, faults] = worlds(&fair, 18, 7);
        clean("three fair locks", &quiet);
        clean("three fair locks, one fault", &faults);
        let mut two = QueueConfig::of(&fair[..2]);
        two.depth = 12;
        clean("two fair locks, one fault", &two);
        found(
            "three fair locks, the queue served from its end",
            &quiet,
            Defect::ServeLast,
            QueueProperty::FirstComeFirstServed,
        );
        found(
            "three fair locks, the counter not raised by a grant",
            &quiet,
            Defect::FenceRepeats,
            QueueProperty::Fences,
        );
    }

    #[test]
    fn permits_keep_their_count_and_one_too_many_is_found() {
        let [quiet, faults] = worlds(&[Grants::Permits(2); 3], 14, 7);
        clean("three waiters for two permits", &quiet);
        clean("three waiters for two permits, one fault", &faults);
        found(
            "permits, one too many",
            &quiet,
            Defect::PermitOver,
            QueueProperty::Kinds,
        );
    }

    #[test]
    fn readers_and_a_writer_keep_every_promise_and_a_writer_beside_readers_is_found() {
        let [quiet, faults] = worlds(&[Grants::Read, Grants::Write, Grants::Read], 14, 7);
        clean("two readers and a writer", &quiet);
        clean("two readers and a writer, one fault", &faults);
        found(
            "readers and a writer, the writer admitted beside readers",
            &quiet,
            Defect::WriterBesideReaders,
            QueueProperty::Kinds,
        );
    }

    #[test]
    fn kinds_mixed_on_one_name_are_never_granted_together() {
        let mixed = [Grants::FairLock, Grants::Read, Grants::Permits(2)];
        let [quiet, faults] = worlds(&mixed, 16, 7);
        clean("a lock, a reader and a permit on one name", &quiet);
        clean(
            "a lock, a reader and a permit on one name, one fault",
            &faults,
        );
        found(
            "a lock, a reader and a permit, the holding kind not checked",
            &quiet,
            Defect::KindsMixed,
            QueueProperty::Kinds,
        );
    }

    /// Waiters on two names share the handles' handoff channel: a letter for one name
    /// never serves the other, and each name keeps its own queue's order.
    #[test]
    fn waiters_on_two_names_keep_each_names_promises() {
        let [mut quiet, mut faults] =
            worlds(&[Grants::FairLock, Grants::FairLock, Grants::Write], 14, 7);
        quiet.names = vec![0, 1, 0];
        faults.names = vec![0, 1, 0];
        clean("two names: two fair locks and a writer", &quiet);
        clean("two names: two fair locks and a writer, one fault", &faults);
    }

    #[test]
    fn a_release_that_wakes_nobody_is_found_as_a_lost_wake_up() {
        let [quiet, _] = worlds(&[Grants::FairLock; 2], 24, 0);
        found(
            "two fair locks, a release that wakes nobody",
            &quiet,
            Defect::NoHandoff,
            QueueProperty::NoLostWakeUp,
        );
        // Leases of 1 s, so that the claim a handoff gives (its lease here) outlasts the
        // bound: with 300 ms leases the claim runs out first, and the waiter's next
        // queue call is granted afresh within the bound.
        let mut long = quiet.clone();
        (long.ttl, long.wait_timeout, long.horizon, long.depth) = (10, 16, 16, 40);
        found(
            "two fair locks, 1 s leases, a handoff nobody is told of",
            &long,
            Defect::HandoffUnannounced,
            QueueProperty::NoLostWakeUp,
        );
    }
}
