//! Owner-guarded scripts: a user's script wrapped so that it runs only while a lock
//! still belongs to the caller (its key holds the caller's owner token, which no later
//! grant can).
//!
//! `#[lock_script("scripts/credit.lua", guarded)]` sends [`wrap`]'s output instead of the
//! file, and `lockscript audit --guarded` prints the same text and digest, so a reviewer
//! can read exactly what the server runs. The wrapped script's own `KEYS` and `ARGV` keep
//! their numbering: it runs as a function whose parameters are named `KEYS` and `ARGV`,
//! called with the caller's keys and arguments after the two the guard adds (and no
//! varargs, like a script's own chunk, so `...` means the same inside).
//!
//! ```
//! let wrapped = lockscript_audit::guarded::wrap("return redis.call('GET', KEYS[1])\n");
//! assert!(wrapped.contains("LOCKSCRIPT_NOTHELD"));
//! assert!(wrapped.ends_with("end)(keys, argv)\n"));
//! ```

use std::fmt::Write as _;

/// The error code a wrapped script replies with when the lock no longer holds the
/// caller's owner token: nothing of the script ran.
pub const NOT_HELD: &str = "LOCKSCRIPT_NOTHELD";

/// The error code a wrapped script replies with, followed by the lock's current fencing
/// counter, when the lock no longer holds the caller's owner token and its counter has
/// moved past the caller's fencing token (a later holder may have been granted it):
/// nothing of the script ran.
pub const STALE: &str = "LOCKSCRIPT_STALE";

/// How many `KEYS` and how many `ARGV` entries the guard puts before the script's own.
pub const ADDED: usize = 2;

/// The guarded form of `source`. It depends on the file's bytes only (its header names
/// the file's SHA1), so `lockscript audit` and the macro compute the same digest.
///
/// A `#!lua` shebang stays the first line, so the script keeps its flags; in its place
/// in the body an empty line keeps the script's own line numbers readable (each is the
/// header's line count higher).
pub fn wrap(source: &str) -> String {
    let (shebang, body) = match source.strip_prefix("#!") {
        Some(_) => match source.split_once('\n') {
            Some((first, rest)) => (Some(first), rest),
            None => (Some(source), ""),
        },
        None => (None, source),
    };
    let mut out = String::with_capacity(source.len() + 1_200);
    if let Some(line) = shebang {
        out.push_str(line);
        out.push('\n');
    }
    let _ = write!(
        out,
        "-- The script with SHA1 {sha1}, guarded by lockscript\n\
         -- (`#[lock_script(..., guarded)]`, `lockscript wrap`).\n\
         --\n\
         -- The script below runs only while the caller holds the lock, checked here\n\
         -- in the same atomic step:\n\
         -- KEYS[1]  the lock key, lock:{{name}}; it must hold ARGV[1]\n\
         -- KEYS[2]  the lock's fencing counter\n\
         -- ARGV[1]  the caller's owner token\n\
         -- ARGV[2]  the caller's fencing token\n\
         -- The key holds a fresh random token per grant: while it holds the caller's,\n\
         -- no later grant was made. When it does not, nothing of the script runs, and\n\
         -- the reply says which: the error {STALE} <counter> when the counter has\n\
         -- moved past the caller's token (a later holder may hold the lock: the\n\
         -- counter also moves on attempts refused while the lock was held), the error\n\
         -- {NOT_HELD} otherwise (its lease ended). Otherwise the script runs with its own\n\
         -- keys and arguments, those after the two above, as KEYS[1..] and ARGV[1..].\n\
         \n\
         if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n\
         \x20 local counter = tonumber(redis.call('GET', KEYS[2]) or '0')\n\
         \x20 if counter > tonumber(ARGV[2]) then\n\
         \x20   return redis.error_reply('{STALE} ' .. string.format('%d', counter))\n\
         \x20 end\n\
         \x20 return redis.error_reply('{NOT_HELD} the lock key does not hold the caller\\'s token')\n\
         end\n\
         local keys, argv = {{}}, {{}}\n\
         for i = {first}, #KEYS do keys[i - {ADDED}] = KEYS[i] end\n\
         for i = {first}, #ARGV do argv[i - {ADDED}] = ARGV[i] end\n\
         return (function(KEYS, ARGV, ...)\n",
        first = ADDED + 1,
        sha1 = crate::sha1_hex(source.as_bytes()),
    );
    if shebang.is_some() {
        out.push('\n');
    }
    out.push_str(body);
    if !body.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("end)(keys, argv)\n");
    out
}

/// How many lines [`wrap`] puts before line 1 of `source`: line `n` of the script is
/// line `n + offset(source)` of its guarded form, so a server's error in the wrapped
/// script can name the script's own line.
///
/// ```
/// use lockscript_audit::guarded::{offset, wrap};
///
/// let source = "local a = 1\nreturn redis.call('GET', KEYS[1])\n";
/// let wrapped = wrap(source);
/// let line2 = wrapped.lines().nth(1 + offset(source)).unwrap();
/// assert_eq!(line2, "return redis.call('GET', KEYS[1])");
/// ```
pub fn offset(source: &str) -> usize {
    let wrapped = wrap(source);
    let opening = "return (function(KEYS, ARGV, ...)\n";
    // With a shebang, that line comes first and the script's line 1 is the empty line
    // after the header: the same count.
    wrapped
        .find(opening)
        .map_or(0, |at| wrapped[..at + opening.len()].matches('\n').count())
}

#[cfg(all(test, feature = "analysis"))]
mod tests {
    use super::*;
    use crate::lua;

    #[test]
    fn offset_finds_every_line_of_the_script_in_its_wrapped_form() {
        for source in [
            "#!lua flags=no-writes\nlocal x = 1\nreturn redis.call('GET', KEYS[1])",
            "local x = 1\nreturn redis.call('GET', KEYS[1])\n",
        ] {
            let wrapped = wrap(source);
            let lines: Vec<&str> = wrapped.lines().collect();
            let at = offset(source);
            for (n, line) in source.lines().enumerate().skip(1) {
                assert_eq!(lines[n + at], line, "{source:?} line {}", n + 1);
            }
        }
    }

    #[test]
    fn the_wrapped_script_parses_and_keeps_its_shebang_first() {
        let source = "#!lua flags=no-writes\nreturn redis.call('GET', KEYS[1])";
        let wrapped = wrap(source);
        assert!(wrapped.starts_with("#!lua flags=no-writes\n-- The script with SHA1 "));
        assert!(wrapped.contains(&crate::sha1_hex(source.as_bytes())));
        let analysis = lua::analyze(&wrapped);
        assert!(analysis.parsed, "{:?}", analysis.problems);
        assert!(analysis.problems.is_empty(), "{:?}", analysis.problems);
        assert!(analysis.read_only(), "the guard adds no write");
        assert_eq!(analysis.flags, ["no-writes"]);
    }

    #[test]
    fn a_script_without_shebang_is_the_body_of_the_function() {
        let wrapped = wrap("return ARGV[1]\n");
        assert!(wrapped.starts_with("-- The script with SHA1 "));
        assert!(
            wrapped
                .ends_with("return (function(KEYS, ARGV, ...)\nreturn ARGV[1]\nend)(keys, argv)\n")
        );
    }
}
