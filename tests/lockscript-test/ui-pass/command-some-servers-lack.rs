// A command only some servers have (Valkey's DELIFEQ) warns but builds; the warning
// can be silenced on the function.
use lockscript::lock_script;

#[lock_script("scripts/del-if-eq.lua")]
fn del_if_eq(#[key] key: &str, token: &str) -> i64;

#[allow(deprecated)]
#[lock_script("scripts/del-if-eq.lua")]
fn del_if_eq_quiet(#[key] key: &str, token: &str) -> i64;

fn main() {
    assert_eq!(del_if_eq("k", "t").script().name(), "del-if-eq");
    assert_eq!(del_if_eq_quiet("k", "t").script().name(), "del-if-eq");
}
