// Calls are checked for their argument count and subcommand, through wrapper functions
// and pcall too; a computed command (`rcall(ARGV[1], ...)`) is not an error.
use lockscript::lock_script;

#[lock_script("scripts/calls.lua")]
fn calls(#[key] key: &str, command: &str) -> i64;

fn main() {
    let _ = calls("k", "GET");
}
