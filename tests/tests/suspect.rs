//! The suspect signal, measured, on both faces: a renewal that fails while the lease is
//! valid (a partition, here the fault proxy holding every byte) makes the lease suspect
//! no later than the renewal's due time plus the response timeout plus the scheduling
//! slack, while it is still valid; the next confirmed renewal clears it before the
//! validity end; a lease whose renewals never fail is never suspect.

use std::thread;
use std::time::{Duration, Instant};

use lockscript_test::faces::{Face, Held};
use lockscript_test::on_both_faces;
use lockscript_test::proxy::Proxy;
use lockscript_test::server::RedisServer;

/// The lease: long enough that a renewal can fail, be retried and be confirmed within
/// it.
const TTL: Duration = Duration::from_secs(2);
/// The README's scheduling slack on a call's bound.
const CALL_SLACK: Duration = Duration::from_millis(250);
const RESPONSE_TIMEOUT: Duration = lockscript::DEFAULT_RESPONSE_TIMEOUT;

on_both_faces!(
    a_failed_renewal_makes_the_lease_suspect_in_time_and_a_confirmed_one_clears_it,
    every_lease_of_a_failed_batch_of_renewals_is_suspect_in_time,
    every_lease_of_a_batch_the_server_refuses_for_now_is_suspect_in_time,
    a_lease_whose_renewals_succeed_is_never_suspect,
    background_releases_never_delay_a_renewal,
);

/// When the granting command was sent: the validity end minus the validity (ttl less
/// the drift allowance, 1% + 2 ms).
fn sent_at(valid_until: Instant) -> Instant {
    let drift = TTL / 100 + Duration::from_millis(2);
    let validity = TTL.checked_sub(drift).expect("the drift is below the ttl");
    valid_until
        .checked_sub(validity)
        .expect("a grant sent after boot")
}

/// The bound: a lease whose renewal was due at `due` and failed is suspect by `became`,
/// no later than the response timeout plus the scheduling slack after `due`.
fn assert_suspect_in_time(face: &str, lease: &str, became: Instant, due: Instant) {
    assert!(
        became <= due + RESPONSE_TIMEOUT + CALL_SLACK,
        "{face}: {lease} suspect {:?} after its renewal was due (bound: the response timeout {:?} + {:?})",
        became.saturating_duration_since(due),
        RESPONSE_TIMEOUT,
        CALL_SLACK
    );
}

/// A server, the fault proxy in front of it, and a handle of face `F` through the proxy
/// with the lease [`TTL`].
fn behind_proxy<F: Face>() -> (RedisServer, Proxy, F) {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let settings = lockscript_test::faces::Settings {
        ttl: TTL,
        ..F::settings()
    };
    let locks = F::connect_client(&redis::Client::open(proxy.url()).unwrap(), settings);
    (server, proxy, locks)
}

fn a_failed_renewal_makes_the_lease_suspect_in_time_and_a_confirmed_one_clears_it<F: Face>() {
    let (_server, proxy, locks) = behind_proxy::<F>();
    let guard = locks.lock("suspect").unwrap();
    let first_end = guard.valid_until();
    let due = sent_at(first_end) + TTL / 3;
    assert!(!guard.is_suspect(), "{}: fresh", F::NAME);
    proxy.set_blackhole(true);
    assert!(
        guard.suspect_within(TTL * 2),
        "{}: the failed renewal makes it suspect",
        F::NAME
    );
    let became = Instant::now();
    assert!(!guard.is_lost(), "{}: suspect, not lost", F::NAME);
    assert!(guard.is_suspect(), "{}", F::NAME);
    assert_suspect_in_time(F::NAME, "the lease", became, due);
    assert!(became < first_end, "{}: while still valid", F::NAME);
    proxy.set_blackhole(false);
    // The watchdog tries again a little later; its confirmation clears the suspicion
    // before the lease would have run out.
    while guard.is_suspect() && Instant::now() < first_end {
        thread::sleep(Duration::from_millis(5));
    }
    let cleared = Instant::now();
    assert!(
        !guard.is_suspect() && !guard.is_lost(),
        "{}: a confirmed renewal clears it (lost: {})",
        F::NAME,
        guard.is_lost()
    );
    assert!(cleared < first_end, "{}: cleared in time", F::NAME);
    assert!(guard.valid_until() > first_end, "{}: renewed", F::NAME);
    guard.release().unwrap();
}

/// Each of `guards` (whose validity ends were `ends` when their renewals began to fail)
/// turns suspect within the bound after its renewal was due, while still valid.
fn each_suspect_in_time<F: Face, G: Held>(guards: &[G], ends: &[Instant]) {
    let leases = guards.len();
    for (i, (guard, end)) in guards.iter().zip(ends).enumerate() {
        let due = sent_at(*end) + TTL / 3;
        assert!(
            guard.suspect_within(TTL * 2),
            "{}: lease {i} suspect",
            F::NAME
        );
        let became = Instant::now();
        assert_suspect_in_time(F::NAME, &format!("lease {i} of {leases}"), became, due);
        assert!(
            !guard.is_lost() && became < *end,
            "{}: lease {i} valid",
            F::NAME
        );
    }
}

/// Leases taken together are renewed together, in one round trip; when it fails, each
/// of them is suspect within the same bound as one lease alone (a batch of renewals
/// ends within one response timeout however many replies it waits for), and each is
/// cleared by the next confirmed batch.
fn every_lease_of_a_failed_batch_of_renewals_is_suspect_in_time<F: Face>() {
    const LEASES: usize = 16;
    let (_server, proxy, locks) = behind_proxy::<F>();
    let guards: Vec<_> = (0..LEASES)
        .map(|i| locks.lock(&format!("batch-{i}")).unwrap())
        .collect();
    let ends: Vec<Instant> = guards.iter().map(Held::valid_until).collect();
    proxy.set_blackhole(true);
    each_suspect_in_time::<F, _>(&guards, &ends);
    proxy.set_blackhole(false);
    for (i, guard) in guards.into_iter().enumerate() {
        while guard.is_suspect() && Instant::now() < ends[i] {
            thread::sleep(Duration::from_millis(5));
        }
        assert!(
            !guard.is_suspect() && !guard.is_lost(),
            "{}: lease {i} cleared before its validity end (lost: {})",
            F::NAME,
            guard.is_lost()
        );
        guard.release().unwrap();
    }
}

/// Leases renewed together on a server demoted to a replica (`REPLICAOF` another
/// server, as in a failover): every renewal is refused for now (`READONLY`, which proves
/// it did not run). The refused renewals are sent again together, within the batch's one
/// response timeout, so each lease is suspect within the same bound as one lease alone
/// (sent again one after another, each with a response timeout of its own, the first
/// was suspect 1.3 s after its renewal was due, the eighth seconds later).
fn every_lease_of_a_batch_the_server_refuses_for_now_is_suspect_in_time<F: Face>() {
    const LEASES: usize = 8;
    let server = RedisServer::start();
    let primary = RedisServer::start();
    let settings = lockscript_test::faces::Settings {
        ttl: TTL,
        ..F::settings()
    };
    let locks = F::connect(&server, settings);
    let guards: Vec<_> = (0..LEASES)
        .map(|i| locks.lock(&format!("demoted-{i}")).unwrap())
        .collect();
    let ends: Vec<Instant> = guards.iter().map(Held::valid_until).collect();
    redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port())
        .exec(&mut server.connection())
        .expect("REPLICAOF");
    each_suspect_in_time::<F, _>(&guards, &ends);
}

fn a_lease_whose_renewals_succeed_is_never_suspect<F: Face>() {
    let server = RedisServer::start();
    let locks = F::connect(
        &server,
        lockscript_test::faces::Settings {
            ttl: Duration::from_millis(300),
            ..F::settings()
        },
    );
    let guard = locks.lock("calm").unwrap();
    // Five renewals' worth; suspect_within returns false only after its whole timeout.
    assert!(
        !guard.suspect_within(Duration::from_millis(500)),
        "{}: never suspect",
        F::NAME
    );
    assert!(!guard.is_lost(), "{}", F::NAME);
    guard.release().unwrap();
}

/// Issue 37, defect 7. The server is paused (`CLIENT PAUSE`) for 3 s right after five
/// grants, across the first renewal of the lease kept; four guards are dropped 200 ms
/// before that renewal is due. Their background releases each wait for the response
/// timeout and are retried: they must not delay the renewal, which fails like them and
/// makes the lease suspect within the bound of any failed renewal: its due time plus
/// the response timeout plus the scheduling slack.
fn background_releases_never_delay_a_renewal<F: Face>() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(6);
    let locks = F::connect(
        &server,
        lockscript_test::faces::Settings {
            ttl,
            ..F::settings()
        },
    );
    let kept = locks.lock("kept").unwrap();
    let dropped: Vec<_> = (0..4)
        .map(|i| locks.lock(&format!("dropped-{i}")).unwrap())
        .collect();
    // The lease counts from the grant's send time for the ttl less 1% + 2 ms.
    let validity = Duration::from_millis(6_000 - 60 - 2);
    let sent = kept
        .valid_until()
        .checked_sub(validity)
        .expect("after boot");
    let due = sent + ttl / 3;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(3_000)
        .arg("ALL")
        .query(&mut server.connection())
        .unwrap();
    let paused = Instant::now();
    thread::sleep(due.saturating_duration_since(Instant::now() + Duration::from_millis(200)));
    drop(dropped);
    assert!(
        kept.suspect_within(ttl),
        "{}: the failed renewal makes it suspect",
        F::NAME
    );
    let became = Instant::now();
    assert_suspect_in_time(F::NAME, "the kept lease", became, due);
    assert!(!kept.is_lost(), "{}: suspect, not lost", F::NAME);
    // The pause ends at most 1 s after the renewal failed, 1.9 s before the lease would
    // run out: a renewal after it keeps the lease.
    thread::sleep(
        (paused + Duration::from_millis(3_500)).saturating_duration_since(Instant::now()),
    );
    assert!(!kept.is_lost(), "{}: kept across the pause", F::NAME);
    kept.release().unwrap();
}
