//! The scripts the lock runtime runs, declared here so every binary that links
//! `lockscript` has them in [`scripts()`](crate::scripts) and can audit them.
//!
//! Each is a plain file under `scripts/` with a header that explains it to a reviewer
//! who reads no Rust. Key names for lock `name` share the hash tag `{name}`, so they
//! live in one Cluster slot: `lock:{name}`, `lock:{name}:fence`, and the release
//! channel `lock:{name}:released`.

// `linkme` registers each script with `#[link_section]`, which the `unsafe_code` lint
// counts when the registering macro is local, as it is only here. In user crates the
// macro comes from this crate, and even `#![forbid(unsafe_code)]` accepts it.
#![allow(unsafe_code)]

use crate::lock_script;

/// One atomic attempt to take a lock: raise the fencing counter, then `SET` the lock
/// with a lease of `ttl_ms`. The counter lives `fence_ms` after this grant; a missing
/// one restarts from the server's clock in microseconds.
///
/// Returns `(1, fence)` when acquired, `(0, pttl)` when another owner holds it; an error
/// reply starting with `WRONGKIND` while readers or permits of the same name hold it.
///
/// A plain lock's attempts go as one `MULTI`/`EXEC` of the server's own commands with
/// the same meaning, a quarter of this script's server time; this script runs where
/// that cannot go: native commands turned off (`native_commands(false)`), a lock user
/// whose ACL refuses one of the transaction's commands, a sync Redis Cluster
/// connection (which takes no pipeline).
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// let (acquired, value) = lockscript::builtin::acquire(
///     "lock:{orders}", "lock:{orders}:fence", "lock:{orders}:holders", "my-token", 30_000,
///     3_630_000,
/// ).invoke(&mut conn)?;
/// if acquired == 1 { println!("fence {value}") } else { println!("retry in {value} ms") }
/// # Ok(())
/// # }
/// ```
#[lock_script("scripts/acquire-with-retry.lua")]
pub fn acquire(
    #[key] lock: &str,
    #[key] fence: &str,
    #[key] holders: &str,
    token: &str,
    ttl_ms: u64,
    fence_ms: u64,
) -> (i64, i64);

/// Takes several locks at once, all or none (a multi-lock's names on one server or in
/// one Cluster slot): `keys` are three per name, `lock:{name}`, `lock:{name}:fence`,
/// `lock:{name}:holders`, in the order every caller uses. Each lock gets `token` with a
/// lease of `ttl_ms`; each counter lives `fence_ms` after the grant.
///
/// Returns `[1, fence_1, ..., fence_n]` when all were acquired, `[0, pttl, i]` when the
/// `i`-th name (from 1) is held by another owner; an error reply starting with
/// `WRONGKIND` while readers or permits hold one of the names.
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// let keys = [
///     "lock:{a}", "lock:{a}:fence", "lock:{a}:holders",
///     "lock:{b}", "lock:{b}:fence", "lock:{b}:holders",
/// ];
/// let reply = lockscript::builtin::acquire_many(&keys, "my-token", 30_000, 3_630_000)
///     .invoke(&mut conn)?;
/// if reply[0] == 1 { println!("fences {:?}", &reply[1..]) } else { println!("retry in {} ms", reply[1]) }
/// # Ok(())
/// # }
/// ```
#[lock_script("scripts/acquire-many.lua")]
pub fn acquire_many(#[key] keys: &[&str], token: &str, ttl_ms: u64, fence_ms: u64) -> Vec<i64>;

/// An election's leader says who it is: writes the record `lock:{name}:leader` (the
/// owner `token`, the `term`, the `value`) only while `token` holds the lock, makes it
/// live `record_ms`, and publishes the term on `lock:{name}:proclaimed`. Returns 1 when
/// proclaimed, 0 when `token` does not hold the lock.
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// let done = lockscript::builtin::proclaim(
///     "lock:{jobs}", "lock:{jobs}:leader", "my-token", 42, "10.0.0.7:8080", 3_630_000,
/// ).invoke(&mut conn)?;
/// # Ok(())
/// # }
/// ```
#[lock_script("scripts/proclaim.lua")]
pub fn proclaim(
    #[key] lock: &str,
    #[key] record: &str,
    token: &str,
    term: u64,
    value: &str,
    record_ms: u64,
) -> i64;

/// Who leads an election: `(0, -2, "", "")` nobody, `(1, pttl, "", "")` a leader that
/// has not proclaimed yet, `(2, pttl, term, value)` the leader's term and value; `pttl`
/// is what is left of its lease in milliseconds. Only reads.
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// let (status, _pttl, term, value) =
///     lockscript::builtin::leader("lock:{jobs}", "lock:{jobs}:leader").invoke(&mut conn)?;
/// if status == 2 { println!("{value} leads in term {term}") }
/// # Ok(())
/// # }
/// ```
#[lock_script("scripts/leader.lua")]
pub fn leader(#[key] lock: &str, #[key] record: &str) -> (i64, i64, String, String);

/// Deletes the lock only while it holds `token`, and publishes on
/// `<lock key>:released`. Returns 1 when released, 0 otherwise.
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// let released = lockscript::builtin::compare_del("lock:{orders}", "my-token").invoke(&mut conn)?;
/// # Ok(())
/// # }
/// ```
#[lock_script("scripts/compare-del.lua")]
pub fn compare_del(#[key] lock: &str, token: &str) -> i64;

/// Passes the lock from the holder of `token` to the holder of `next`, with a lease of
/// `ttl_ms`, in one step: the release and the next grant at once (the fencing counter
/// then lives `fence_ms`, as with [`acquire`]). Returns the next
/// holder's fencing token, or 0 (and changes nothing) when `token` does not hold the
/// lock. Nothing is published: the lock is held again at once.
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// let fence = lockscript::builtin::handover(
///     "lock:{orders}", "lock:{orders}:fence", "my-token", "next-token", 30_000, 3_630_000,
/// ).invoke(&mut conn)?;
/// if fence > 0 { println!("handed over with fence {fence}") }
/// # Ok(())
/// # }
/// ```
#[lock_script("scripts/handover.lua")]
pub fn handover(
    #[key] lock: &str,
    #[key] fence: &str,
    token: &str,
    next: &str,
    ttl_ms: u64,
    fence_ms: u64,
) -> i64;

/// Sets a new lease on the lock only while it holds `token`. Returns 1 when renewed,
/// 0 otherwise.
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// let renewed = lockscript::builtin::renew("lock:{orders}", "my-token", 30_000).invoke(&mut conn)?;
/// # Ok(())
/// # }
/// ```
#[lock_script("scripts/renew.lua")]
pub fn renew(#[key] lock: &str, token: &str, ttl_ms: u64) -> i64;

/// Raises a fencing counter to at least `floor`, makes it live `fence_ms` from now,
/// and returns its value afterwards.
/// Redlock uses it so fencing tokens rise across grants on different majorities.
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// let now = lockscript::builtin::raise_fence("lock:{orders}:fence", 42, 3_630_000).invoke(&mut conn)?;
/// assert!(now >= 42);
/// # Ok(())
/// # }
/// ```
#[lock_script("scripts/raise-fence.lua")]
pub fn raise_fence(#[key] fence: &str, floor: u64, fence_ms: u64) -> i64;

/// The waiter queue of a lock, a read/write lock or a semaphore, with direct handoff
/// (see the file's header). `op` is one of `"acquire"`, `"release"`, `"renew"`,
/// `"holds"`, `"downgrade"`; `kind` is `"x"` (a lock, a writer), `"r"` (a reader) or
/// `"p"` (a permit, `permits` of them); `ticket` is `"<token> <claim_ms> <kind>
/// <channel>"`, or empty for a call that must not queue.
///
/// Returns `(status, fence, ms, now_us)`: for acquire `(1, fence, lease_ms, now)`
/// acquired, `(2, fence, left_ms, now)` granted before, `(0, 0, pttl, now)` queued; for
/// the others `(1, ..)` done, `(0, ..)` the token held nothing. `now` is the server's
/// clock in microseconds.
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let mut conn = client.get_connection()?;
/// let token = "0123456789abcdef0123456789abcdef";
/// let ticket = format!("{token} 2000 x lock:handoff:demo");
/// let (status, fence, _ms, _now) = lockscript::builtin::fair_queue(
///     "lock:{orders}", "lock:{orders}:fence", "lock:{orders}:queue", "lock:{orders}:alive",
///     "lock:{orders}:holders", "lock:{orders}:fences", "acquire", token, &ticket, "x", 30_000,
///     3_630_000, 2_000, 0,
/// ).invoke(&mut conn)?;
/// if status == 1 { println!("acquired, fence {fence}") } else { println!("queued") }
/// # Ok(())
/// # }
/// ```
#[allow(clippy::too_many_arguments)]
#[lock_script("scripts/fair-queue.lua")]
pub fn fair_queue(
    #[key] lock: &str,
    #[key] fence: &str,
    #[key] queue: &str,
    #[key] alive: &str,
    #[key] holders: &str,
    #[key] fences: &str,
    op: &str,
    token: &str,
    ticket: &str,
    kind: &str,
    lease_ms: u64,
    fence_ms: u64,
    waiter_ms: u64,
    permits: u64,
) -> (i64, i64, i64, i64);

/// An example of a fenced write: sets `value` only if `token` is not lower than the
/// highest fencing token the resource has seen (kept at `seen`). Returns 1 when
/// written, 0 when refused because a newer holder has written already.
///
/// ```no_run
/// // `fencing_token` comes from the guard: `guard.fencing_token()`.
/// # fn demo(conn: &mut redis::Connection, fencing_token: u64) -> Result<(), lockscript::LockError> {
/// let written = lockscript::builtin::fenced_set(
///     "report:data", "report:data:fence-seen", fencing_token, "contents",
/// ).invoke(conn)?;
/// # Ok(())
/// # }
/// ```
#[lock_script("scripts/fenced-set.lua")]
pub fn fenced_set(#[key] value_key: &str, #[key] seen: &str, token: u64, value: &str) -> i64;
