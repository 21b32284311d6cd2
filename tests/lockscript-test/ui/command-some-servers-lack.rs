// A command only some servers have is a warning, not an error: it shows at the
// attribute, here made an error by a crate that denies warnings.
#![deny(deprecated)]

use lockscript::lock_script;

#[lock_script("scripts/del-if-eq.lua")]
fn del_if_eq(#[key] key: &str, token: &str) -> i64;

fn main() {
    let _ = del_if_eq("k", "t");
}
