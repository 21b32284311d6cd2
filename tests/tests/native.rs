//! A plain lock's renewals and releases take the server's own conditional commands
//! (`SET … IFEQ … PX`, `DELIFEQ` or `DELEX … IFEQ`) where the server has them, and the
//! scripts elsewhere, on both faces: told apart by the server's command counts. What the
//! server has is read here from its name and version, not asked the way the library
//! asks, so a wrong answer from the library's question fails these tests. The lock's
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
    // The acquire is a script everywhere; at ttl 300 ms over 450 ms, at least three
    // renewals were due.
    match (set_ifeq, delifeq || delex) {
        (true, true) => {
            assert_eq!(scripts, 1, "{}: only the acquire ran as a script", F::NAME);
            assert_eq!(native_releases, 1, "{}: one native release", F::NAME);
            assert_eq!(
                command_calls(&mut conn, "publish"),
                1,
                "{}: waiters notified",
                F::NAME
            );
        }
        (true, false) => {
            assert_eq!(scripts, 2, "{}: the acquire and the release", F::NAME);
        }
        (false, _) => {
            assert!(
                scripts >= 5,
                "{}: renewals and the release by script: {scripts}",
                F::NAME
            );
            assert_eq!(native_releases, 0, "{}", F::NAME);
        }
    }
    let set_ifeq_calls = command_calls(&mut conn, "set");
    if set_ifeq {
        // The acquire's own SETs (the lock, maybe the fence counter) and the renewals.
        assert!(
            set_ifeq_calls >= 4,
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
    // The first release asks the server what it has; the next one uses it.
    locks.lock("silent").unwrap().release().unwrap();
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
