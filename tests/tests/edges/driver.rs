//! The fixed part of the program that tests/tests/edges.rs generates around its cases (it
//! is the generated crate's `src/main.rs`; `src/cases.rs` and `src/cN.rs` are written
//! beside it). It is not compiled with the test: the test embeds it with `include_str!`.
//!
//! For every case it calls the generated function on every delivery against the server
//! at `LOCKSCRIPT_EDGES_URL` and prints one line per check, `case<TAB>check<TAB>seen`.
//! It prints what it saw and nothing else: what each check should have seen is the
//! test's to decide.
#![allow(clippy::all, dead_code, deprecated, unused)]

mod cases;

/// What `crate = "crate::rt"` in a generated declaration names: the runtime, re-exported.
pub mod rt {
    pub use ::lockscript::*;
}

use std::io::Write as _;

use lockscript::{Delivery, Invocation, LockError, PipelineExt};
use redis::Value;

/// One generated declaration, as the driver sees it.
pub struct Case {
    pub index: usize,
    /// Calls the generated function with the case's values.
    pub call: fn() -> Invocation<Value>,
    /// The SHA1 the test computed for the bytes the script must send.
    pub sha1: &'static str,
    /// Those bytes.
    pub bytes: &'static [u8],
}

const USER: &str = "lockscript-edges";
const PASSWORD: &str = "edges-pass";

fn main() {
    let url = std::env::var("LOCKSCRIPT_EDGES_URL").expect("LOCKSCRIPT_EDGES_URL is not set");
    let client = redis::Client::open(url.as_str()).expect("a Redis URL");
    let mut admin = client.get_connection().expect("connect");
    // A user that may not SCRIPT LOAD (nor any SCRIPT subcommand, which Redis 6.2 cannot
    // deny one by one): its calls fall back to EVAL with the bytes.
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(USER)
        .arg("reset")
        .arg("on")
        .arg(format!(">{PASSWORD}"))
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-script")
        .query(&mut admin)
        .expect("ACL SETUSER");
    let restricted_url = url.replacen("redis://", &format!("redis://{USER}:{PASSWORD}@"), 1);
    let restricted = redis::Client::open(restricted_url.as_str()).expect("a Redis URL");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // Every call goes on a connection of its own, and `admin` only flushes and reads: a
    // reply that redis-rs cannot parse leaves its connection unusable, and must not hide
    // the other checks.
    let sync = |client: &redis::Client| client.get_connection().expect("connect");
    let mut aconn = || {
        runtime
            .block_on(client.get_multiplexed_async_connection())
            .expect("connect (async)")
    };
    let out = std::io::stdout();
    let mut out = out.lock();
    for case in cases::ALL {
        let mut say = |check: &str, seen: String| {
            let seen = seen.replace(['\t', '\n', '\r'], " ");
            writeln!(out, "{}\t{check}\t{seen}", case.index).expect("stdout");
        };
        let call = case.call;
        let script = call().script();
        say("digest", script.sha1().to_owned());
        say("bytes", hex(script.bytes()));
        say(
            "meta",
            format!(
                "{}|{}|{}|{}|{}|{}",
                script.name(),
                script.path(),
                script.keys(),
                script.args(),
                script.read_only(),
                script.flags().join(",")
            ),
        );

        // EVALSHA on a cold cache: NOSCRIPT, SCRIPT LOAD, EVALSHA; then from the cache.
        flush_scripts(&mut admin);
        say("evalsha-cold", shown(call().invoke(&mut sync(&client))));
        say("cached-after-evalsha", exists(&mut admin, case.sha1));
        say("evalsha-cached", shown(call().invoke(&mut sync(&client))));

        // EVAL: the user cannot SCRIPT LOAD, so the bytes go with the call.
        flush_scripts(&mut admin);
        reset_stats(&mut admin);
        say(
            "eval-fallback",
            shown(call().invoke(&mut sync(&restricted))),
        );
        let stats = command_stats(&mut admin);
        say(
            "eval-fallback-commands",
            format!("eval={}", calls(&stats, &["eval", "eval_ro"])),
        );
        say("cached-after-eval", exists(&mut admin, case.sha1));

        // The async face on a cold cache: SCRIPT LOAD and EVALSHA in one round trip.
        flush_scripts(&mut admin);
        say(
            "async-cold",
            shown(runtime.block_on(call().invoke_async(&mut aconn()))),
        );

        // Redis Functions: FCALL, FUNCTION LOAD of the library when it is missing.
        flush_functions(&mut admin);
        flush_scripts(&mut admin);
        say(
            "functions-cold",
            shown(
                call()
                    .delivery(Delivery::Functions)
                    .invoke(&mut sync(&client)),
            ),
        );
        reset_stats(&mut admin);
        say(
            "functions-cached",
            shown(
                call()
                    .delivery(Delivery::Functions)
                    .invoke(&mut sync(&client)),
            ),
        );
        let stats = command_stats(&mut admin);
        say(
            "functions-commands",
            format!(
                "fcall={} scripts={}",
                calls(&stats, &["fcall", "fcall_ro"]),
                calls(&stats, &["eval", "eval_ro", "evalsha", "evalsha_ro"])
            ),
        );
        say("function-body", function_body(&mut admin, case));
        flush_functions(&mut admin);
        say(
            "functions-async",
            shown(
                runtime.block_on(
                    call()
                        .delivery(Delivery::Functions)
                        .invoke_async(&mut aconn()),
                ),
            ),
        );

        // Pipelines: the first occurrence goes as EVAL with the bytes, the next as EVALSHA.
        for (check, atomic) in [("pipeline", false), ("transaction", true)] {
            flush_scripts(&mut admin);
            reset_stats(&mut admin);
            let (first, second) = (call(), call());
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            if atomic {
                pipe.atomic();
            }
            let added = pipe
                .invoke(&first)
                .and_then(|p| p.invoke(&second))
                .map(drop);
            let (one, two) = match added {
                Err(e) => (shown(Err(e)), String::from("(not added)")),
                Ok(()) => match pipe.query::<Vec<Value>>(&mut sync(&client)) {
                    Ok(replies) if replies.len() == 2 => {
                        let mut replies = replies.into_iter();
                        let one = first.read(replies.next().unwrap_or_default());
                        let two = second.read(replies.next().unwrap_or_default());
                        (shown(one), shown(two))
                    }
                    Ok(replies) => (
                        format!("{} replies: {replies:?}", replies.len()),
                        String::new(),
                    ),
                    Err(e) => (format!("pipeline failed: {e}"), String::new()),
                },
            };
            say(&format!("{check}-1"), one);
            say(&format!("{check}-2"), two);
            let stats = command_stats(&mut admin);
            say(
                &format!("{check}-commands"),
                format!(
                    "eval={} evalsha={}",
                    calls(&stats, &["eval", "eval_ro"]),
                    calls(&stats, &["evalsha", "evalsha_ro"])
                ),
            );
        }
    }
    // Every script of the binary at once: SCRIPT LOAD, each digest checked.
    flush_scripts(&mut admin);
    let loaded = match lockscript::load_scripts(&mut admin) {
        Ok(_) => "ok".to_owned(),
        Err(e) => shown(Err(e)),
    };
    writeln!(out, "all\tload-scripts\t{loaded}").expect("stdout");
    let cached = cases::ALL
        .iter()
        .filter(|case| exists(&mut admin, case.sha1) == "1")
        .count();
    writeln!(out, "all\tloaded\t{cached}/{}", cases::ALL.len()).expect("stdout");
    let _: redis::RedisResult<()> = redis::cmd("ACL").arg("DELUSER").arg(USER).query(&mut admin);
    out.flush().expect("stdout");
}

/// A reply as the test writes its expectations: `ok:` and the value, or `err:` and the
/// error's kind with what the test compares of it.
fn shown(reply: Result<Value, LockError>) -> String {
    match reply {
        Ok(value) => format!("ok:{}", value_of(&value)),
        Err(LockError::Argument {
            parameter, count, ..
        }) => format!("err:Argument:{parameter}:{count}"),
        Err(LockError::ServerTooOld { needs, .. }) => format!("err:ServerTooOld:{needs}"),
        Err(e) => {
            let debug = format!("{e:?}");
            let kind: String = debug.chars().take_while(|c| c.is_alphanumeric()).collect();
            format!("err:{kind}:{e}")
        }
    }
}

fn value_of(value: &Value) -> String {
    match value {
        Value::Int(n) => format!("i:{n}"),
        Value::BulkString(bytes) => format!("b:{}", hex(bytes)),
        Value::Nil => "nil".to_owned(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(value_of).collect();
            format!("[{}]", items.join(","))
        }
        other => format!("?{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn flush_scripts(conn: &mut redis::Connection) {
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(conn)
        .expect("SCRIPT FLUSH");
}

/// Before Redis 7.0 there are no functions to flush.
fn flush_functions(conn: &mut redis::Connection) {
    let _: redis::RedisResult<()> = redis::cmd("FUNCTION").arg("FLUSH").query(conn);
}

fn reset_stats(conn: &mut redis::Connection) {
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(conn)
        .expect("CONFIG RESETSTAT");
}

/// `SCRIPT EXISTS sha1`: "1" when the server caches a script with that digest.
fn exists(conn: &mut redis::Connection, sha1: &str) -> String {
    let found: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(sha1)
        .query(conn)
        .expect("SCRIPT EXISTS");
    found
        .first()
        .map_or_else(|| "none".to_owned(), i64::to_string)
}

/// `INFO commandstats` as calls per command, lowercase.
fn command_stats(conn: &mut redis::Connection) -> Vec<(String, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO");
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_ascii_lowercase(), calls))
        })
        .collect()
}

fn calls(stats: &[(String, u64)], names: &[&str]) -> u64 {
    stats
        .iter()
        .filter(|(name, _)| names.contains(&name.as_str()))
        .map(|(_, calls)| calls)
        .sum()
}

/// Whether the server's function library (`load_functions`) has a
/// function whose name ends with the case's digest, and holds the case's bytes verbatim
/// (a `#!` first line is a comment there, `--#!...`, as the generator documents).
fn function_body(conn: &mut redis::Connection, case: &Case) -> String {
    // A call refused before it was sent loaded nothing.
    if let Err(e) = lockscript::load_functions(conn) {
        return format!("load_functions failed: {e}");
    }
    let reply: Value = match redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("WITHCODE")
        .query(conn)
    {
        Ok(reply) => reply,
        Err(e) => return format!("FUNCTION LIST failed: {e}"),
    };
    let suffix = format!("_{}", case.sha1);
    let mut needle = Vec::new();
    if case.bytes.starts_with(b"#!") {
        needle.extend_from_slice(b"--");
    }
    needle.extend_from_slice(case.bytes);
    let mut listed = 0;
    let mut verbatim = 0;
    for library in items(&reply) {
        let code = field(library, "library_code").and_then(bytes);
        let names: Vec<Vec<u8>> = field(library, "functions")
            .map(items)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|f| field(f, "name").and_then(bytes))
            .collect();
        if names.iter().any(|n| n.ends_with(suffix.as_bytes())) {
            listed = 1;
            if code.is_some_and(|code| {
                code.windows(needle.len().max(1))
                    .any(|w| w == needle.as_slice())
            }) {
                verbatim = 1;
            }
        }
    }
    format!("listed={listed} verbatim={verbatim}")
}

fn items(value: &Value) -> Vec<&Value> {
    match value {
        Value::Array(items) | Value::Set(items) => items.iter().collect(),
        _ => Vec::new(),
    }
}

/// The value under `name` in a RESP2 flat array of pairs, or a RESP3 map.
fn field<'a>(value: &'a Value, name: &str) -> Option<&'a Value> {
    match value {
        Value::Array(items) => items
            .chunks(2)
            .find(|pair| {
                pair.first()
                    .and_then(bytes)
                    .is_some_and(|k| k == name.as_bytes())
            })
            .and_then(|pair| pair.get(1)),
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| bytes(k).is_some_and(|k| k == name.as_bytes()))
            .map(|(_, v)| v),
        _ => None,
    }
}

fn bytes(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    }
}
