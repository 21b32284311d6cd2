//! Lua modules: a script's `--- @include "relative/path"` lines, expanded at build time
//! into the one body that is hashed and sent.
//!
//! The form is bull's and BullMQ's, so their scripts work unchanged: a line of two or
//! three dashes, `@include`, and a quoted path (`"..."` or `'...'`), relative to the
//! file that holds the line, with or without `.lua`. The line is replaced by the
//! included file, itself expanded; a file already included (anywhere in the script) is
//! included only once, and later lines naming it are dropped. An include that cannot be
//! read, or that would include a file inside itself (a cycle), is a problem at the
//! include line.
//!
//! [`expand`] is the one implementation: `#[lock_script]` and every `lockscript` command
//! call it, so the digest the macro embeds, the one `lockscript audit` prints and the one
//! `SHA1SUMS` lists are the same. [`Expanded::place`] maps a position in the expanded
//! body back to the file and line it came from.
//!
//! ```no_run
//! let script = lockscript_audit::include::expand("lua/addJob-6.lua".as_ref())?;
//! for part in &script.parts {
//!     println!("{}", part.path.display());
//! }
//! println!("{}", lockscript_audit::sha1_hex(script.text.as_bytes()));
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::lua::Position;

/// One file of a script: the script itself (the first part) or a file it includes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The file, joined from the script's path as given (relative stays relative).
    pub path: PathBuf,
    /// The part and 1-based line of the `@include` that brought it in; `None` for the
    /// script itself.
    pub included_at: Option<(usize, usize)>,
}

/// A position in one file of a script: what a problem in the expanded body points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// The file.
    pub path: PathBuf,
    /// Line and column in that file.
    pub at: Position,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.path.display(), self.at)
    }
}

/// An include that could not be followed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncludeProblem {
    /// The include line (column 1).
    pub place: Place,
    /// What went wrong, in one sentence.
    pub message: String,
}

/// A script with its includes expanded.
#[derive(Clone, Debug)]
pub struct Expanded {
    /// The body as text, for the checks: [`bytes`](Self::bytes) with any sequence that
    /// is not UTF-8 shown as U+FFFD (one character each, so lines and columns stay true).
    pub text: String,
    /// The body that is hashed and sent: the file byte for byte when it includes
    /// nothing. Redis takes any bytes; only what reads as text is checked.
    pub bytes: Vec<u8>,
    /// The script's own file first, then each included file in the order met.
    pub parts: Vec<Part>,
    /// Includes that could not be followed; the body leaves them out.
    pub problems: Vec<IncludeProblem>,
    /// For each line of `text`, the part and its 1-based line there.
    lines: Vec<(usize, usize)>,
}

impl Expanded {
    /// The script includes other files.
    pub fn has_includes(&self) -> bool {
        self.parts.len() > 1
    }

    /// The body is UTF-8 ([`text`](Self::text) is [`bytes`](Self::bytes) exactly).
    pub fn is_utf8(&self) -> bool {
        self.text.as_bytes() == self.bytes.as_slice()
    }

    /// Where the first byte that is not UTF-8 is, when there is one.
    pub fn first_invalid(&self) -> Option<Place> {
        let at = std::str::from_utf8(&self.bytes).err()?.valid_up_to();
        let before = &self.bytes[..at];
        // Lines as Lua counts them (and as `lines` maps them), a lone `\r` ending one.
        let ended = |l: &&[u8]| l.ends_with(b"\n") || l.ends_with(b"\r");
        let line = lua_lines(before).filter(ended).count() + 1;
        let open = lua_lines(before)
            .last()
            .filter(|l| !ended(l))
            .map_or(0, <[u8]>::len);
        let start = before.len() - open;
        let column = String::from_utf8_lossy(&before[start..]).chars().count() + 1;
        Some(self.place(Position { line, column }))
    }

    /// Where a position of the expanded body comes from: its file, line and column.
    ///
    /// ```no_run
    /// use lockscript_audit::lua::Position;
    ///
    /// let script = lockscript_audit::include::expand("lua/addJob-6.lua".as_ref())?;
    /// println!("{}", script.place(Position { line: 40, column: 3 }));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn place(&self, at: Position) -> Place {
        let (part, line) = self
            .lines
            .get(at.line.saturating_sub(1))
            .copied()
            // Past the last line (an error at the end of the input): the end of the script.
            .unwrap_or((0, at.line));
        Place {
            path: self.parts[part].path.clone(),
            at: Position {
                line,
                column: at.column,
            },
        }
    }

    /// The part and line within it of each line of [`text`](Self::text): what a server's
    /// `@user_script:LINE` is turned back into.
    pub fn line_map(&self) -> &[(usize, usize)] {
        &self.lines
    }
}

/// Reads `path` and expands its includes. Only a failure to read `path` itself is an
/// `Err`; an include that cannot be followed is one of [`Expanded::problems`].
pub fn expand(path: &Path) -> io::Result<Expanded> {
    let text = std::fs::read(path)?;
    let mut expanded = Expanded {
        text: String::new(),
        bytes: Vec::with_capacity(text.len()),
        parts: vec![Part {
            path: path.to_path_buf(),
            included_at: None,
        }],
        problems: Vec::new(),
        lines: Vec::new(),
    };
    let mut seen = vec![identity(path)];
    let mut stack = vec![identity(path)];
    splice(&text, 0, &mut expanded, &mut seen, &mut stack);
    expanded.text = String::from_utf8_lossy(&expanded.bytes).into_owned();
    Ok(expanded)
}

/// The same file under any spelling of its path, for "each file once" and cycles.
fn identity(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The path of an `@include` line, when `line` is one: two or three dashes, `@include`,
/// a quoted path, nothing after it but spaces or `;`.
fn include_path(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("--")?;
    let rest = rest.strip_prefix('-').unwrap_or(rest);
    let rest = rest.trim_start().strip_prefix("@include")?;
    let trimmed = rest.trim_start();
    if trimmed.len() == rest.len() {
        return None;
    }
    let quote = trimmed.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let inner = &trimmed[1..];
    let end = inner.find(quote)?;
    let after = inner[end + 1..].trim_end_matches([' ', '\t', ';', '\r', '\n']);
    (end > 0 && after.is_empty()).then(|| &inner[..end])
}

/// The lines of `text` as Lua 5.1 reads them, each with its end: `\n`, `\r\n`, or a `\r`
/// alone (which ends a line, and so a comment, for Lua: `local x = 1\r--- @include "a"`
/// is two lines, the second an include).
fn lua_lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = rest
            .iter()
            .enumerate()
            .find_map(|(i, &b)| match b {
                b'\r' if rest.get(i + 1) == Some(&b'\n') => Some(i + 2),
                b'\n' | b'\r' => Some(i + 1),
                _ => None,
            })
            .unwrap_or(rest.len());
        let (line, after) = rest.split_at(end);
        rest = after;
        Some(line)
    })
}

/// Appends `text` (the body of part `part`) to the expansion, following its includes.
fn splice(
    text: &[u8],
    part: usize,
    out: &mut Expanded,
    seen: &mut Vec<PathBuf>,
    stack: &mut Vec<PathBuf>,
) {
    for (n, line) in lua_lines(text).enumerate() {
        let number = n + 1;
        let shown = String::from_utf8_lossy(line);
        let Some(written) = include_path(&shown) else {
            out.bytes.extend_from_slice(line);
            out.lines.push((part, number));
            continue;
        };
        let including = out.parts[part].path.clone();
        let place = Place {
            path: including.clone(),
            at: Position {
                line: number,
                column: 1,
            },
        };
        let mut target = including
            .parent()
            .unwrap_or_else(|| Path::new(""))
            .join(written);
        if target.extension().is_none() {
            target.set_extension("lua");
        }
        let id = identity(&target);
        if stack.contains(&id) {
            let mut chain: Vec<String> = stack
                .iter()
                .skip_while(|p| **p != id)
                .map(|p| file_name(p))
                .collect();
            chain.push(file_name(&id));
            out.problems.push(IncludeProblem {
                place,
                message: format!(
                    "`@include \"{written}\"` makes a cycle ({}): a file cannot include itself, even through others",
                    chain.join(" -> ")
                ),
            });
            continue;
        }
        if seen.contains(&id) {
            // Each file once, as bull's and BullMQ's loaders do.
            continue;
        }
        let body = match std::fs::read(&target) {
            Ok(body) => body,
            Err(e) => {
                let reason = match e.kind() {
                    io::ErrorKind::NotFound => "no such file".to_owned(),
                    io::ErrorKind::IsADirectory => "it is a directory".to_owned(),
                    _ => e.to_string(),
                };
                let mut looked = PathBuf::from(written);
                if looked.extension().is_none() {
                    looked.set_extension("lua");
                }
                out.problems.push(IncludeProblem {
                    place,
                    message: format!(
                        "cannot include \"{written}\": {reason} ({} beside this file)",
                        looked.display()
                    ),
                });
                continue;
            }
        };
        if body.starts_with(b"#!") {
            out.problems.push(IncludeProblem {
                place,
                message: format!(
                    "\"{written}\" starts with a `#!` shebang, which only the first line of \
                     the script itself may hold"
                ),
            });
            continue;
        }
        seen.push(id.clone());
        out.parts.push(Part {
            path: target,
            included_at: Some((part, number)),
        });
        let child = out.parts.len() - 1;
        stack.push(id);
        splice(&body, child, out, seen, stack);
        stack.pop();
        if !out.bytes.is_empty() && !out.bytes.ends_with(b"\n") {
            out.bytes.push(b'\n');
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |f| f.to_string_lossy().into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_carriage_return_ends_a_line_as_lua_reads_it() {
        let lines: Vec<&[u8]> = lua_lines(b"a\rb\r\nc\nd").collect();
        assert_eq!(lines, [&b"a\r"[..], b"b\r\n", b"c\n", b"d"]);
        let dir = Dir::with(&[
            (
                "x.lua",
                "local parts = {}\r--- @include \"inc\"\nreturn parts\n",
            ),
            ("inc.lua", "parts = 1\n"),
        ]);
        let e = expand(&dir.0.join("x.lua")).unwrap();
        assert!(e.problems.is_empty(), "{:?}", e.problems);
        assert_eq!(e.text, "local parts = {}\rparts = 1\nreturn parts\n");
    }

    struct Dir(PathBuf);

    impl Dir {
        fn with(files: &[(&str, &str)]) -> Self {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("lock-include-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            for (name, text) in files {
                let path = dir.join(name);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, text).unwrap();
            }
            Self(dir)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_include_line_forms_of_bull_and_bullmq_are_read() {
        assert_eq!(
            include_path("--- @include \"includes/a\"\n"),
            Some("includes/a")
        );
        assert_eq!(include_path("-- @include 'b.lua';\r\n"), Some("b.lua"));
        assert_eq!(include_path("  ---@include \"c\""), Some("c"));
        assert_eq!(include_path("--- @includes \"c\""), None);
        assert_eq!(include_path("--- @include \"c\" and more"), None);
        assert_eq!(include_path("local x = 1 --- @include \"c\""), None);
    }

    #[test]
    fn includes_are_expanded_once_relative_to_the_including_file() {
        let dir = Dir::with(&[
            (
                "main.lua",
                "local rcall = redis.call\n--- @include \"includes/a\"\n--- @include \"includes/b.lua\"\nreturn a() + b()\n",
            ),
            (
                "includes/a.lua",
                "--- @include \"b\"\nlocal function a() return b() end",
            ),
            ("includes/b.lua", "local function b() return 1 end\n"),
        ]);
        let e = expand(&dir.0.join("main.lua")).unwrap();
        assert!(e.problems.is_empty(), "{:?}", e.problems);
        assert_eq!(
            e.text,
            "local rcall = redis.call\nlocal function b() return 1 end\n\
             local function a() return b() end\nreturn a() + b()\n"
        );
        assert_eq!(e.parts.len(), 3);
        assert_eq!(e.parts[1].path, dir.0.join("includes/a.lua"));
        assert_eq!(e.parts[2].included_at, Some((1, 1)));
        let place = e.place(Position { line: 3, column: 7 });
        assert_eq!(place.path, dir.0.join("includes/a.lua"));
        assert_eq!(place.at, Position { line: 2, column: 7 });
        assert_eq!(e.place(Position { line: 4, column: 1 }).at.line, 4);
    }

    #[test]
    fn a_missing_file_and_a_cycle_are_problems_at_the_include_line() {
        let dir = Dir::with(&[
            (
                "main.lua",
                "return 1\n--- @include \"nope\"\n--- @include \"a\"\n",
            ),
            ("a.lua", "--- @include \"main\"\n"),
        ]);
        let e = expand(&dir.0.join("main.lua")).unwrap();
        let shown: Vec<String> = e
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.place, p.message))
            .collect();
        assert_eq!(shown.len(), 2, "{shown:?}");
        assert!(
            shown[0].starts_with(&format!(
                "{}:2:1: cannot include \"nope\"",
                dir.0.join("main.lua").display()
            )),
            "{shown:?}"
        );
        assert!(
            shown[0].ends_with(": no such file (nope.lua beside this file)"),
            "{shown:?}"
        );
        assert!(
            shown[1].starts_with(&format!("{}:1:1: ", dir.0.join("a.lua").display())),
            "{shown:?}"
        );
        assert!(
            shown[1].contains("cycle (main.lua -> a.lua -> main.lua)"),
            "{shown:?}"
        );
    }

    #[test]
    fn a_script_without_includes_is_its_file_byte_for_byte() {
        let dir = Dir::with(&[("x.lua", "#!lua flags=no-writes\r\nreturn 1")]);
        let e = expand(&dir.0.join("x.lua")).unwrap();
        assert_eq!(e.text, "#!lua flags=no-writes\r\nreturn 1");
        assert!(!e.has_includes());
    }

    #[test]
    fn a_file_that_is_not_utf8_is_kept_byte_for_byte_and_read_as_text_around_it() {
        let dir = Dir::with(&[]);
        std::fs::create_dir_all(&dir.0).unwrap();
        let raw: &[u8] = b"local s = '\xff\xfe'\nreturn s .. 'x'\n";
        std::fs::write(dir.0.join("x.lua"), raw).unwrap();
        let e = expand(&dir.0.join("x.lua")).unwrap();
        assert_eq!(e.bytes, raw);
        assert!(!e.is_utf8());
        assert_eq!(e.text, "local s = '\u{fffd}\u{fffd}'\nreturn s .. 'x'\n");
        assert_eq!(
            e.first_invalid().unwrap().at,
            Position {
                line: 1,
                column: 12
            }
        );
    }
}
