//! EVALSHA first; on NOSCRIPT, and only then, SCRIPT LOAD and EVALSHA again, with EVAL
//! as the last resort when the load is refused. Counted through the server's own
//! `INFO commandstats`.

use lockscript::LockError;
use lockscript::builtin::renew;
use lockscript_test::command_calls;
use lockscript_test::fixtures::{del_all, fail, peek, put};
use lockscript_test::server::RedisServer;
use redis::Commands;

fn cached(conn: &mut redis::Connection, sha1: &str) -> bool {
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(sha1)
        .query(conn)
        .unwrap();
    exists[0]
}

/// (EVALSHA, SCRIPT LOAD, EVAL) calls the server counted, `_RO` forms when `ro`.
fn calls(stats: &mut redis::Connection, ro: bool) -> (u64, u64, u64) {
    let (evalsha, eval) = if ro {
        ("evalsha_ro", "eval_ro")
    } else {
        ("evalsha", "eval")
    };
    (
        command_calls(stats, evalsha),
        command_calls(stats, "script|load"),
        command_calls(stats, eval),
    )
}

#[test]
fn sync_cold_cache_loads_the_script_once_then_uses_evalsha() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let mut stats = server.connection();
    lockscript_test::flush_scripts_and_reset_stats(&mut stats);

    assert_eq!(renew("lock:{a}", "t", 1_000).invoke(&mut conn).unwrap(), 0);
    assert_eq!(
        calls(&mut stats, false),
        (2, 1, 0),
        "cold: EVALSHA (NOSCRIPT), SCRIPT LOAD, EVALSHA; no EVAL"
    );
    assert!(cached(&mut stats, renew("k", "t", 1).script().sha1()));

    assert_eq!(renew("lock:{a}", "t", 1_000).invoke(&mut conn).unwrap(), 0);
    assert_eq!(calls(&mut stats, false), (3, 1, 0), "warm: EVALSHA only");
}

#[tokio::test]
async fn async_cold_cache_loads_the_script_once_then_uses_evalsha() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let mut stats = server.connection();
    lockscript_test::flush_scripts_and_reset_stats(&mut stats);

    for _ in 0..2 {
        let renewed = renew("lock:{a}", "t", 1_000)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(renewed, 0);
    }
    assert_eq!(
        calls(&mut stats, false),
        (3, 1, 0),
        "cold: EVALSHA, then SCRIPT LOAD + EVALSHA in one pipeline; warm: EVALSHA"
    );
}

/// A user who may not `SCRIPT LOAD` still runs scripts: EVAL is the last resort, and the
/// script runs once.
#[tokio::test]
async fn a_refused_script_load_falls_back_to_eval() {
    let server = RedisServer::start();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "noload",
            "on",
            ">pw",
            "~*",
            "+@all",
            "-script|load",
        ])
        .query(&mut server.connection())
        .unwrap();
    let client =
        redis::Client::open(format!("redis://noload:pw@127.0.0.1:{}/", server.port())).unwrap();
    let mut stats = server.connection();
    lockscript_test::flush_scripts_and_reset_stats(&mut stats);

    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let bumped = lockscript_test::fixtures::bump("n", 2)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(bumped, 2, "ran once");
    let mut sync = client.get_connection().unwrap();
    assert_eq!(put("k", "v").invoke(&mut sync).unwrap(), "OK");
    let (_, loads, evals) = calls(&mut stats, false);
    assert_eq!(
        (loads, evals),
        (2, 2),
        "each load tried and refused by the ACL, each script EVALed"
    );
}

#[test]
fn read_only_script_goes_as_evalsha_ro_after_a_load() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let mut stats = server.connection();
    let _: () = conn.set("k", "v").unwrap();
    lockscript_test::flush_scripts_and_reset_stats(&mut stats);

    assert!(peek("k").script().read_only());
    assert_eq!(peek("k").invoke(&mut conn).unwrap().as_deref(), Some("v"));
    assert_eq!(peek("k").invoke(&mut conn).unwrap().as_deref(), Some("v"));
    assert_eq!(calls(&mut stats, true), (3, 1, 0));
    assert_eq!(command_calls(&mut stats, "evalsha"), 0);
    assert_eq!(command_calls(&mut stats, "eval"), 0);
}

#[tokio::test]
async fn read_only_script_goes_as_evalsha_ro_async() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let mut stats = server.connection();
    lockscript_test::flush_scripts_and_reset_stats(&mut stats);

    assert_eq!(peek("missing").invoke_async(&mut conn).await.unwrap(), None);
    assert_eq!(calls(&mut stats, true), (2, 1, 0));
}

#[test]
fn script_error_is_returned_with_script_name_and_never_resent() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let mut stats = server.connection();
    lockscript_test::load_scripts(&mut conn);
    lockscript_test::reset_stats(&mut stats);

    let err = fail("k", "reply").invoke(&mut conn).unwrap_err();
    match &err {
        LockError::Script {
            script,
            message,
            at,
            ..
        } => {
            assert_eq!(*script, "fail");
            assert_eq!(message, "boom: refused on purpose");
            // `redis.error_reply` names no line.
            assert_eq!(*at, None);
        }
        other => panic!("expected a script error, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "script `fail` failed on the server: boom: refused on purpose"
    );
    assert_eq!(command_calls(&mut stats, "evalsha"), 1);
    assert_eq!(
        command_calls(&mut stats, "eval"),
        0,
        "only NOSCRIPT triggers EVAL"
    );
}

#[tokio::test]
async fn failing_redis_call_keeps_the_servers_message() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let mut plain = server.connection();
    let _: () = plain.set("k", "not a number").unwrap();

    let err = fail("k", "incr").invoke_async(&mut conn).await.unwrap_err();
    let LockError::Script {
        script,
        message,
        at,
        ..
    } = &err
    else {
        panic!("expected a script error, got {err:?}");
    };
    assert_eq!(*script, "fail");
    assert!(message.contains("not an integer"), "{message}");
    // The server's `@user_script:10` as the file and line.
    assert_eq!(at.as_deref(), Some("lua/fail.lua:10"));
    assert!(
        err.to_string()
            .starts_with("script `fail` failed on the server at lua/fail.lua:10: "),
        "{err}"
    );
    assert!(
        message.contains("script: "),
        "the server names the script's digest: {message}"
    );
}

#[test]
fn wrong_reply_type_names_script_and_type() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    // put.lua returns 'OK'; declared as String it converts, as a number it must not.
    let call = put("k", "v");
    assert_eq!(call.invoke(&mut conn).unwrap(), "OK");
    let err = lockscript::builtin::acquire("k2", "k2f", "k2h", "t", 0, 1)
        .invoke(&mut conn)
        .unwrap_err();
    // PX 0 is refused by SET inside the script: a script error, not a reply error.
    assert!(
        matches!(
            err,
            LockError::Script {
                script: "acquire-with-retry",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn argument_that_expands_to_two_slots_is_refused_before_sending() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let mut stats = server.connection();
    lockscript_test::reset_stats(&mut stats);

    let err = put("k", ("a", "b")).invoke(&mut conn).unwrap_err();
    assert!(
        matches!(
            err,
            LockError::Argument {
                script: "put",
                parameter: "value",
                count: 2
            }
        ),
        "{err:?}"
    );
    assert_eq!(command_calls(&mut stats, "evalsha"), 0, "nothing was sent");
    let exists: bool = conn.exists("k").unwrap();
    assert!(!exists);
}

#[test]
fn variadic_keys_are_all_passed() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    for k in ["a", "b", "c"] {
        let _: () = conn.set(k, 1).unwrap();
    }
    assert_eq!(
        del_all(&["a", "b", "c", "missing"])
            .invoke(&mut conn)
            .unwrap(),
        3
    );
    assert_eq!(del_all(&[]).invoke(&mut conn).unwrap(), 0);
    let left: Vec<String> = conn.keys("*").unwrap();
    assert!(left.is_empty(), "{left:?}");
}
