// A script that reads KEYS or ARGV by count takes any number of them: the function needs
// a slice parameter for each such list (the same rule for both), pointed at the use.
use lockscript::lock_script;

#[lock_script("scripts/count-both.lua")]
fn del(#[key] key: &str, arg: &str) -> i64;

fn main() {
    let _ = del("k", "a");
}
