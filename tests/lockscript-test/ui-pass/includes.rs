// A script with includes (one of them included twice) is sent expanded: its digest is
// the expanded body's, and the body holds each included file once.
use lockscript::lock_script;

#[lock_script("scripts/with-includes.lua")]
pub fn bump(#[key] counter: &str, by: i64) -> i64;

fn main() {
    let script = bump("c", 1).script();
    assert_eq!(script.source().matches("local function getOrZero").count(), 1);
    assert!(script.source().contains("local function bump"));
    assert!(!script.source().contains("@include"));
    let digest = sha1_smol::Sha1::from(script.source().as_bytes()).digest().to_string();
    assert_eq!(script.sha1(), digest);
}
