// A parameter type that cannot be sent and a return type that cannot be read are errors
// at those types, in lockscript's words.
use lockscript::lock_script;

#[allow(dead_code)]
struct Order {
    id: u64,
}

struct Summary;

#[lock_script("scripts/get-eq.lua")]
fn check(#[key] key: &str, order: Order) -> Summary;

fn main() {
    let _ = check("k", Order { id: 1 }).script();
}
