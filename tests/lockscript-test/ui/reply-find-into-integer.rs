// string.find replies nil when the text is not found, which an `i64` cannot hold.
use lockscript::lock_script;

#[lock_script("scripts/reply-find.lua")]
fn position(text: &str, part: &str) -> i64;

fn main() {}
