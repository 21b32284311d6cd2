// A global or library member that some server the script runs on does not define is an
// error at its use, naming the servers that have it and those that lack it: `os` (Redis
// 8.2 and Valkey, not 6.2 or 7.0), `print` (Redis 6.2 only), `redis.acl_check_cmd` (not
// Redis 6.2).
use lockscript::lock_script;

#[lock_script("scripts/server-globals.lua")]
fn check(#[key] key: &str) -> (bool, f64);

fn main() {
    let _ = check("k");
}
