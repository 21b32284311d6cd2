// Declarations that hold what their scripts reply: nil as `Option`, HGETALL as a map, a
// float returned as text, a command the caller names (not known: never refused), JSON text,
// MessagePack bytes, and what cmsgpack, cjson and struct decode (not known: never refused);
// `SET ... IFEQ`'s nil as `Option`; ZRANGE's members and scores as tuples, flat (RESP2) or
// nested (under `redis.setresp(3)`); under RESP3, a comparison (false replies 0) as an
// integer.
use std::collections::HashMap;

use lockscript::lock_script;

#[lock_script("scripts/reply-get.lua")]
fn get(#[key] key: &str) -> Option<String>;

#[lock_script("scripts/reply-hgetall.lua")]
fn fields(#[key] hash: &str) -> HashMap<String, String>;

#[lock_script("scripts/reply-half-text.lua")]
fn half(n: f64) -> f64;

#[lock_script("scripts/reply-computed.lua")]
fn run(#[key] key: &str, command: &str) -> i64;

#[lock_script("scripts/reply-json.lua")]
fn as_json(#[key] hash: &str) -> String;

#[lock_script("scripts/reply-false.lua")]
fn field(#[key] hash: &str, name: &str) -> Option<String>;

#[lock_script("scripts/reply-incr-or-missing.lua")]
fn bump(#[key] counter: &str) -> redis::Value;

#[lock_script("scripts/reply-msgpack.lua")]
fn packed(#[key] key: &str, text: &str, n: i64) -> Vec<u8>;

#[lock_script("scripts/reply-decoded.lua")]
fn decoded(encoded: &[u8], how: &str) -> i64;

#[lock_script("scripts/reply-set-ifeq.lua")]
fn replace(#[key] key: &str, old: &str, new: &str) -> Option<String>;

#[lock_script("scripts/reply-zrange.lua")]
fn ranked_flat(#[key] set: &str) -> Vec<(String, f64)>;

#[lock_script("scripts/reply-resp3-zrange.lua")]
fn ranked(#[key] set: &str) -> Vec<(String, f64)>;

#[lock_script("scripts/reply-resp3-exists.lua")]
fn exists(#[key] key: &str) -> i64;

fn main() {
    let _ = (get("k"), fields("h"), half(5.0), run("k", "INCR"), as_json("h"));
    let _ = (field("h", "f"), bump("c"));
    let _ = (packed("k", "a", 300), decoded(&[0x2a], "msgpack"));
    let _ = (replace("k", "a", "b"), ranked("z"), ranked_flat("z"), exists("k"));
}
