// Under `redis.setresp(3)` ZRANGE ... WITHSCORES replies pairs, not a flat list.
use lockscript::lock_script;

#[lock_script("scripts/reply-resp3-zrange.lua")]
fn ranked(#[key] set: &str) -> Vec<String>;

fn main() {}
