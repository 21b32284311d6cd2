// The guard wraps the script's text in Lua text: a file that is not UTF-8 cannot be
// guarded, and the error says where the first such byte is.
use lockscript::lock_script;

#[lock_script("scripts/not-utf8.lua", guarded)]
fn binary() -> i64;

fn main() {}
