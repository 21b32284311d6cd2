//! The lock user of the guide's servers page ("ACL: the least a lock user needs"): the
//! rules the ACL tests run the lock cycle under and the chaos workers connect with, in
//! one place so that the two cannot drift apart from each other or from the guide.

/// The guide's rules for a lock user (default key prefix `lock:`), without `on` and a
/// password, which each user adds.
///
/// ```no_run
/// let mut acl = redis::cmd("ACL");
/// acl.arg("SETUSER").arg("locker").arg("on").arg(">secret");
/// for rule in lockscript_test::acl::LOCK_USER_RULES {
///     acl.arg(*rule);
/// }
/// ```
pub const LOCK_USER_RULES: &[&str] = &[
    "resetkeys",
    "~lock:*",
    "resetchannels",
    CHANNELS,
    "-@all",
    // What the client sends.
    "+multi",
    "+exec",
    "+evalsha",
    "+eval",
    "+script|load",
    "+get",
    "+subscribe",
    "+unsubscribe",
    "+ping",
    // What the scripts call.
    "+exists",
    "+set",
    "+incr",
    "+pttl",
    "+del",
    "+pexpire",
    "+publish",
    "+time",
    // What fair-queue.lua calls too (fair mode, read/write locks, semaphores), and
    // leader.lua (elections: HMGET).
    "+zadd",
    "+zrem",
    "+zrange",
    "+zrangebyscore",
    "+zscore",
    "+zcard",
    "+hset",
    "+hget",
    "+hmget",
    "+hdel",
];

/// The release and handoff channels of the default prefix.
pub const CHANNELS: &str = "&lock:*";
