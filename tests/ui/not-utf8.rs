use lockscript::lock_script;

#[lock_script("scripts/not-utf8.lua")]
fn binary() -> i64;

fn main() {}
