// Parameters may have any name, the names the expansion uses for its own locals and
// statics included: the generated body is hygienic, so none is shadowed by the
// macro's, and none shadows it.
#![allow(non_snake_case)]
use lockscript::lock_script;

#[lock_script("scripts/many-params.lua")]
pub fn every_name(
    #[key] invocation: &str,
    #[key] script: &str,
    #[key] keys: &str,
    cmd: &str,
    args: &str,
    __LOCK_SCRIPT: &str,
    __LOCK_SCRIPT_REGISTERED: &str,
    script_warning: &str,
    lockscript: &str,
    core: &str,
    guard: &str,
) -> Vec<String>;

// A slice named `invocation` is counted into the keys, not the call being built.
#[lock_script("scripts/count-both.lua")]
pub fn variadic(#[key] invocation: &[&str], script: &[&str]) -> i64;

#[lock_script("scripts/get-eq.lua", guarded)]
pub fn guarded(#[key] invocation: &str, script: &str) -> bool;

// A generic parameter, what the error for `impl Trait` suggests.
#[lock_script("scripts/get-eq.lua")]
pub fn generic<K: lockscript::ScriptArg>(#[key] invocation: K, script: &str) -> bool;

fn main() {
    let call = every_name("k1", "k2", "k3", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8");
    assert_eq!(call.script().name(), "many-params");
    assert!(format!("{call:?}").contains("arguments: 11"), "{call:?}");
    let call = variadic(&["a", "b", "c"], &["x", "y"]);
    assert!(format!("{call:?}").contains("arguments: 5"), "{call:?}");
    let _ = guarded::<dyn lockscript::Guarded>;
    let call = generic(String::from("k"), "v");
    assert!(format!("{call:?}").contains("arguments: 2"), "{call:?}");
}
