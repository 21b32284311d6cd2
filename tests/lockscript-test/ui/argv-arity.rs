use lockscript::lock_script;

// The script reads ARGV[1]; the function forgot the argument.
#[lock_script("scripts/get-eq.lua")]
fn missing_arg(#[key] key: &str) -> bool;

fn main() {}
