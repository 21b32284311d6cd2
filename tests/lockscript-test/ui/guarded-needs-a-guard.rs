use lockscript::lock_script;

#[lock_script("scripts/get.lua", guarded)]
fn peek(#[key] key: &str) -> Option<String>;

fn main() {
    // A guarded call takes a guard (or its Lease) first: a plain string is not one.
    let _ = peek(&"lock:{a}", "key");
}
