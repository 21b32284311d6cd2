// A renamed runtime crate: `crate = "..."` points the generated code at it.
extern crate lockscript as renamed;

#[renamed::lock_script("scripts/get-eq.lua", crate = "renamed")]
fn get_eq(#[key] key: &str, expected: &str) -> bool;

fn main() {
    let call = get_eq("k", "v");
    assert_eq!(call.script().name(), "get-eq");
    assert!(renamed::scripts().any(|s| s.name() == "get-eq"));
}
