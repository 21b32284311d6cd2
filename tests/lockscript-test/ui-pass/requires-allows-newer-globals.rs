// A script declared for servers that all define `os` may use it: `requires` narrows the
// servers the globals are checked against (Valkey, not named, has it everywhere).
#![deny(warnings)]
use lockscript::lock_script;

#[lock_script("scripts/os-clock.lua", requires = "redis 8.2")]
pub fn timed_get(#[key] key: &str) -> String;

fn main() {
    let _ = timed_get("k");
}
