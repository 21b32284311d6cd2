// `impl Trait` cannot be a parameter's type (the generated body names each type to send
// it): an error at the type that says what to write instead.
use lockscript::lock_script;

#[lock_script("scripts/get-eq.lua")]
fn same(#[key] key: impl AsRef<str>, value: &impl ToString) -> bool;

fn main() {
    let _ = same("k", &"v");
}
