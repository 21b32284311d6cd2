// `SET ... IFEQ` replies nil when the value is not the one given.
use lockscript::lock_script;

#[lock_script("scripts/reply-set-ifeq.lua")]
fn replace(#[key] key: &str, old: &str, new: &str) -> String;

fn main() {}
