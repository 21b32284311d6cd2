//! What a script replies, under a real server: each declaration the reply check lets
//! through reads what the script sends, and the shapes the check refuses arrive as the
//! check says (a Lua float as a truncated integer, `false` as nil). The refusals
//! themselves are ui cases (`ui/reply-*.rs`).

use std::collections::HashMap;

use lockscript::lock_script;

#[lock_script("lockscript-test/ui/scripts/reply-get.lua")]
fn get(#[key] key: &str) -> Option<String>;

#[lock_script("lockscript-test/ui/scripts/reply-hgetall.lua")]
fn fields(#[key] hash: &str) -> HashMap<String, String>;

#[lock_script("lockscript-test/ui/scripts/reply-half-text.lua")]
fn half(n: f64) -> f64;

#[lock_script("lockscript-test/ui/scripts/reply-half.lua")]
fn half_truncated(n: f64) -> redis::Value;

#[lock_script("lockscript-test/ui/scripts/reply-computed.lua")]
fn run(#[key] key: &str, command: &str) -> i64;

#[lock_script("lockscript-test/ui/scripts/reply-json.lua")]
fn as_json(#[key] hash: &str) -> String;

#[lock_script("lockscript-test/ui/scripts/reply-false.lua")]
fn field(#[key] hash: &str, name: &str) -> Option<String>;

#[lock_script("lockscript-test/ui/scripts/reply-incr-or-missing.lua")]
fn bump(#[key] counter: &str) -> redis::Value;

#[lock_script("lockscript-test/ui/scripts/reply-msgpack.lua")]
fn packed(#[key] key: &str, text: &str, n: i64) -> Vec<u8>;

#[lock_script("lockscript-test/ui/scripts/reply-decoded.lua")]
fn decoded(encoded: &[u8], how: &str) -> i64;

#[lockscript_test::test]
fn honest_declarations_read_what_the_script_replies(mut conn: redis::Connection) {
    // nil | bulk string as Option<String>.
    assert_eq!(get("k").invoke(&mut conn).unwrap(), None);
    redis::cmd("SET").arg("k").arg("v").exec(&mut conn).unwrap();
    assert_eq!(get("k").invoke(&mut conn).unwrap(), Some("v".to_owned()));
    // An array of fields and values as a map.
    redis::cmd("HSET")
        .arg("h")
        .arg("a")
        .arg("1")
        .arg("b")
        .arg("2")
        .exec(&mut conn)
        .unwrap();
    let map = fields("h").invoke(&mut conn).unwrap();
    assert_eq!(map.len(), 2);
    assert_eq!(map["a"], "1");
    // A float returned as text keeps its fraction.
    assert!((half(5.0).invoke(&mut conn).unwrap() - 2.5).abs() < f64::EPSILON);
    // A command the caller names: not known to the check, read as declared.
    assert_eq!(run("n", "INCR").invoke(&mut conn).unwrap(), 1);
    // JSON text as a String.
    let json = as_json("h").invoke(&mut conn).unwrap();
    assert!(json.starts_with('[') && json.contains("\"a\""), "{json}");
    // `false` as None, a value as Some.
    assert_eq!(field("h", "zz").invoke(&mut conn).unwrap(), None);
    assert_eq!(
        field("h", "a").invoke(&mut conn).unwrap(),
        Some("1".to_owned())
    );
}

/// What the check refuses happens as it says: the Lua number 2.5 arrives as the integer
/// 2 (so `f64` is refused for it), and one path of a script replies an integer, the
/// other a text that is not a number (so an integer type is refused).
#[lockscript_test::test]
fn refused_shapes_arrive_as_the_check_says(mut conn: redis::Connection) {
    assert_eq!(
        half_truncated(5.0).invoke(&mut conn).unwrap(),
        redis::Value::Int(2)
    );
    match bump("missing").invoke(&mut conn).unwrap() {
        redis::Value::BulkString(text) => assert_eq!(text, b"missing"),
        other => panic!("expected the text `missing`, got {other:?}"),
    }
    redis::cmd("SET").arg("c").arg("1").exec(&mut conn).unwrap();
    assert_eq!(bump("c").invoke(&mut conn).unwrap(), redis::Value::Int(2));
}

/// `cmsgpack.pack` is a bulk string, which `Vec<u8>` reads byte for byte; what cmsgpack,
/// cjson and struct decode is not known to the check, which lets any declaration through,
/// and arrives as the caller packed it.
#[lockscript_test::test]
fn msgpack_bytes_arrive_exactly_and_decoded_values_as_declared(mut conn: redis::Connection) {
    // "a" (fixstr), 300 (uint 16), false (the missing key's nil).
    assert_eq!(
        packed("k", "a", 300).invoke(&mut conn).unwrap(),
        [0xa1, b'a', 0xcd, 0x01, 0x2c, 0xc2]
    );
    redis::cmd("SET").arg("k").arg("v").exec(&mut conn).unwrap();
    assert_eq!(
        packed("k", "a", -1).invoke(&mut conn).unwrap(),
        [0xa1, b'a', 0xff, 0xa1, b'v']
    );
    // 42 as a positive fixint, as JSON, as a big-endian 32-bit integer.
    assert_eq!(decoded(&[0x2a], "msgpack").invoke(&mut conn).unwrap(), 42);
    assert_eq!(decoded(b"42", "json").invoke(&mut conn).unwrap(), 42);
    assert_eq!(
        decoded(&[0, 0, 1, 0], "struct").invoke(&mut conn).unwrap(),
        256
    );
}
