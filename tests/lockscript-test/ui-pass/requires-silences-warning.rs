// `requires` that the script meets answers the warning about servers that lack its
// command: no warning (denied here), and the build passes.
#![deny(warnings)]
use lockscript::lock_script;

#[lock_script("scripts/del-if-eq.lua", requires = "valkey 9.0")]
pub fn del_if_eq(#[key] key: &str, value: &str) -> i64;

fn main() {
    let _ = del_if_eq("k", "v");
}
