//! What a script replies, under a real server: each declaration the reply check lets
//! through reads what the script sends, and the shapes the check refuses arrive as the
//! check says (a Lua float as a truncated integer, `false` as nil). The refusals
//! themselves are ui cases (`ui/reply-*.rs`). Under `redis.setresp(3)` each rule the
//! check follows is read back here from the server (run on Redis 7.0 and Valkey 9.1).

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

#[lock_script("lockscript-test/ui/scripts/reply-zrange.lua")]
fn ranked_flat(#[key] set: &str) -> Vec<(String, f64)>;

#[lock_script("lockscript-test/ui/scripts/reply-resp3-zrange.lua")]
fn ranked(#[key] set: &str) -> Vec<(String, f64)>;

#[lock_script("lockscript-test/ui/scripts/reply-resp3-zrange.lua")]
fn ranked_raw(#[key] set: &str) -> redis::Value;

#[lock_script("lockscript-test/ui/scripts/reply-resp3-exists.lua")]
fn exists(#[key] key: &str) -> i64;

#[lock_script("lua/reply-resp3-hgetall.lua")]
fn fields3(#[key] hash: &str) -> HashMap<String, String>;

#[lock_script("lua/reply-resp3-mget.lua")]
fn both(#[key] first: &str, #[key] second: &str) -> Vec<String>;

#[lock_script("lua/reply-resp3-zscore.lua")]
fn score(#[key] set: &str, member: &str) -> Option<f64>;

#[lock_script("lua/reply-resp3-forms.lua")]
fn forms(n: f64) -> redis::Value;

#[lock_script("lua/reply-resp3-map.lua")]
fn built(which: &str) -> Vec<String>;

#[lock_script("lockscript-test/ui/scripts/reply-set-ifeq.lua")]
fn replace(#[key] key: &str, old: &str, new: &str) -> Option<String>;

#[lock_script("lua/reply-call-as.lua")]
fn call_as(protocol: &str, command: &[&str]) -> redis::Value;

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

/// ZRANGE's members and scores, read as pairs both ways redis-rs reads them: flat under
/// RESP2, nested under `redis.setresp(3)` (where each pair is an array, the score text).
#[lockscript_test::test]
fn member_and_score_pairs_read_flat_and_nested(mut conn: redis::Connection) {
    redis::cmd("ZADD")
        .arg("z")
        .arg(1.5)
        .arg("a")
        .arg(3)
        .arg("b")
        .exec(&mut conn)
        .unwrap();
    let expected = vec![("a".to_owned(), 1.5), ("b".to_owned(), 3.0)];
    assert_eq!(ranked_flat("z").invoke(&mut conn).unwrap(), expected);
    assert_eq!(ranked("z").invoke(&mut conn).unwrap(), expected);
    let text = |s: &str| redis::Value::BulkString(s.as_bytes().to_vec());
    assert_eq!(
        ranked_raw("z").invoke(&mut conn).unwrap(),
        redis::Value::Array(vec![
            redis::Value::Array(vec![text("a"), text("1.5")]),
            redis::Value::Array(vec![text("b"), text("3")]),
        ])
    );
}

/// The rules the check follows under `redis.setresp(3)`, as the server applies them for
/// a RESP2 caller: false replies 0 (true 1); a map replies as its pairs, flat; a null
/// ends an array; a double replies as text.
#[lockscript_test::test]
fn under_resp3_replies_arrive_as_the_check_says(mut conn: redis::Connection) {
    assert_eq!(exists("k").invoke(&mut conn).unwrap(), 0);
    redis::cmd("SET").arg("k").arg("v").exec(&mut conn).unwrap();
    assert_eq!(exists("k").invoke(&mut conn).unwrap(), 1);
    redis::cmd("HSET")
        .arg("h")
        .arg("a")
        .arg("1")
        .exec(&mut conn)
        .unwrap();
    let map = fields3("h").invoke(&mut conn).unwrap();
    assert_eq!(map, HashMap::from([("a".to_owned(), "1".to_owned())]));
    // The missing key's null ends the table: only what comes before it.
    assert_eq!(both("k", "none").invoke(&mut conn).unwrap(), ["v"]);
    assert!(both("none", "k").invoke(&mut conn).unwrap().is_empty());
    redis::cmd("ZADD")
        .arg("z")
        .arg(2.5)
        .arg("m")
        .exec(&mut conn)
        .unwrap();
    assert_eq!(score("z", "m").invoke(&mut conn).unwrap(), Some(2.5));
    assert_eq!(score("z", "none").invoke(&mut conn).unwrap(), None);
}

/// RESP3's forms a script builds reply to a RESP2 caller as text (a double, a big number,
/// a verbatim string) and as arrays (a map's pairs, flat; a set's members), whether or
/// not the script switched. Redis 6.2 reads no big number or verbatim string: the table
/// arrives as an empty array, which the check counts in.
#[lockscript_test::test]
fn resp3_forms_a_script_builds_arrive_as_text_and_arrays(mut conn: redis::Connection) {
    let text = |s: &str| redis::Value::BulkString(s.as_bytes().to_vec());
    let newer = version(&mut conn).0 >= 7;
    let (big, verbatim) = if newer {
        (text("12345678901234567890"), text("hi"))
    } else {
        (redis::Value::Array(vec![]), redis::Value::Array(vec![]))
    };
    assert_eq!(
        forms(5.0).invoke(&mut conn).unwrap(),
        redis::Value::Array(vec![text("2.5"), big, verbatim])
    );
    let mut map = built("map").invoke(&mut conn).unwrap();
    map.sort();
    assert_eq!(map, ["1", "2", "a", "b"]);
    let mut set = built("set").invoke(&mut conn).unwrap();
    set.sort();
    assert_eq!(set, ["x", "y"]);
}

/// `SET ... IFEQ` (Valkey 8.1+, Redis 8.4+) replies OK, or nil when the value differs:
/// the `Option` the check asks for. A server without it refuses the option.
#[lockscript_test::test]
fn set_ifeq_replies_nil_when_the_value_differs(mut conn: redis::Connection) {
    if !has_set_ifeq(&mut conn) {
        eprintln!("this server has no SET ... IFEQ");
        return;
    }
    redis::cmd("SET").arg("k").arg("a").exec(&mut conn).unwrap();
    assert_eq!(replace("k", "other", "b").invoke(&mut conn).unwrap(), None);
    assert_eq!(
        replace("k", "a", "b").invoke(&mut conn).unwrap(),
        Some("OK".to_owned())
    );
}

/// The commands of Redis 8.2 that no source's schema describes have rows written from
/// the documentation (`DOCUMENTED` in tests/gen-replies.py): each form each row claims
/// (nil and an array, with and without options) is produced here in a script, under
/// RESP2 and `redis.setresp(3)`, and its reply must be among the shapes the lint gives
/// that call written with these literals. Skipped on a server without them (all but
/// Redis 8.2 of the matrix).
#[lockscript_test::test]
fn redis_8_2_commands_reply_as_their_rows_say(mut conn: redis::Connection) {
    use lockscript_audit::commands::reply_to;
    use lockscript_audit::reply::Protocol;
    if !has_redis_8_2_commands(&mut conn) {
        eprintln!("this server has no XACKDEL or VADD");
        return;
    }
    let setup: &[&[&str]] = &[
        &["XADD", "s", "1-0", "f", "v"],
        &["XADD", "s", "2-0", "f", "v"],
        &["XADD", "s", "3-0", "f", "v"],
        &["XGROUP", "CREATE", "s", "g", "0"],
        &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"],
        &["VADD", "v", "VALUES", "3", "1", "0", "0", "a"],
        &[
            "VADD",
            "v",
            "VALUES",
            "3",
            "0",
            "1",
            "0",
            "b",
            "SETATTR",
            "{\"y\":1}",
        ],
    ];
    for command in setup {
        redis::cmd(command[0])
            .arg(&command[1..])
            .exec(&mut conn)
            .unwrap();
    }
    for (call, resp2, resp3) in REDIS_8_2_CALLS {
        for (protocol, which, seen) in
            [(Protocol::Resp2, "2", resp2), (Protocol::Resp3, "3", resp3)]
        {
            let reply = call_as(which, call).invoke(&mut conn).unwrap();
            let shape = shape_of(&reply);
            assert_eq!(shape.code(), *seen, "{call:?} under RESP{which}: {reply:?}");
            let words: Vec<Option<String>> = call.iter().map(|w| Some((*w).to_owned())).collect();
            let row = reply_to(&words, false, protocol).unwrap();
            assert_eq!(
                row.union(&shape),
                row,
                "{call:?} under RESP{which} replied {shape} ({reply:?}), not among the row's {row}"
            );
        }
    }
}

/// The calls `redis_8_2_commands_reply_as_their_rows_say` makes, each with the shape codes
/// its replies show under RESP2 and RESP3 (the server's own, so that a change in it shows
/// here as well as a wrong row).
const REDIS_8_2_CALLS: &[(&[&str], &str, &str)] = &[
    (
        &["XACKDEL", "s", "g", "IDS", "2", "1-0", "9-0"],
        "[i]",
        "[i]",
    ),
    (
        &["XACKDEL", "none", "g", "KEEPREF", "IDS", "1", "1-0"],
        "[i]",
        "[i]",
    ),
    (&["XDELEX", "s", "IDS", "2", "2-0", "9-0"], "[i]", "[i]"),
    (&["XDELEX", "s", "DELREF", "IDS", "1", "3-0"], "[i]", "[i]"),
    (&["VADD", "v", "VALUES", "3", "0", "0", "1", "c"], "i", "i"),
    (&["VCARD", "v"], "i", "i"),
    (&["VCARD", "none"], "i", "i"),
    (&["VDIM", "v"], "i", "i"),
    (&["VEMB", "v", "a"], "[b]", "[b]"),
    (&["VEMB", "v", "none"], "n", "n"),
    (&["VEMB", "v", "a", "RAW"], "[bo]", "[bo]"),
    (&["VGETATTR", "v", "b"], "b", "b"),
    (&["VGETATTR", "v", "a"], "n", "n"),
    (&["VINFO", "v"], "[io]", "[io]"),
    (&["VINFO", "none"], "n", "n"),
    (&["VISMEMBER", "v", "a"], "i", "i"),
    (&["VISMEMBER", "none", "a"], "i", "i"),
    (&["VLINKS", "v", "a"], "[[b]]", "[[b]]"),
    (&["VLINKS", "v", "a", "WITHSCORES"], "[[b]]", "[[b]]"),
    (&["VLINKS", "v", "none"], "n", "n"),
    (&["VRANDMEMBER", "v"], "b", "b"),
    (&["VRANDMEMBER", "none"], "n", "n"),
    (&["VRANDMEMBER", "v", "-3"], "[b]", "[b]"),
    (&["VRANDMEMBER", "none", "2"], "[]", "[]"),
    (&["VSIM", "v", "ELE", "a"], "[b]", "[b]"),
    (&["VSIM", "v", "ELE", "a", "WITHSCORES"], "[b]", "[b]"),
    (&["VSIM", "v", "ELE", "a", "WITHATTRIBS"], "[nb]", "[b]"),
    (
        &["VSIM", "v", "ELE", "a", "WITHSCORES", "WITHATTRIBS"],
        "[nb]",
        "[b[b]]",
    ),
    (&["VSIM", "none", "ELE", "a"], "[]", "[]"),
    (&["VSETATTR", "v", "a", "{\"z\":2}"], "i", "i"),
    (&["VSETATTR", "v", "none", "{}"], "i", "i"),
    (&["VREM", "v", "none"], "i", "i"),
    (&["VREM", "v", "c"], "i", "i"),
];

/// Redis 8.2 added XACKDEL, and built in the vector sets.
fn has_redis_8_2_commands(conn: &mut redis::Connection) -> bool {
    ["XACKDEL", "VADD"].iter().all(|command| {
        let info: Vec<redis::Value> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(command)
            .query(conn)
            .unwrap();
        !info.contains(&redis::Value::Nil)
    })
}

/// A reply's shape as the table writes it: text that Redis sent as a bulk string is `b`
/// whatever it says; a status `o` unless it reads as a number.
fn shape_of(value: &redis::Value) -> lockscript_audit::reply::Shapes {
    use lockscript_audit::reply::{Shape, Shapes};
    match value {
        redis::Value::Nil => Shapes::of(Shape::Nil),
        redis::Value::Int(_) => Shapes::of(Shape::Integer),
        redis::Value::BulkString(_) => Shapes::of(Shape::Bulk),
        redis::Value::SimpleString(s) if s.parse::<f64>().is_ok() => Shapes::of(Shape::Status),
        redis::Value::Okay | redis::Value::SimpleString(_) => Shapes::of(Shape::StatusWord),
        redis::Value::Array(items) => Shapes::array(
            items
                .iter()
                .map(shape_of)
                .fold(Shapes::none(), |all, s| all.union(&s)),
        ),
        other => panic!("a script's reply to a RESP2 caller is no {other:?}"),
    }
}

/// Valkey 8.1 and Redis 8.4 added `SET ... IFEQ`.
fn has_set_ifeq(conn: &mut redis::Connection) -> bool {
    match valkey_version(conn) {
        Some(valkey) => valkey >= (8, 1),
        None => version(conn) >= (8, 4),
    }
}

/// The server's `redis_version` (Valkey's says 7.2), as (major, minor).
fn version(conn: &mut redis::Connection) -> (u32, u32) {
    info_version(conn, "redis_version:").unwrap_or_default()
}

fn valkey_version(conn: &mut redis::Connection) -> Option<(u32, u32)> {
    info_version(conn, "valkey_version:")
}

fn info_version(conn: &mut redis::Connection, field: &str) -> Option<(u32, u32)> {
    let info: String = redis::cmd("INFO").arg("server").query(conn).unwrap();
    info.lines().find_map(|l| l.strip_prefix(field)).map(|v| {
        let mut parts = v.trim().split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    })
}
