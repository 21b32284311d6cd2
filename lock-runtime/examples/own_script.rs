//! A script of your own: `scripts/credit.lua` stays a plain file reviewers read; the
//! attribute embeds it, checks it against this signature at compile time (two keys, two
//! arguments, the commands it calls) and generates `credit`, which runs `EVALSHA` with the
//! digest computed at compile time and, on `NOSCRIPT`, loads the script and runs it again.
//!
//! ```console
//! $ cargo run -p lockscript --example own_script -- redis://127.0.0.1:6379/
//! $ cargo run -p lockscript-audit -- audit lock-runtime/examples/scripts
//! ```
//!
//! `lockscript audit` prints the same digest, the keys and arguments the script uses and
//! the commands it calls, and checks the file against `SHA1SUMS` beside it.
use lockscript::lock_script;

/// Credits `amount` to `balance`, at most once per `transfer` id; -1 if applied before.
#[lock_script("examples/scripts/credit.lua")]
fn credit(#[key] balance: &str, #[key] applied: &str, transfer: &str, amount: i64) -> i64;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".to_owned());
    let client = redis::Client::open(url)?;
    let mut conn = client.get_connection()?;
    redis::cmd("DEL")
        .arg("account:{7}")
        .arg("account:{7}:applied")
        .exec(&mut conn)?;

    let first = credit("account:{7}", "account:{7}:applied", "t-1", 50).invoke(&mut conn)?;
    let again = credit("account:{7}", "account:{7}:applied", "t-1", 50).invoke(&mut conn)?;
    let second = credit("account:{7}", "account:{7}:applied", "t-2", 25).invoke(&mut conn)?;
    println!("balance after t-1: {first}; t-1 again: {again}; after t-2: {second}");

    let script = credit("", "", "", 0).script();
    println!("script {} sha1 {}", script.path(), script.sha1());
    Ok(())
}
