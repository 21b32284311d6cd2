//! A script file that is not UTF-8 runs as Redis runs it: its bytes are sent as they are
//! (`EVALSHA` with the digest of those bytes, `SCRIPT LOAD` and `EVAL` with the bytes).

use lockscript::lock_script;
use lockscript_test::server::RedisServer;

/// Stores `caf\xe9` (Latin-1) under the key.
#[lock_script("lua/latin1.lua")]
fn store_latin1(#[key] key: &str) -> String;

#[test]
fn a_latin1_script_is_sent_byte_for_byte_and_runs() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let call = store_latin1("k");
    let script = call.script();
    assert!(script.bytes().ends_with(b"'caf\xe9')\n"));
    assert_eq!(
        script.sha1(),
        sha1_smol::Sha1::from(script.bytes()).digest().to_string()
    );
    assert_eq!(call.invoke(&mut conn).unwrap(), "OK");
    let stored: Vec<u8> = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
    assert_eq!(stored, b"caf\xe9");
    // The server cached it under the digest computed over the bytes.
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(script.sha1())
        .query(&mut conn)
        .unwrap();
    assert_eq!(exists, [true]);
}

/// `#[lockscript_test::test]` loads every script of its binary at set-up: this one as its
/// bytes, under their digest, so a script test in a binary that declares it starts with
/// it cached (before, the set-up loaded the replaced text and every such test panicked).
#[lockscript_test::test]
fn a_script_test_starts_with_the_latin1_script_loaded_as_its_bytes(
    redis: &lockscript_test::TestRedis,
    conn: &mut redis::Connection,
) {
    let call = store_latin1("k");
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(call.script().sha1())
        .query(conn)
        .unwrap();
    assert_eq!(exists, [true]);
    assert_eq!(call.invoke(conn).unwrap(), "OK");
    assert_eq!(redis.command_calls("evalsha"), 1);
    assert_eq!(redis.command_calls("eval"), 0);
    let stored: Vec<u8> = redis::cmd("GET").arg("k").query(conn).unwrap();
    assert_eq!(stored, b"caf\xe9");
}
