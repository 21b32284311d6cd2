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
//!
//! ```
//! use lockscript_audit::functions::{library, Source};
//!
//! let lib = library(&[Source { name: "get", source: "return redis.call('GET', KEYS[1])\n" }]);
//! assert!(lib.code.starts_with(&format!("#!lua name={}\n", lib.name)));
//! assert_eq!(lib.functions.len(), 1);
//! assert!(lib.functions[0].function.starts_with(&lib.name));
//! ```

use std::fmt::Write as _;

use crate::sha1_hex;

/// The version of the library's layout; it is part of the library's digest, so a
/// library written by another layout never shares a name with this one.
pub const FORMAT: &str = "lockscript-functions-1";

/// The prefix of every library this crate writes.
pub const PREFIX: &str = "lockscript_";

/// The line that ends each function's body.
const END: &str = "end}";

/// The line that ends the body of a file without a final newline (the newline before it
/// is the library's, not the file's).
const END_NO_NEWLINE: &str = "end} -- (the file has no final newline)";

/// One script to put in the library.
#[derive(Clone, Copy, Debug)]
pub struct Source<'a> {
    /// Its name, for the comment above its function (the file stem, or `x+guarded`).
    pub name: &'a str,
    /// The script, byte for byte.
    pub source: &'a str,
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
    /// The flags of its `#!lua flags=` line (`no-writes` makes it an `FCALL_RO` function).
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
    /// What `FUNCTION LOAD` takes.
    pub code: String,
    /// One per distinct script, sorted by digest.
    pub functions: Vec<Function>,
}

impl Library {
    /// The function that runs the script with digest `sha1`.
    ///
    /// ```
    /// # use lockscript_audit::functions::{library, Source};
    /// let lib = library(&[Source { name: "one", source: "return 1" }]);
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
fn shebang_flags(source: &str) -> Option<Vec<String>> {
    let first = source.lines().next()?;
    let rest = first.strip_prefix("#!")?;
    Some(
        rest.split_whitespace()
            .filter_map(|word| word.strip_prefix("flags="))
            .flat_map(|flags| flags.split(','))
            .filter(|flag| !flag.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

/// The library holding `scripts` (the same bytes twice make one function).
///
/// A script without a shebang becomes a function without flags, which the server runs as
/// it runs a `#!lua` script by EVAL: it refuses the whole call up front when it is out of
/// memory (a script without a shebang is refused only at its first write that may grow
/// memory). Add `#!lua flags=allow-oom` to a script that must run then.
pub fn library(scripts: &[Source<'_>]) -> Library {
    let mut entries: Vec<(String, &Source<'_>)> = scripts
        .iter()
        .map(|s| (sha1_hex(s.source.as_bytes()), s))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.name.cmp(b.1.name)));
    entries.dedup_by(|a, b| a.0 == b.0);
    let name = library_name(entries.iter().map(|(sha1, _)| sha1.as_str()));

    let mut code = String::new();
    let _ = write!(
        code,
        "#!lua name={name}\n\
         -- Generated by lockscript ({FORMAT}) from {count} script(s): `lockscript functions`\n\
         -- writes it from the files, `lockscript verify --url ...` checks a server's copy.\n\
         -- Each function is one file, byte for byte, between the line that registers it and\n\
         -- the line `{END}`; its name ends with the file's SHA1. A `#!lua flags=...` first\n\
         -- line is turned into a comment, and its flags are the function's.\n",
        count = entries.len(),
    );
    let mut functions = Vec::with_capacity(entries.len());
    for (sha1, script) in entries {
        let flags = shebang_flags(script.source).unwrap_or_default();
        let function = format!("{name}_{sha1}");
        let _ = write!(
            code,
            "\n-- {} (SHA1 {sha1})\nredis.register_function{{function_name='{function}', flags={{{}}}, callback=function(KEYS, ARGV, ...)\n",
            script.name.replace('\n', " "),
            flags
                .iter()
                .map(|f| format!("'{f}'"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        let first_line = code.lines().count() + 1;
        if script.source.starts_with("#!") {
            code.push_str("--");
        }
        code.push_str(script.source);
        if script.source.ends_with('\n') {
            code.push_str(END);
        } else {
            code.push('\n');
            code.push_str(END_NO_NEWLINE);
        }
        code.push('\n');
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
    /// The script as the library holds it: the body, with a shebang turned back into
    /// the first line when the body starts with `--#!`.
    pub source: String,
}

/// Takes a library written by [`library`] apart: its functions and their scripts, byte
/// for byte, to check each against its digest. Code of any other shape gives fewer (or no) entries.
///
/// ```
/// # use lockscript_audit::functions::{library, split, Source};
/// let lib = library(&[Source { name: "ro", source: "#!lua flags=no-writes\nreturn 1\n" }]);
/// let found = split(&lib.code);
/// assert_eq!(found[0].source, "#!lua flags=no-writes\nreturn 1\n");
/// assert!(found[0].function.ends_with(&lockscript_audit::sha1_hex(found[0].source.as_bytes())));
/// ```
pub fn split(code: &str) -> Vec<Found> {
    const OPEN: &str = "redis.register_function{function_name='";
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(OPEN) {
        let after = &rest[at + OPEN.len()..];
        let Some((function, line_rest)) = after.split_once('\'') else {
            break;
        };
        let Some((_, body)) = line_rest.split_once('\n') else {
            break;
        };
        // The body ends at the first line that closes a function.
        let mut end = None;
        let mut offset: usize = 0;
        for line in body.split_inclusive('\n') {
            match line.trim_end_matches('\n') {
                END => end = Some((offset, offset)),
                END_NO_NEWLINE => end = Some((offset.saturating_sub(1), offset)),
                _ => {}
            }
            if end.is_some() {
                break;
            }
            offset += line.len();
        }
        let Some((end, next)) = end else { break };
        let mut source = body[..end].to_owned();
        if let Some(stripped) = source.strip_prefix("--#!") {
            source = format!("#!{stripped}");
        }
        found.push(Found {
            function: function.to_owned(),
            source,
        });
        rest = &body[next..];
    }
    found
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
                source: "#!lua flags=no-writes,allow-stale\nreturn redis.call('GET', KEYS[1])",
            },
            Source {
                name: "del",
                source: "if redis.call('GET', KEYS[1]) == ARGV[1] then\n  return redis.call('DEL', KEYS[1])\nend\nreturn 0\n",
            },
            Source {
                name: "del-again",
                source: "if redis.call('GET', KEYS[1]) == ARGV[1] then\n  return redis.call('DEL', KEYS[1])\nend\nreturn 0\n",
            },
        ];
        let lib = library(&scripts);
        assert_eq!(lib.functions.len(), 2, "the same bytes make one function");
        let analysis = lua::analyze(&lib.code);
        assert!(analysis.parsed, "{:?}", analysis.problems);
        let ro = lib
            .function(&sha1_hex(scripts[0].source.as_bytes()))
            .unwrap();
        assert_eq!(ro.flags, ["no-writes", "allow-stale"]);
        assert!(lib.code.contains("flags={'no-writes', 'allow-stale'}"));
        // The first line of each script is where the library says.
        for f in &lib.functions {
            let line = lib.code.lines().nth(f.first_line - 1).unwrap();
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
            assert_eq!(sha1_hex(f.source.as_bytes()), expected.sha1, "{f:?}");
        }
        assert_eq!(
            found
                .iter()
                .find(|f| f.source.starts_with("#!"))
                .unwrap()
                .source,
            scripts[0].source
        );
    }

    #[test]
    fn the_name_follows_the_set_of_digests() {
        let a = library(&[Source {
            name: "a",
            source: "return 1",
        }]);
        let b = library(&[Source {
            name: "renamed",
            source: "return 1",
        }]);
        let c = library(&[Source {
            name: "a",
            source: "return 2",
        }]);
        assert_eq!(a.name, b.name);
        assert_ne!(a.name, c.name);
        assert_eq!(
            a.code.replace("renamed", "a"),
            b.code.replace("renamed", "a")
        );
    }

    #[test]
    fn a_tampered_body_no_longer_matches_its_name() {
        let lib = library(&[Source {
            name: "a",
            source: "return 1\n",
        }]);
        let tampered = lib.code.replace("return 1\n", "return 2\n");
        let found = split(&tampered);
        assert!(
            !found[0]
                .function
                .ends_with(&sha1_hex(found[0].source.as_bytes()))
        );
        let found = split(&lib.code);
        assert!(
            found[0]
                .function
                .ends_with(&sha1_hex(found[0].source.as_bytes()))
        );
    }
}
