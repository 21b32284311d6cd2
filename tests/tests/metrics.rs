//! The `metrics` feature against a real server, with metrics-util's debugging recorder
//! installed: each figure of `lockscript::metrics` is recorded where the lock engine says
//! it happened, on both faces, with the values the guards report of themselves (the wait
//! is the guard's own `waited()`, the time held of a lost lease its validity).
//!
//! One test binary, one recorder; every scenario uses lock names of its own and the
//! figures carry the name (`label_lock_names(true)`), so scenarios never read each
//! other's figures.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use lockscript::Locks;
use lockscript::metrics as m;
use lockscript_test::server::RedisServer;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// How late `lost()` may fire after the validity end (the guide's loss slack).
const LOSS_SLACK: Duration = Duration::from_millis(100);
/// The scheduling slack of this busy 2-core machine (as the chaos checker's).
const SLACK: Duration = Duration::from_millis(250);

/// What the recorder has seen, accumulated: a snapshot drains counters and histograms,
/// so their values are kept here across snapshots.
#[derive(Default)]
struct Seen {
    counters: HashMap<String, u64>,
    samples: HashMap<String, Vec<f64>>,
}

fn figures() -> &'static (Snapshotter, Mutex<Seen>) {
    static FIGURES: OnceLock<(Snapshotter, Mutex<Seen>)> = OnceLock::new();
    FIGURES.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this binary");
        m::label_lock_names(true);
        m::describe();
        (snapshotter, Mutex::new(Seen::default()))
    })
}

/// `metric{label,lock=name}` as the accumulator keys it.
fn id(metric: &str, lock: &str, label: Option<(&str, &str)>) -> String {
    let label = label.map_or(String::new(), |(k, v)| format!("{k}={v},"));
    format!("{metric}{{{label}lock={lock}}}")
}

fn refresh() -> std::sync::MutexGuard<'static, Seen> {
    let (snapshotter, seen) = figures();
    let mut seen = seen.lock().unwrap();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let mut lock = String::new();
        let mut other = None;
        for label in key.labels() {
            if label.key() == "lock" {
                label.value().clone_into(&mut lock);
            } else {
                other = Some((label.key().to_owned(), label.value().to_owned()));
            }
        }
        let id = id(
            key.name(),
            &lock,
            other.as_ref().map(|(k, v)| (k.as_str(), v.as_str())),
        );
        match value {
            // A snapshot hands over what was counted since the last one.
            DebugValue::Counter(n) => *seen.counters.entry(id).or_default() += n,
            DebugValue::Histogram(values) => seen
                .samples
                .entry(id)
                .or_default()
                .extend(values.into_iter().map(|v| v.0)),
            DebugValue::Gauge(_) => {}
        }
    }
    seen
}

fn counter(metric: &str, lock: &str, label: Option<(&str, &str)>) -> u64 {
    refresh()
        .counters
        .get(&id(metric, lock, label))
        .copied()
        .unwrap_or(0)
}

fn samples(metric: &str, lock: &str, label: Option<(&str, &str)>) -> Vec<f64> {
    refresh()
        .samples
        .get(&id(metric, lock, label))
        .cloned()
        .unwrap_or_default()
}

/// Waits (up to 10 s) until `metric` counts `n` for `lock`: background work records
/// after the call that caused it returned.
async fn until_counted(metric: &str, lock: &str, label: Option<(&str, &str)>, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while counter(metric, lock, label) < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} never reached {n}",
            id(metric, lock, label)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn locks(server: &RedisServer) -> Locks {
    figures();
    Locks::connect(&server.client()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_and_its_release_record_the_wait_attempts_and_time_held() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    let attempt = Some(("how", "attempt"));
    let guard = locks.lock("m-cycle").await.unwrap();
    assert_eq!(
        samples(m::ACQUIRE_WAIT_SECONDS, "m-cycle", attempt),
        vec![guard.waited().as_secs_f64()],
        "the recorded wait is the guard's own"
    );
    assert_eq!(samples(m::ACQUIRE_ATTEMPTS, "m-cycle", attempt), vec![1.0]);
    assert_eq!(counter(m::ACQUIRED_TOTAL, "m-cycle", attempt), 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    guard.release().await.unwrap();
    let held = samples(m::HELD_SECONDS, "m-cycle", Some(("end", "released")));
    assert_eq!(held.len(), 1);
    assert!(
        held[0] >= 0.050 && held[0] < 0.050 + SLACK.as_secs_f64(),
        "held {held:?}"
    );
    assert_eq!(
        counter(m::LOST_TOTAL, "m-cycle", Some(("reason", "expired"))),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_runs_out_is_counted_lost_with_its_validity_as_time_held() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(300);
    let locks = locks(&server).await.ttl(ttl).watchdog(false);
    let guard = locks.lock("m-lost").await.unwrap();
    // What is left of the validity when the call returns: the lease was held at least that.
    let left = guard.valid_until() - std::time::Instant::now();
    guard.lost().await;
    assert_eq!(
        counter(m::LOST_TOTAL, "m-lost", Some(("reason", "expired"))),
        1
    );
    let held = samples(m::HELD_SECONDS, "m-lost", Some(("end", "lost")));
    assert_eq!(held.len(), 1);
    let bound = ttl + LOSS_SLACK + SLACK;
    assert!(
        held[0] >= left.as_secs_f64() && held[0] <= bound.as_secs_f64(),
        "held {held:?}, validity left at the grant {left:?}, bound {bound:?}"
    );
    assert!(matches!(
        guard.release().await,
        Err(lockscript::LockError::NotHeld { .. })
    ));
    assert_eq!(
        samples(m::HELD_SECONDS, "m-lost", Some(("end", "released"))),
        Vec::<f64>::new(),
        "a release after the loss is not a second end"
    );
}

/// A server behind the fault proxy, and a client of the proxy: the scenarios whose
/// renewal the server never answers.
fn behind_proxy() -> (RedisServer, lockscript_test::proxy::Proxy, redis::Client) {
    figures();
    let server = RedisServer::start();
    let proxy = lockscript_test::proxy::Proxy::start(server.port());
    let client = redis::Client::open(proxy.url()).unwrap();
    (server, proxy, client)
}

/// The one end recorded for `lock` is a loss, held at most `ttl`: until its validity
/// end, however late the loss was seen.
fn assert_held_until_the_validity_end(lock: &str, ttl: Duration) {
    let held = samples(m::HELD_SECONDS, lock, Some(("end", "lost")));
    assert!(
        held.len() == 1 && held[0] <= ttl.as_secs_f64(),
        "{lock}: held {held:?}, more than the ttl {ttl:?}: counted until the loss was seen, \
         not until the validity end"
    );
}

/// A renewal the server never answers, with a response timeout longer than the lease:
/// the loss is counted at the validity end, by the watchdog, while that renewal is still
/// in flight and nobody asks the guard, not when the round trip gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_renewal_hangs_is_counted_lost_at_its_validity_end() {
    let (_server, proxy, client) = behind_proxy();
    let ttl = Duration::from_millis(300);
    let locks = Locks::connect(&client)
        .await
        .unwrap()
        .ttl(ttl)
        .response_timeout(Duration::from_secs(3));
    let guard = locks.lock("m-hang").await.unwrap();
    // The first renewal goes out at a third of the ttl, into the silence.
    proxy.set_blackhole(true);
    let end = guard.valid_until();
    let lost = Some(("reason", "expired"));
    let bound = end + LOSS_SLACK + SLACK;
    while counter(m::LOST_TOTAL, "m-hang", lost) == 0 {
        assert!(
            std::time::Instant::now() < bound,
            "not counted lost {:?} after its validity end (bound {:?}); the renewal's \
             round trip gives up only 3 s after it went out",
            end.elapsed(),
            LOSS_SLACK + SLACK
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let counted = std::time::Instant::now();
    assert!(counted >= end, "counted before the validity end");
    assert!(guard.is_lost());
    assert_held_until_the_validity_end("m-hang", ttl);
}

/// The blocking face's watchdog sees the loss only when the hung round trip gives up
/// (its thread waits for it), but the lease counts as held until its validity end,
/// not until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_lease_whose_renewal_hangs_counts_as_held_until_its_validity_end() {
    let (_server, proxy, client) = behind_proxy();
    let ttl = Duration::from_millis(300);
    // The proxy comes back from the thread: it stays silent until the figures are read.
    let proxy = tokio::task::spawn_blocking(move || {
        let locks = lockscript::blocking::Locks::connect(&client)
            .unwrap()
            .ttl(ttl)
            .response_timeout(Duration::from_secs(2));
        let guard = locks.lock("m-hang-blocking").unwrap();
        proxy.set_blackhole(true);
        let lost = Some(("reason", "expired"));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while counter(m::LOST_TOTAL, "m-hang-blocking", lost) == 0 {
            assert!(std::time::Instant::now() < deadline, "never counted lost");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(guard);
        proxy
    })
    .await
    .unwrap();
    assert_held_until_the_validity_end("m-hang-blocking", ttl);
    drop(proxy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_records_each_renewal() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(300);
    let locks = locks(&server).await.ttl(ttl).watchdog(true);
    let guard = locks.lock("m-renew").await.unwrap();
    // Renewals every ttl/3: at least two within 2 ttl.
    tokio::time::sleep(ttl * 2).await;
    let renewals = samples(m::RENEWAL_SECONDS, "m-renew", None);
    assert!(renewals.len() >= 2, "{renewals:?}");
    assert!(
        renewals
            .iter()
            .all(|s| *s > 0.0 && *s < SLACK.as_secs_f64() + 0.5)
    );
    assert_eq!(
        counter(
            m::RENEWAL_FAILURES_TOTAL,
            "m-renew",
            Some(("reason", "error"))
        ),
        0
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_and_a_timeout_are_counted_as_such() {
    let server = RedisServer::start();
    let locks = locks(&server).await.wait_timeout(Duration::from_secs(10));
    let first = locks.lock("m-hand").await.unwrap();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("m-hand").await.unwrap() })
    };
    // The waiter has refused once (its handover offer stands) when its attempt is counted.
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(counter(m::HANDOVERS_TOTAL, "m-hand", None), 1);
    assert_eq!(
        samples(m::HELD_SECONDS, "m-hand", Some(("end", "released"))).len(),
        1,
        "a release by handover is a release: its time held is counted"
    );
    assert_eq!(
        counter(m::ACQUIRED_TOTAL, "m-hand", Some(("how", "handover"))),
        1
    );
    assert_eq!(
        samples(m::ACQUIRE_WAIT_SECONDS, "m-hand", Some(("how", "handover"))),
        vec![second.waited().as_secs_f64()]
    );

    let impatient = locks.clone().wait_timeout(Duration::from_millis(100));
    assert!(impatient.lock("m-hand").await.is_err());
    assert_eq!(
        counter(
            m::ACQUIRE_FAILURES_TOTAL,
            "m-hand",
            Some(("reason", "timeout"))
        ),
        1
    );
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_is_released_in_the_background_and_counted_on_both_faces() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    drop(locks.lock("m-drop").await.unwrap());
    until_counted(
        m::BACKGROUND_RELEASES_TOTAL,
        "m-drop",
        Some(("result", "released")),
        1,
    )
    .await;

    // The blocking face records the same figures at the same points.
    let client = server.client();
    // The handle lives on (its background thread does the release) until the end.
    let (blocking, _handle) = tokio::task::spawn_blocking(move || {
        let locks = lockscript::blocking::Locks::connect(&client).unwrap();
        let guard = locks.lock("m-blocking").unwrap();
        let waited = guard.waited();
        guard.release().unwrap();
        drop(locks.lock("m-blocking-drop").unwrap());
        (waited, locks)
    })
    .await
    .unwrap();
    assert_eq!(
        samples(
            m::ACQUIRE_WAIT_SECONDS,
            "m-blocking",
            Some(("how", "attempt"))
        ),
        vec![blocking.as_secs_f64()]
    );
    assert_eq!(
        samples(m::HELD_SECONDS, "m-blocking", Some(("end", "released"))).len(),
        1
    );
    until_counted(
        m::BACKGROUND_RELEASES_TOTAL,
        "m-blocking-drop",
        Some(("result", "released")),
        1,
    )
    .await;
}

/// Issue 37, defect 5, on a pool: the watchdog's renewal is held up 350 ms on its
/// connection (less than the response timeout: its answer is read); meanwhile the guard
/// is released on the pool's other connection, and the release answers `Ok`. The
/// renewal then reaches the server, finds the key gone and is refused. A lease whose
/// release returned `Ok` was never lost: its loss signal does not fire, and it is
/// counted once, as released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_released_while_its_renewal_is_held_up_is_counted_once_and_never_lost() {
    let (server, proxy, client) = behind_proxy();
    lockscript_test::load_scripts(&mut server.connection());
    let ttl = Duration::from_secs(3);
    // Scripts only: the renewal is renew.lua, which the proxy holds up by its digest.
    let locks = Locks::new(lockscript_test::pool::Pooled::open(&client, 2).await)
        .ttl(ttl)
        .native_commands(false);
    let renew = lockscript::builtin::renew("k", "t", 1).script().sha1();
    proxy.delay_request_to(renew.as_bytes(), Duration::from_millis(350));
    let name = "m-late-renewal";
    let guard = locks.lock(name).await.unwrap();
    let lease = guard.lease();
    // The renewal goes out a third of the way through the lease (up to 30 ms early, to
    // join others) and lands 350 ms later; the release goes out 120 ms after it was due.
    // The lease counts from the grant's send time for the ttl less 1% + 2 ms.
    let validity = Duration::from_millis(3_000 - 30 - 2);
    let sent = guard
        .valid_until()
        .checked_sub(validity)
        .expect("after boot");
    let due = sent + ttl / 3;
    tokio::time::sleep_until((due + Duration::from_millis(120)).into()).await;
    guard.release().await.unwrap();
    // The refused renewal's answer comes back within the response timeout.
    assert!(
        tokio::time::timeout(Duration::from_secs(1), lease.lost())
            .await
            .is_err(),
        "a lease released with Ok(()) was reported lost"
    );
    assert!(!lease.is_lost());
    assert_eq!(
        samples(m::HELD_SECONDS, name, Some(("end", "released"))).len(),
        1,
        "counted once, as released"
    );
    assert_eq!(
        samples(m::HELD_SECONDS, name, Some(("end", "lost"))),
        Vec::<f64>::new(),
        "and not as lost"
    );
    for reason in ["refused", "expired"] {
        assert_eq!(counter(m::LOST_TOTAL, name, Some(("reason", reason))), 0);
    }
}

/// Issue 37, defect 8. A downgrade ends the write lease (its time held is recorded, as
/// `end=downgraded`) and does not make a new acquisition of the read lease that
/// continues it: one grant, one wait, on both faces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_ends_the_write_lease_and_is_not_a_new_acquisition() {
    let server = RedisServer::start();
    let rw = locks(&server).await.rw();
    let held = Duration::from_millis(50);
    let attempt = Some(("how", "attempt"));
    let check = |name: &str, waited: Duration| {
        assert_eq!(
            counter(m::ACQUIRED_TOTAL, name, attempt),
            1,
            "{name}: one grant"
        );
        assert_eq!(
            samples(m::ACQUIRE_WAIT_SECONDS, name, attempt),
            vec![waited.as_secs_f64()],
            "{name}: one wait, the write grant's"
        );
        let downgraded = samples(m::HELD_SECONDS, name, Some(("end", "downgraded")));
        assert!(
            downgraded.len() == 1
                && downgraded[0] >= held.as_secs_f64()
                && downgraded[0] < (held + SLACK).as_secs_f64(),
            "{name}: the write lease's time held, {downgraded:?}"
        );
        assert_eq!(
            samples(m::HELD_SECONDS, name, Some(("end", "released"))).len(),
            1,
            "{name}: then the read lease's"
        );
        assert_eq!(
            samples(m::HELD_SECONDS, name, Some(("end", "lost"))),
            Vec::<f64>::new()
        );
    };

    let writer = rw.write("m-down").await.unwrap();
    let waited = writer.waited();
    tokio::time::sleep(held).await;
    let reader = writer.downgrade().await.unwrap();
    reader.release().await.unwrap();
    check("m-down", waited);

    let client = server.client();
    let (waited, _handle) = tokio::task::spawn_blocking(move || {
        let rw = lockscript::blocking::Locks::connect(&client).unwrap().rw();
        let writer = rw.write("m-down-blocking").unwrap();
        let waited = writer.waited();
        std::thread::sleep(held);
        let reader = writer.downgrade().unwrap();
        reader.release().unwrap();
        (waited, rw)
    })
    .await
    .unwrap();
    check("m-down-blocking", waited);
}
