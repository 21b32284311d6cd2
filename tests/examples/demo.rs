//! The lockscript demo: typed scripts, their digests, and one lock's life, against a
//! private redis-server (or the server at `REDIS_URL`).
//!
//! Run it with `./run demo`.

use lock_runtime::builtin::{acquire, compare_del, renew};
use lockscript_tests::command_calls;
use lockscript_tests::server::RedisServer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Keep the private server alive for the whole demo.
    let (_server, url) = if let Ok(url) = std::env::var("REDIS_URL") {
        (None, url)
    } else {
        let server = RedisServer::start();
        let url = server.url();
        println!("started a private redis-server on {url}");
        (Some(server), url)
    };
    let client = redis::Client::open(url.as_str())?;
    let mut conn = client.get_connection()?;
    let mut stats = client.get_connection()?;

    println!("\nScripts compiled into this binary (audit with `sha1sum -c scripts/SHA1SUMS`):");
    println!(
        "  {:<40}  {:<20} {:>4} {:>4}  read-only",
        "sha1", "name", "keys", "argv"
    );
    for s in lock_runtime::scripts() {
        println!(
            "  {}  {:<20} {:>4} {:>4}  {}",
            s.sha1(),
            s.name(),
            s.keys().to_string(),
            s.args().to_string(),
            s.read_only()
        );
    }

    let (lock, fence) = ("lock:{demo-orders}", "lock:{demo-orders}:fence");
    let _: () = redis::cmd("DEL").arg(lock).arg(fence).query(&mut conn)?;
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut stats)?;
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut stats)?;

    println!("\nOne lock's life on {lock}:");
    let (ok, fence_a) = acquire(lock, fence, "token-of-a", 5_000).invoke(&mut conn)?;
    println!("  A acquires:             acquired={ok} fencing token={fence_a}");
    let (ok, pttl) = acquire(lock, fence, "token-of-b", 5_000).invoke(&mut conn)?;
    println!("  B tries:                acquired={ok} holder's lease left={pttl} ms");
    let renewed = renew(lock, "token-of-b", 60_000).invoke(&mut conn)?;
    println!("  B tries to renew A's:   renewed={renewed} (refused: not B's token)");
    let renewed = renew(lock, "token-of-a", 10_000).invoke(&mut conn)?;
    println!("  A renews:               renewed={renewed}");
    let deleted = compare_del(lock, "token-of-b").invoke(&mut conn)?;
    println!("  B tries to release A's: released={deleted} (refused)");
    let deleted = compare_del(lock, "token-of-a").invoke(&mut conn)?;
    println!("  A releases:             released={deleted} (published on {lock}:released)");
    let (ok, fence_b) = acquire(lock, fence, "token-of-b", 5_000).invoke(&mut conn)?;
    println!("  B acquires:             acquired={ok} fencing token={fence_b} (> {fence_a})");
    compare_del(lock, "token-of-b").invoke(&mut conn)?;

    println!("\nThe server's script cache started empty (SCRIPT FLUSH):");
    println!(
        "  EVALSHA sent {} times, EVAL {} times: one EVAL per script, on its first NOSCRIPT",
        command_calls(&mut stats, "evalsha"),
        command_calls(&mut stats, "eval")
    );

    let started = std::time::Instant::now();
    let rounds = 2_000u32;
    for _ in 0..rounds {
        acquire(lock, fence, "token-of-c", 5_000).invoke(&mut conn)?;
        compare_del(lock, "token-of-c").invoke(&mut conn)?;
    }
    let per_cycle = started.elapsed() / rounds;
    println!(
        "\n{rounds} acquire + release cycles: {:.1} µs each (two round trips)",
        per_cycle.as_secs_f64() * 1e6
    );
    Ok(())
}
