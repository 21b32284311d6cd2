//! A plain lock's renewals and releases take the server's own conditional commands
//! (`SET … IFEQ … PX`, `DELIFEQ` or `DELEX … IFEQ`) where the server has them, and the
//! scripts elsewhere, on both faces: told apart by the server's command counts. What the
//! server has is read here from its name and version, not asked the way the library
//! asks, so a wrong answer from the library's question fails these tests. The question
//! is asked beside a handle's first renewal or release, which goes as its script
//! meanwhile (no call waits for it): the tests count that call as a script. The lock's
//! promises on the native path are the promise tests themselves, which the server matrix
//! (`./run compat`) runs on Valkey 9.1.

use std::thread;
use std::time::{Duration, Instant};

use lockscript_test::faces::{Face, Held};
use lockscript_test::on_both_faces;
use lockscript_test::proxy::Proxy;
use lockscript_test::server::RedisServer;
use lockscript_test::{command_calls, reset_stats};

on_both_faces!(
    renewals_and_releases_use_the_servers_own_commands_where_it_has_them,
    with_native_commands_off_every_renewal_and_release_is_a_script,
    a_native_command_the_server_refuses_is_sent_again_as_the_script,
    a_native_release_on_a_silent_server_ends_within_the_response_timeout,
    a_release_whose_notification_is_refused_is_still_done_natively,
    a_server_replaced_by_one_without_the_native_commands_is_asked_again,
    a_native_command_the_replaced_server_lacks_is_refused_by_its_own_reply,
);

/// What this server has, from its version: (`SET … IFEQ`, `DELIFEQ`, `DELEX … IFEQ`).
/// Valkey 8.1 added `SET … IFEQ`, Valkey 9.0 `DELIFEQ`; Redis 8.4 both `SET … IFEQ` and
/// `DELEX`.
fn has(server: &RedisServer) -> (bool, bool, bool) {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut server.connection())
        .expect("INFO server");
    let version = |field: &str| {
        info.lines().find_map(|l| l.strip_prefix(field)).map(|v| {
            let mut parts = v.trim().split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
        })
    };
    if let Some(valkey) = version("valkey_version:") {
        return (valkey >= (8, 1), valkey >= (9, 0), valkey >= (9, 2));
    }
    let redis = version("redis_version:").expect("a version");
    (redis >= (8, 4), false, redis >= (8, 4))
}

/// The scripts the server ran (`EVALSHA` and `EVAL`, the library's scripts loaded
/// first so that none is refused with `NOSCRIPT`).
fn scripts_run(conn: &mut redis::Connection) -> u64 {
    command_calls(conn, "evalsha") + command_calls(conn, "eval")
}

/// A lock held across several renewals (ttl 300 ms, renewed every 100 ms) and released;
/// the number of renewals confirmed.
fn hold_and_release<F: Face>(locks: &F) {
    let guard = locks.lock("native").unwrap();
    thread::sleep(Duration::from_millis(450));
    assert!(!guard.is_lost(), "{}: renewals kept the lease", F::NAME);
    guard.release().unwrap();
}

/// A renewal (`extend`), which asks the server what it offers beside it if nobody has,
/// and the wait for the answer (a second at most): the calls after it are native where
/// the server has the commands.
fn ask_with_a_renewal<F: Face>(locks: &F, guard: &F::Guard) {
    guard.extend(Duration::from_millis(300)).unwrap();
    let start = Instant::now();
    while locks.offered_commands().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{}: the question beside the renewal was never answered",
            F::NAME
        );
        thread::sleep(Duration::from_millis(5));
    }
}

fn connect<F: Face>(server: &RedisServer, native: bool) -> F {
    F::connect(
        server,
        lockscript_test::faces::Settings {
            ttl: Duration::from_millis(300),
            native,
            ..F::settings()
        },
    )
}

fn prepared(server: &RedisServer) -> redis::Connection {
    let mut conn = server.connection();
    lockscript::load_scripts(&mut conn).expect("the scripts load");
    reset_stats(&mut conn);
    conn
}

fn renewals_and_releases_use_the_servers_own_commands_where_it_has_them<F: Face>() {
    let server = RedisServer::start();
    let (set_ifeq, delifeq, delex) = has(&server);
    let mut conn = prepared(&server);
    let locks: F = connect(&server, true);
    assert_eq!(locks.offered_commands(), None, "{}: not asked yet", F::NAME);
    hold_and_release(&locks);
    let offered = locks
        .offered_commands()
        .expect("asked by the first renewal");
    assert_eq!(
        (offered.set_ifeq, offered.delifeq, offered.delex_ifeq),
        (set_ifeq, delifeq, delex),
        "{}: what the server has",
        F::NAME
    );
    let native_releases = command_calls(&mut conn, "delifeq") + command_calls(&mut conn, "delex");
    let scripts = scripts_run(&mut conn);
    // The acquire is a transaction everywhere (its name's first grant raised to the
    // server's clock by raise-fence.lua when the transaction came more than a
    // millisecond late: one script more at most); the first renewal is a script, sent
    // while the question beside it was out, unless the answer came first (the question
    // goes in a task of its own, which may be answered before the renewal's round is
    // built). At ttl 300 ms over 450 ms, at least three renewals were due.
    match (set_ifeq, delifeq || delex) {
        (true, true) => {
            assert!(
                scripts <= 2,
                "{}: at most the first renewal and a raise ran as scripts: {scripts}",
                F::NAME
            );
            assert_eq!(native_releases, 1, "{}: one native release", F::NAME);
            assert_eq!(
                command_calls(&mut conn, "publish"),
                1,
                "{}: waiters notified",
                F::NAME
            );
        }
        (true, false) => {
            assert!(
                (1..=3).contains(&scripts),
                "{}: the release, at most the first renewal and a raise: {scripts}",
                F::NAME
            );
        }
        (false, _) => {
            assert!(
                scripts >= 4,
                "{}: renewals and the release by script: {scripts}",
                F::NAME
            );
            assert_eq!(native_releases, 0, "{}", F::NAME);
        }
    }
    let set_ifeq_calls = command_calls(&mut conn, "set");
    if set_ifeq {
        // The acquire transaction's two SETs and the renewals after the first (at least
        // two).
        assert!(
            set_ifeq_calls >= 3,
            "{}: renewals by SET IFEQ: {set_ifeq_calls}",
            F::NAME
        );
    }
}

fn with_native_commands_off_every_renewal_and_release_is_a_script<F: Face>() {
    let server = RedisServer::start();
    let mut conn = prepared(&server);
    let locks: F = connect(&server, false);
    hold_and_release(&locks);
    assert_eq!(locks.offered_commands(), None, "{}: never asked", F::NAME);
    let scripts = scripts_run(&mut conn);
    assert!(scripts >= 5, "{}: every call a script: {scripts}", F::NAME);
    assert_eq!(command_calls(&mut conn, "delifeq"), 0, "{}", F::NAME);
    assert_eq!(command_calls(&mut conn, "command|info"), 0, "{}", F::NAME);
}

/// A user whose ACL denies `DELIFEQ` on a server that has it: the release is refused as
/// a native command, sent again as compare-del.lua in the same call, and the handle
/// stays on scripts. On a server without `DELIFEQ` there is nothing to refuse: the test
/// says so and checks nothing.
fn a_native_command_the_server_refuses_is_sent_again_as_the_script<F: Face>() {
    let server = RedisServer::start();
    if !has(&server).1 {
        eprintln!("{}: this server has no DELIFEQ to refuse", F::NAME);
        return;
    }
    let mut admin = server.connection();
    redis::cmd("ACL")
        .arg(&[
            "SETUSER", "nodel", "on", ">pw", "~*", "&*", "+@all", "-delifeq",
        ])
        .exec(&mut admin)
        .expect("ACL SETUSER");
    let mut conn = prepared(&server);
    let url = format!("redis://nodel:pw@127.0.0.1:{}/", server.port());
    let client = redis::Client::open(url).unwrap();
    let locks: F = F::connect_client(
        &client,
        lockscript_test::faces::Settings {
            ttl: Duration::from_millis(300),
            ..F::settings()
        },
    );
    let guard = locks.lock("refused").unwrap();
    ask_with_a_renewal(&locks, &guard);
    guard
        .release()
        .expect("released by the script after DELIFEQ was refused");
    assert_eq!(
        redis::cmd("EXISTS")
            .arg("lock:{refused}")
            .query::<u32>(&mut conn)
            .unwrap(),
        0,
        "{}: the lock is gone",
        F::NAME
    );
    let offered = locks.offered_commands().expect("asked");
    assert!(
        !offered.releases() && !offered.renews(),
        "{}: on scripts now: {offered:?}",
        F::NAME
    );
    assert_eq!(
        command_calls(&mut conn, "delifeq"),
        1,
        "{}: refused once",
        F::NAME
    );
    // The next holder's renewals and release are scripts, without asking again.
    hold_and_release(&locks);
    assert_eq!(
        command_calls(&mut conn, "delifeq"),
        1,
        "{}: not tried again",
        F::NAME
    );
}

/// A native release is two commands in one round trip (`DELIFEQ`, then the
/// notification); on a server that stopped answering it still ends within the response
/// timeout plus the scheduling slack (a chaos soak on Valkey 9.1 saw the blocking face's
/// take 1,029 ms of a 500 ms bound: each reply of a pipeline waited the socket's timeout
/// afresh). On a server without native releases the test checks the script's release.
fn a_native_release_on_a_silent_server_ends_within_the_response_timeout<F: Face>() {
    const SLACK: Duration = Duration::from_millis(250);
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = redis::Client::open(proxy.url()).unwrap();
    let locks = F::connect_client(&client, F::settings());
    // The first renewal asks the server what it has; the release after it uses it.
    let guard = locks.lock("silent").unwrap();
    ask_with_a_renewal(&locks, &guard);
    guard.release().unwrap();
    assert_eq!(
        locks.offered_commands().is_some_and(|o| o.releases()),
        has(&server).1 || has(&server).2,
        "{}",
        F::NAME
    );
    let guard = locks.lock("silent").unwrap();
    proxy.set_blackhole(true);
    let started = Instant::now();
    let released = guard.release();
    let took = started.elapsed();
    proxy.set_blackhole(false);
    assert!(
        released.is_err(),
        "{}: no answer, no release: {released:?}",
        F::NAME
    );
    let bound = lockscript::DEFAULT_RESPONSE_TIMEOUT + SLACK;
    assert!(
        took <= bound,
        "{}: the release took {took:?} (bound {bound:?})",
        F::NAME
    );
}

/// A lock user without channel rights (`resetchannels`, what `ACL SETUSER` gives a new
/// user since Redis 7) on a server with native releases: `PUBLISH` is refused, `DELIFEQ`
/// beside it is not, and the release is `DELIFEQ`'s answer: done, once, and the handle
/// stays native (a refused notification is not a refused release: it is neither undone
/// nor sent again as compare-del.lua, which would find the key gone and report the lease
/// lost). On a server without native releases compare-del.lua publishes first, so the
/// release is refused as a whole and the lock stays held (all or nothing): checked too.
fn a_release_whose_notification_is_refused_is_still_done_natively<F: Face>() {
    let server = RedisServer::start();
    let (_, delifeq, delex) = has(&server);
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "quiet",
            "on",
            ">pw",
            "~*",
            "resetchannels",
            "+@all",
        ])
        .exec(&mut server.connection())
        .expect("ACL SETUSER");
    let mut conn = prepared(&server);
    let url = format!("redis://quiet:pw@127.0.0.1:{}/", server.port());
    let locks: F = F::connect_client(
        &redis::Client::open(url).unwrap(),
        lockscript_test::faces::Settings {
            ttl: Duration::from_millis(300),
            ..F::settings()
        },
    );
    let exists = |conn: &mut redis::Connection| -> u32 {
        redis::cmd("EXISTS")
            .arg("lock:{quiet}")
            .query(conn)
            .unwrap()
    };
    if !(delifeq || delex) {
        let guard = locks.lock("quiet").unwrap();
        let refused = guard.release();
        assert!(
            matches!(refused, Err(lockscript::LockError::Permission { .. })),
            "{}: compare-del.lua's PUBLISH is refused: {refused:?}",
            F::NAME
        );
        assert_eq!(exists(&mut conn), 1, "{}: all or nothing", F::NAME);
        return;
    }
    for round in 1..=2 {
        let guard = locks.lock("quiet").unwrap();
        if round == 1 {
            ask_with_a_renewal(&locks, &guard);
        }
        guard
            .release()
            .unwrap_or_else(|e| panic!("{}: release {round} is done: {e:?}", F::NAME));
        assert_eq!(exists(&mut conn), 0, "{}: release {round}", F::NAME);
        assert!(
            locks.offered_commands().is_some_and(|o| o.releases()),
            "{}: still native after release {round}: {:?}",
            F::NAME,
            locks.offered_commands()
        );
    }
    let native = command_calls(&mut conn, "delifeq") + command_calls(&mut conn, "delex");
    assert_eq!(native, 2, "{}: each release sent once", F::NAME);
    // compare-del.lua publishes first, so a release sent again as the script would show
    // as a third refused PUBLISH.
    assert_eq!(
        command_calls(&mut conn, "publish"),
        2,
        "{}: each release's notification refused once, no compare-del.lua",
        F::NAME
    );
    // The acquires are transactions (the name's first grant raised by raise-fence.lua
    // when its transaction came more than a millisecond late); the renewal that asked is
    // a script unless the answer came first (the question goes in a task of its own).
    let scripts = scripts_run(&mut conn);
    assert!(
        scripts <= 2,
        "{}: at most the renewal that asked and a raise: {scripts} scripts",
        F::NAME
    );
}

/// An older server for `newer`'s place, without the native releases `newer` has, and
/// what it offers (`SET … IFEQ`, `DELIFEQ`, `DELEX … IFEQ`): `redis-server` from `PATH`
/// when it has none of them (Redis 7.0 to 8.2), else `newer`'s own binary with its
/// release commands renamed away.
fn older_than(newer: &RedisServer) -> (RedisServer, (bool, bool, bool)) {
    let path = RedisServer::builder().binary("redis-server").start();
    let offers = has(&path);
    if !(offers.0 || offers.1 || offers.2) {
        return (path, offers);
    }
    let (set_ifeq, delifeq, delex) = has(newer);
    let mut older = RedisServer::builder().binary(newer.binary());
    // A server refuses to rename a command it does not have.
    for (command, has) in [("DELIFEQ", delifeq), ("DELEX", delex)] {
        if has {
            older = older.arg("--rename-command").arg(command).arg("");
        }
    }
    (older.start(), (set_ifeq, false, false))
}

/// One try_lock after the server behind the proxy changed (the first call to meet the
/// reset connection may fail with it), then a lease held across renewals, never
/// suspect, and released: the key is gone from `server`.
fn lock_cycle_after_the_change<F: Face>(locks: &F, server: &RedisServer, phase: &str) {
    let started = Instant::now();
    let guard = loop {
        match locks.try_lock("replaced") {
            Ok(Some(guard)) => break guard,
            other => {
                assert!(
                    started.elapsed() < Duration::from_secs(2),
                    "{}, {phase}: no lock within 2 s: {:?}",
                    F::NAME,
                    other.map(|g| g.is_some())
                );
                thread::sleep(Duration::from_millis(20));
            }
        }
    };
    // At ttl 300 ms, renewals every 100 ms: four or five due meanwhile.
    assert!(
        !guard.suspect_within(Duration::from_millis(450)),
        "{}, {phase}: every renewal confirmed (lost: {})",
        F::NAME,
        guard.is_lost()
    );
    guard
        .release()
        .unwrap_or_else(|e| panic!("{}, {phase}: released: {e:?}", F::NAME));
    let left: u32 = redis::cmd("EXISTS")
        .arg("lock:{replaced}")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(left, 0, "{}, {phase}: the release removed the key", F::NAME);
}

fn offers(found: Option<lockscript::NativeCommands>) -> Option<(bool, bool, bool)> {
    found.map(|o| (o.set_ifeq, o.delifeq, o.delex_ifeq))
}

/// A handle that asked a server with native commands, that server then replaced behind
/// the same address by one without them (a failover to an older replica, a rolling
/// downgrade), the first call after it an acquire: the handle asks the new server what
/// it offers before its next renewal, so its renewals and release are what that server
/// takes; replaced again by a newer one, it asks again and goes native again. On a
/// server without native commands the same cycle runs on scripts throughout.
fn a_server_replaced_by_one_without_the_native_commands_is_asked_again<F: Face>() {
    let newer = RedisServer::start();
    let (older, older_offers) = older_than(&newer);
    let newest = RedisServer::builder().binary(newer.binary()).start();
    let proxy = Proxy::start(newer.port());
    let locks: F = F::connect_client(
        &redis::Client::open(proxy.url()).unwrap(),
        lockscript_test::faces::Settings {
            ttl: Duration::from_millis(300),
            ..F::settings()
        },
    );
    lock_cycle_after_the_change(&locks, &newer, "the first server");
    assert_eq!(
        offers(locks.offered_commands()),
        Some(has(&newer)),
        "{}",
        F::NAME
    );

    proxy.replace_upstream(older.port());
    lock_cycle_after_the_change(&locks, &older, "replaced by an older server");
    assert_eq!(
        offers(locks.offered_commands()),
        Some(older_offers),
        "{}: asked the older server",
        F::NAME
    );

    let mut conn = prepared(&newest);
    proxy.replace_upstream(newest.port());
    lock_cycle_after_the_change(&locks, &newest, "replaced by a newer server");
    assert_eq!(
        offers(locks.offered_commands()),
        Some(has(&newest)),
        "{}: asked the newer server",
        F::NAME
    );
    // The release, and that of the grant an acquire that met the broken connection
    // may have made.
    let (_, delifeq, delex) = has(&newest);
    let native = command_calls(&mut conn, "delifeq") + command_calls(&mut conn, "delex");
    assert_eq!(native > 0, delifeq || delex, "{}: native again", F::NAME);
}

/// The same change behind a handle whose connection re-connects by itself before any
/// call meets the broken one (RESP3: the async face's managed connection re-connects on
/// the disconnection push): nothing tells the handle the server changed but the native
/// commands' own replies (`ERR unknown command`, `ERR syntax error`), each recognised as
/// a refusal by its own reply, and the call is sent again as the script at once.
fn a_native_command_the_replaced_server_lacks_is_refused_by_its_own_reply<F: Face>() {
    let newer = RedisServer::start();
    if has(&newer) == (false, false, false) {
        eprintln!("{}: this server has no native command to refuse", F::NAME);
        return;
    }
    let (older, older_offers) = older_than(&newer);
    let proxy = Proxy::start(newer.port());
    let url = format!("{}?protocol=resp3", proxy.url());
    let locks: F = F::connect_client(
        &redis::Client::open(url).unwrap(),
        lockscript_test::faces::Settings {
            ttl: Duration::from_millis(300),
            ..F::settings()
        },
    );
    lock_cycle_after_the_change(&locks, &newer, "the first server");
    proxy.replace_upstream(older.port());
    // The managed connection re-connects meanwhile.
    thread::sleep(Duration::from_millis(200));
    lock_cycle_after_the_change(&locks, &older, "replaced by an older server");
    let found = offers(locks.offered_commands());
    assert!(
        found == Some(older_offers) || found == Some((false, false, false)),
        "{}: no native command the older server lacks: {found:?}",
        F::NAME
    );
}
