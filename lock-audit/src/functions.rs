//! Redis Functions from the same files: every script as one function of one library,
//! written so that a reviewer can match each function to its file.
//!
//! The lock runtime builds the library from the scripts registered in the binary
//! (`lockscript::functions_library()`), the `lockscript functions` command from the files
//! of a directory; both call [`library`], so the same scripts always give the same
//! library, byte for byte.
//!
//! - The library is named `lockscript_` and 16 hex digits of the SHA1 of the scripts'
//!   SHA1s (sorted, with the format's version): a different set of scripts is a
//!   different library, and two binaries with the same scripts share one.
//! - Each script is the function `<library>_<the file's SHA1>`. Function names are global
//!   on a server, so the library's name is part of them: two libraries that hold the
//!   same file never collide.
//! - A function's body is the file byte for byte, between a line that opens it and the
//!   line `end}`; a `#!lua flags=...` first line becomes a Lua comment (its flags are
//!   the function's flags). [`split`] takes a library apart again, and `lockscript
//!   verify` checks that each body still hashes to the digest in its function's name.
//! - The library is bytes, as the scripts are: Redis runs any bytes, and a script file
//!   that is not UTF-8 is in it as it is (`FUNCTION LOAD` takes it so; its text,
//!   [`Library::text`], is only for reading).
//! - A function runs as its script runs by `EVAL`: a script without a shebang may touch
//!   keys of other slots on its node, so its function is registered with the flag
//!   `allow-cross-slot-keys`; a script with a shebang has exactly its own flags.
//!
//! ```
//! use lockscript_audit::functions::{library, Source};
//!
//! let lib = library(&[Source { name: "get", source: b"return redis.call('GET', KEYS[1])\n" }]);
//! assert!(lib.code.starts_with(format!("#!lua name={}\n", lib.name).as_bytes()));
//! assert_eq!(lib.functions.len(), 1);
//! assert!(lib.functions[0].function.starts_with(&lib.name));
//! ```

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::sha1_hex;

/// The version of the library's layout; it is part of the library's digest, so a
/// library written by another layout never shares a name with this one (a server that
/// holds a library of version 1, whose functions of scripts without a shebang lacked
/// `allow-cross-slot-keys`, gets this one beside it, not mistaken for it).
pub const FORMAT: &str = "lockscript-functions-2";

/// The prefix of every library this crate writes.
pub const PREFIX: &str = "lockscript_";

/// The line that ends each function's body.
const END: &str = "end}";

/// The line that ends the body of a file without a final newline (the newline before it
/// is the library's, not the file's).
const END_NO_NEWLINE: &str = "end} -- (the file has no final newline)";

/// The flag a function of a script without a shebang gets: such a script may touch keys
/// of other slots on its node when run by `EVAL`, and a function without it may not.
pub const CROSS_SLOT: &str = "allow-cross-slot-keys";

/// One script to put in the library.
#[derive(Clone, Copy, Debug)]
pub struct Source<'a> {
    /// Its name, for the comment above its function (the file stem, or `x+guarded`).
    pub name: &'a str,
    /// The script, byte for byte: what the server runs, and what its digest is of. A
    /// script file that is not UTF-8 is given as it is.
    pub source: &'a [u8],
}

/// One function of a [`Library`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// The script's name.
    pub name: String,
    /// The SHA1 of the script's bytes (the digest `SCRIPT LOAD` answers).
    pub sha1: String,
    /// The function's name on the server: `<library>_<sha1>`.
    pub function: String,
    /// The flags it is registered with: those of its `#!lua flags=` line (`no-writes`
    /// makes it an `FCALL_RO` function), or [`CROSS_SLOT`] for a script without a
    /// shebang.
    pub flags: Vec<String>,
    /// The line of the library where the script's first line is (1-based): a server error
    /// at `@user_function:N` is at line `N - first_line + 1` of the file.
    pub first_line: usize,
}

/// A generated library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Library {
    /// `lockscript_` and 16 hex digits.
    pub name: String,
    /// What `FUNCTION LOAD` takes, byte for byte: UTF-8 when every script is.
    pub code: Vec<u8>,
    /// One per distinct script, sorted by digest.
    pub functions: Vec<Function>,
}

impl Library {
    /// The code as text, to read or print: [`code`](Self::code) with U+FFFD in place of
    /// what is not UTF-8 (borrowed when all of it is). Send `code`, never this.
    ///
    /// ```
    /// # use lockscript_audit::functions::{library, Source};
    /// let lib = library(&[Source { name: "latin1", source: b"return 'caf\xe9'" }]);
    /// assert!(lib.text().contains("return 'caf\u{fffd}'"));
    /// assert!(lib.code.windows(4).any(|w| w == b"caf\xe9"));
    /// ```
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.code)
    }

    /// The function that runs the script with digest `sha1`.
    ///
    /// ```
    /// # use lockscript_audit::functions::{library, Source};
    /// let lib = library(&[Source { name: "one", source: b"return 1" }]);
    /// let sha1 = lockscript_audit::sha1_hex(b"return 1");
    /// assert_eq!(lib.function(&sha1).unwrap().name, "one");
    /// ```
    pub fn function(&self, sha1: &str) -> Option<&Function> {
        self.functions
            .binary_search_by(|f| f.sha1.as_str().cmp(sha1))
            .ok()
            .map(|i| &self.functions[i])
    }
}

/// The name of the library that holds exactly the scripts with these digests.
///
/// ```
/// let a = lockscript_audit::functions::library_name(["b", "a"]);
/// assert_eq!(a, lockscript_audit::functions::library_name(["a", "b", "a"]));
/// assert_eq!(a.len(), "lockscript_".len() + 16);
/// ```
pub fn library_name<'a>(digests: impl IntoIterator<Item = &'a str>) -> String {
    let mut digests: Vec<&str> = digests.into_iter().collect();
    digests.sort_unstable();
    digests.dedup();
    let mut text = String::from(FORMAT);
    for digest in digests {
        text.push('\n');
        text.push_str(digest);
    }
    format!("{PREFIX}{}", &sha1_hex(text.as_bytes())[..16])
}

/// The flags of a `#!lua flags=a,b` first line; `None` without a shebang.
fn shebang_flags(source: &[u8]) -> Option<Vec<String>> {
    let rest = source.strip_prefix(b"#!")?;
    let line = rest.split(|&b| b == b'\n').next().unwrap_or_default();
    Some(
        String::from_utf8_lossy(line)
            .split_whitespace()
            .filter_map(|word| word.strip_prefix("flags="))
            .flat_map(|flags| flags.split(','))
            .filter(|flag| !flag.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

/// The library holding `scripts` (the same bytes twice make one function).
///
/// A script without a shebang becomes a function with the one flag
/// `allow-cross-slot-keys` ([`CROSS_SLOT`]), so that on a Cluster it may touch keys of
/// other slots on its node, as the script may by `EVAL`. One difference stays: the
/// server runs such a function as it runs a `#!lua` script by `EVAL`, refusing the
/// whole call up front when it is out of memory (a script without a shebang is refused
/// only at its first write that may grow memory). Add `#!lua flags=allow-oom` to a
/// script that must run then.
///
/// Valkey (9.1) compiles a library only up to its first NUL byte, so a library with a
/// script that holds one does not load there (Redis loads it); such a script runs there
/// by `EVAL`.
pub fn library(scripts: &[Source<'_>]) -> Library {
    let mut entries: Vec<(String, &Source<'_>)> =
        scripts.iter().map(|s| (sha1_hex(s.source), s)).collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.name.cmp(b.1.name)));
    entries.dedup_by(|a, b| a.0 == b.0);
    let name = library_name(entries.iter().map(|(sha1, _)| sha1.as_str()));

    let mut head = String::new();
    let _ = write!(
        head,
        "#!lua name={name}\n\
         -- Generated by lockscript ({FORMAT}) from {count} script(s): `lockscript functions`\n\
         -- writes it from the files, `lockscript verify --url ...` checks a server's copy.\n\
         -- Each function is one file, byte for byte, between the line that registers it and\n\
         -- the line `{END}`; its name ends with the file's SHA1. A `#!lua flags=...` first\n\
         -- line is turned into a comment, and its flags are the function's; a script\n\
         -- without one gets the flag `{CROSS_SLOT}`, as EVAL runs it.\n",
        count = entries.len(),
    );
    let mut code = head.into_bytes();
    let mut functions = Vec::with_capacity(entries.len());
    for (sha1, script) in entries {
        let flags = shebang_flags(script.source).unwrap_or_else(|| vec![CROSS_SLOT.to_owned()]);
        let function = format!("{name}_{sha1}");
        let opening = format!(
            "\n-- {} (SHA1 {sha1})\nredis.register_function{{function_name='{function}', flags={{{}}}, callback=function(KEYS, ARGV, ...)\n",
            script.name.replace('\n', " "),
            flags
                .iter()
                .map(|f| format!("'{f}'"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        code.extend_from_slice(opening.as_bytes());
        // The code ends with a newline: its pieces between newlines are one more than
        // its lines, which is the number of the line that starts next.
        let first_line = code.split(|&b| b == b'\n').count();
        if script.source.starts_with(b"#!") {
            code.extend_from_slice(b"--");
        }
        code.extend_from_slice(script.source);
        if script.source.ends_with(b"\n") {
            code.extend_from_slice(END.as_bytes());
        } else {
            code.push(b'\n');
            code.extend_from_slice(END_NO_NEWLINE.as_bytes());
        }
        code.push(b'\n');
        functions.push(Function {
            name: script.name.to_owned(),
            sha1,
            function,
            flags,
            first_line,
        });
    }
    Library {
        name,
        code,
        functions,
    }
}

/// One function as found in a library's code by [`split`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The function's name.
    pub function: String,
    /// The script as the library holds it, byte for byte: the body, with a shebang
    /// turned back into the first line when the body starts with `--#!`.
    pub source: Vec<u8>,
}

/// Takes a library written by [`library`] apart: its functions and their scripts, byte
/// for byte, to check each against its digest. Code of any other shape gives fewer (or no) entries.
///
/// ```
/// # use lockscript_audit::functions::{library, split, Source};
/// let lib = library(&[Source { name: "ro", source: b"#!lua flags=no-writes\nreturn 1\n" }]);
/// let found = split(&lib.code);
/// assert_eq!(found[0].source, b"#!lua flags=no-writes\nreturn 1\n");
/// assert!(found[0].function.ends_with(&lockscript_audit::sha1_hex(&found[0].source)));
/// ```
pub fn split(code: &[u8]) -> Vec<Found> {
    const OPEN: &[u8] = b"redis.register_function{function_name='";
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = find(rest, OPEN) {
        let after = &rest[at + OPEN.len()..];
        let Some(quote) = after.iter().position(|&b| b == b'\'') else {
            break;
        };
        let (function, line_rest) = (&after[..quote], &after[quote + 1..]);
        let Some(newline) = line_rest.iter().position(|&b| b == b'\n') else {
            break;
        };
        let body = &line_rest[newline + 1..];
        // The body ends at the first line that closes a function.
        let mut end = None;
        let mut offset: usize = 0;
        for line in body.split_inclusive(|&b| b == b'\n') {
            let line_text = line.strip_suffix(b"\n").unwrap_or(line);
            if line_text == END.as_bytes() {
                end = Some((offset, offset));
            } else if line_text == END_NO_NEWLINE.as_bytes() {
                end = Some((offset.saturating_sub(1), offset));
            }
            if end.is_some() {
                break;
            }
            offset += line.len();
        }
        let Some((end, next)) = end else { break };
        let mut source = body[..end].to_vec();
        if source.starts_with(b"--#!") {
            source.drain(..2);
        }
        found.push(Found {
            function: String::from_utf8_lossy(function).into_owned(),
            source,
        });
        rest = &body[next..];
    }
    found
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(all(test, feature = "analysis"))]
mod tests {
    use super::*;
    use crate::lua;

    #[test]
    fn each_function_is_its_file_and_the_library_parses() {
        let scripts = [
            Source {
                name: "ro",
                source: b"#!lua flags=no-writes,allow-stale\nreturn redis.call('GET', KEYS[1])",
            },
            Source {
                name: "del",
                source: b"if redis.call('GET', KEYS[1]) == ARGV[1] then\n  return redis.call('DEL', KEYS[1])\nend\nreturn 0\n",
            },
            Source {
                name: "del-again",
                source: b"if redis.call('GET', KEYS[1]) == ARGV[1] then\n  return redis.call('DEL', KEYS[1])\nend\nreturn 0\n",
            },
        ];
        let lib = library(&scripts);
        assert_eq!(lib.functions.len(), 2, "the same bytes make one function");
        let analysis = lua::analyze(&lib.text());
        assert!(analysis.parsed, "{:?}", analysis.problems);
        let ro = lib.function(&sha1_hex(scripts[0].source)).unwrap();
        assert_eq!(ro.flags, ["no-writes", "allow-stale"]);
        assert!(lib.text().contains("flags={'no-writes', 'allow-stale'}"));
        // Without a shebang: the one flag that lets it touch other slots of its node.
        let del = lib.function(&sha1_hex(scripts[1].source)).unwrap();
        assert_eq!(del.flags, [CROSS_SLOT]);
        assert!(lib.text().contains("flags={'allow-cross-slot-keys'}"));
        // The first line of each script is where the library says.
        for f in &lib.functions {
            let text = lib.text();
            let line = text.lines().nth(f.first_line - 1).unwrap();
            assert!(
                line.starts_with("--#!lua") || line.starts_with("if redis"),
                "{line}"
            );
        }
        // Split gives each file back byte for byte, with or without its final newline.
        let found = split(&lib.code);
        assert_eq!(found.len(), 2);
        for (f, expected) in found.iter().zip(&lib.functions) {
            assert_eq!(f.function, expected.function);
            assert_eq!(sha1_hex(&f.source), expected.sha1, "{f:?}");
        }
        assert_eq!(
            found
                .iter()
                .find(|f| f.source.starts_with(b"#!"))
                .unwrap()
                .source,
            scripts[0].source
        );
    }

    #[test]
    fn a_script_that_is_not_utf8_is_in_the_library_byte_for_byte() {
        let latin1: &[u8] = b"-- caf\xe9\r\nreturn 'caf\xe9'\r\n";
        let crlf_bom: &[u8] = b"#!lua flags=no-writes\n-- \xef\xbb\xbf\r\nreturn 1";
        let lib = library(&[
            Source {
                name: "latin1",
                source: latin1,
            },
            Source {
                name: "bom",
                source: crlf_bom,
            },
        ]);
        assert!(lib.code.windows(latin1.len()).any(|w| w == latin1));
        assert!(lib.function(&sha1_hex(latin1)).is_some());
        let found = split(&lib.code);
        assert_eq!(found.len(), 2);
        for f in &found {
            assert!(f.function.ends_with(&sha1_hex(&f.source)), "{f:?}");
        }
        assert!(found.iter().any(|f| f.source == latin1));
        assert!(found.iter().any(|f| f.source == crlf_bom));
        assert_eq!(
            lib.function(&sha1_hex(crlf_bom)).unwrap().flags,
            ["no-writes"]
        );
        // The text is for reading only: it is not what is sent.
        assert_ne!(lib.text().as_bytes(), lib.code.as_slice());
        // Where each script starts: lines as the server counts them.
        for f in &lib.functions {
            let line = lib
                .code
                .split(|&b| b == b'\n')
                .nth(f.first_line - 1)
                .unwrap();
            assert!(line.starts_with(b"-- caf") || line.starts_with(b"--#!lua"));
        }
    }

    #[test]
    fn the_name_follows_the_set_of_digests() {
        let a = library(&[Source {
            name: "a",
            source: b"return 1",
        }]);
        let b = library(&[Source {
            name: "renamed",
            source: b"return 1",
        }]);
        let c = library(&[Source {
            name: "a",
            source: b"return 2",
        }]);
        assert_eq!(a.name, b.name);
        assert_ne!(a.name, c.name);
        assert_eq!(
            a.text().replace("renamed", "a"),
            b.text().replace("renamed", "a")
        );
    }

    #[test]
    fn a_tampered_body_no_longer_matches_its_name() {
        let lib = library(&[Source {
            name: "a",
            source: b"return 1\n",
        }]);
        let tampered = lib.text().replace("return 1\n", "return 2\n");
        let found = split(tampered.as_bytes());
        assert!(!found[0].function.ends_with(&sha1_hex(&found[0].source)));
        let found = split(&lib.code);
        assert!(found[0].function.ends_with(&sha1_hex(&found[0].source)));
    }
}
