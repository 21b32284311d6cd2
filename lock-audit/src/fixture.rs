//! Fixture files: the data a script test starts from, as redis-cli commands. One command
//! per line, words separated by blanks, `"double"` or `'single'` quotes around a word with
//! blanks, `\n`, `\t`, `\\`, `\"` and `\xHH` inside double quotes (as `redis-cli` reads
//! them), `#` comments and blank lines ignored.
//!
//! [`parse`] reads a file; [`check`] also holds each command against the command table
//! ([`commands`]): its name, its subcommand and its number of arguments.
//! `#[lockscript_test::test(fixtures("..."))]` runs `check` at compile time, so a typo in a
//! fixture fails the build at the attribute, with the file and line.
//!
//! ```text
//! # orders of customer 7
//! HSET order:{7}:1 status paid total 120
//! SET "customer:{7}:name" "Ada Lovelace"
//! RPUSH queue:{7} 'job one' "job\ttwo"
//! ```

use crate::commands;
use crate::problem::closest;

/// One command of a file: its words and the line it came from (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The line number in the file.
    pub number: usize,
    /// The command name and its arguments, unquoted.
    pub words: Vec<Vec<u8>>,
}

/// Parses `text`; an error names the line and what is wrong with it.
///
/// ```
/// let lines = lockscript_audit::fixture::parse("SET k 'a b'\n# note\nDEL k").unwrap();
/// assert_eq!(lines.len(), 2);
/// assert_eq!(lines[0].words, vec![b"SET".to_vec(), b"k".to_vec(), b"a b".to_vec()]);
/// assert_eq!(lines[1].number, 3);
/// ```
pub fn parse(text: &str) -> Result<Vec<Line>, String> {
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        let words = split(line).map_err(|e| format!("line {number}: {e}"))?;
        if !words.is_empty() {
            lines.push(Line { number, words });
        }
    }
    Ok(lines)
}

/// Parses `text` and checks every command against the command table: a name no server
/// of the matrix has (module commands, with a dot, are not checked), a subcommand its
/// container lacks, or a number of arguments outside the command's arity. Every problem
/// is reported, each with its 1-based line; a line that does not parse is one problem.
///
/// ```
/// let problems = lockscript_audit::fixture::check("SET a 1\nHSETT h f v\nGET a b\n");
/// assert_eq!(problems[0].line, 2);
/// assert_eq!(problems[0].message, "`HSETT` is not a Redis command; did you mean `HSET`?");
/// assert_eq!(problems[1].line, 3);
/// assert!(problems[1].message.starts_with("`GET` takes exactly 1 argument, but this line passes 2"));
/// ```
pub fn check(text: &str) -> Vec<LineProblem> {
    let mut problems = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        match split(line) {
            Err(e) => problems.push(LineProblem {
                line: number,
                message: e,
            }),
            Ok(words) if words.is_empty() => {}
            Ok(words) => {
                if let Some(message) = command_problem(&words) {
                    problems.push(LineProblem {
                        line: number,
                        message,
                    });
                }
            }
        }
    }
    problems
}

/// A problem on one line of a fixture file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineProblem {
    /// The 1-based line.
    pub line: usize,
    /// What is wrong, in one sentence.
    pub message: String,
}

/// What the server would refuse in one command (its words, the name first).
fn command_problem(words: &[Vec<u8>]) -> Option<String> {
    let name = String::from_utf8_lossy(&words[0]).to_ascii_uppercase();
    if name.contains('.') {
        // Module commands (`JSON.SET`) are outside the table.
        return None;
    }
    let Some(command) = commands::find(&name) else {
        let hint = closest(
            &name,
            commands::COMMANDS
                .iter()
                .map(|c| c.name)
                .filter(|n| !n.contains('|')),
        )
        .map(|near| format!("; did you mean `{near}`?"))
        .unwrap_or_default();
        return Some(format!("`{name}` is not a Redis command{hint}"));
    };
    let mut command = command;
    let mut shown = name.clone();
    if command.subcommands().next().is_some() {
        let Some(sub) = words.get(1) else {
            return Some(format!(
                "`{name}` needs a subcommand (it has {})",
                subcommand_names(command).join(", ")
            ));
        };
        let sub = String::from_utf8_lossy(sub).to_ascii_uppercase();
        let Some(found) = commands::find(&format!("{name}|{sub}")) else {
            let names = subcommand_names(command);
            let hint = closest(&sub, names.iter().copied()).map_or_else(
                || format!(" (it has {})", names.join(", ")),
                |near| format!("; did you mean `{name} {near}`?"),
            );
            return Some(format!(
                "`{name} {sub}` is not a Redis command: `{name}` has no subcommand `{sub}`{hint}"
            ));
        };
        command = found;
        shown = format!("{name} {sub}");
    }
    if command.accepts(words.len(), false) {
        return None;
    }
    // A reader counts the arguments after the name (and the subcommand).
    let before = shown.split(' ').count();
    let passed = words.len().saturating_sub(before);
    let takes = if before == 1 {
        command.arity_text()
    } else {
        sub_arity_text(command.arity)
    };
    Some(format!(
        "`{shown}` takes {takes}, but this line passes {passed}: Redis refuses it \
         (\"wrong number of arguments\")"
    ))
}

/// The names of a container command's subcommands (`ENCODING` for `OBJECT|ENCODING`).
fn subcommand_names(command: &commands::Command) -> Vec<&'static str> {
    command
        .subcommands()
        .map(|s| s.name.split_once('|').map_or(s.name, |(_, n)| n))
        .collect()
}

/// A subcommand's arity in words, the name and the subcommand not counted.
fn sub_arity_text(arity: i64) -> String {
    let after = arity.unsigned_abs().saturating_sub(2);
    let how = if arity > 0 { "exactly" } else { "at least" };
    let s = if after == 1 { "" } else { "s" };
    format!("{how} {after} argument{s}")
}

/// The words of one line; empty for a blank line or a comment.
fn split(line: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(&first) = chars.peek() else {
            return Ok(words);
        };
        if first == '#' && words.is_empty() {
            return Ok(words);
        }
        let mut word = Vec::new();
        match first {
            '"' | '\'' => {
                let quote = first;
                chars.next();
                loop {
                    match chars.next() {
                        None if quote == '"' => return Err("unterminated double quote".to_owned()),
                        None => return Err("unterminated single quote".to_owned()),
                        Some(c) if c == quote => break,
                        // Inside double quotes escapes as in C; inside single quotes only \'.
                        Some('\\') if quote == '"' => escape(&mut chars, &mut word)?,
                        Some('\\') if chars.peek() == Some(&'\'') => {
                            chars.next();
                            word.push(b'\'');
                        }
                        Some(c) => push(&mut word, c),
                    }
                }
                closed(chars.peek())?;
            }
            _ => {
                while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                    push(&mut word, c);
                }
            }
        }
        words.push(word);
    }
}

/// A closing quote must end the word, as in redis-cli.
fn closed(next: Option<&char>) -> Result<(), String> {
    match next {
        Some(c) if !c.is_whitespace() => Err(format!(
            "a closing quote must be followed by a blank, found `{c}`"
        )),
        _ => Ok(()),
    }
}

fn push(word: &mut Vec<u8>, c: char) {
    word.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
}

/// One escape inside double quotes, after its backslash.
fn escape(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    word: &mut Vec<u8>,
) -> Result<(), String> {
    match chars.next() {
        Some('n') => word.push(b'\n'),
        Some('r') => word.push(b'\r'),
        Some('t') => word.push(b'\t'),
        Some('b') => word.push(8),
        Some('a') => word.push(7),
        Some('x') => {
            let hex: String = [chars.next(), chars.next()].into_iter().flatten().collect();
            let byte = u8::from_str_radix(&hex, 16)
                .map_err(|_| format!("`\\x{hex}` is not two hex digits"))?;
            word.push(byte);
        }
        Some(c) => push(word, c),
        None => return Err("a backslash ends the line".to_owned()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(text: &str) -> Vec<String> {
        check(text)
            .into_iter()
            .map(|p| format!("{}: {}", p.line, p.message))
            .collect()
    }

    #[test]
    fn a_valid_fixture_has_no_problem() {
        let text = "# orders\nHSET order:{7}:1 status paid total 120\n\nSET k 'a b' EX 60\n\
                    RPUSH q x y z\nCONFIG SET maxmemory-policy noeviction\nJSON.SET doc $ '{}'\n\
                    object encoding k\nDEL a b c";
        assert_eq!(messages(text), Vec::<String>::new());
    }

    #[test]
    fn unknown_commands_and_subcommands_are_named_with_their_line() {
        assert_eq!(
            messages("SET a 1\nHSETT h f v"),
            ["2: `HSETT` is not a Redis command; did you mean `HSET`?"]
        );
        assert_eq!(
            messages("CONFIG SETT maxmemory 1"),
            [
                "1: `CONFIG SETT` is not a Redis command: `CONFIG` has no subcommand `SETT`; \
              did you mean `CONFIG SET`?"
            ]
        );
        assert!(messages("CONFIG")[0].starts_with("1: `CONFIG` needs a subcommand (it has "));
    }

    #[test]
    fn a_count_of_arguments_outside_the_arity_is_a_problem() {
        assert_eq!(
            messages("GET"),
            [
                "1: `GET` takes exactly 1 argument, but this line passes 0: Redis refuses it \
              (\"wrong number of arguments\")"
            ]
        );
        assert!(
            messages("HSET h f")[0]
                .starts_with("1: `HSET` takes at least 3 arguments, but this line passes 2")
        );
        assert!(
            messages("CONFIG SET maxmemory")[0]
                .starts_with("1: `CONFIG SET` takes at least 2 arguments, but this line passes 1")
        );
    }

    #[test]
    fn every_problem_of_a_file_is_reported_a_bad_quote_too() {
        assert_eq!(
            messages("SET \"a b\nHSETT h f v\nSET 'a'b c"),
            [
                "1: unterminated double quote",
                "2: `HSETT` is not a Redis command; did you mean `HSET`?",
                "3: a closing quote must be followed by a blank, found `b`",
            ]
        );
    }

    fn words(line: &str) -> Vec<String> {
        split(line)
            .unwrap()
            .into_iter()
            .map(|w| String::from_utf8(w).unwrap())
            .collect()
    }

    #[test]
    fn quotes_and_escapes_read_as_redis_cli_reads_them() {
        assert_eq!(words("  SET  k v "), ["SET", "k", "v"]);
        assert_eq!(words(r#"SET "a b" 'c d'"#), ["SET", "a b", "c d"]);
        assert_eq!(
            words(r#"SET k "x\ty\n\"\\\x41""#),
            ["SET", "k", "x\ty\n\"\\A"]
        );
        assert_eq!(words(r"SET k 'it\'s'"), ["SET", "k", "it's"]);
        assert_eq!(
            words("SET k #not-a-comment"),
            ["SET", "k", "#not-a-comment"]
        );
        assert!(words("# a comment").is_empty());
        assert!(words("   ").is_empty());
        assert_eq!(words("SET k ''"), ["SET", "k", ""]);
    }

    #[test]
    fn a_bad_line_is_reported_with_its_number() {
        assert_eq!(
            parse("SET a b\nSET \"c d").unwrap_err(),
            "line 2: unterminated double quote"
        );
        assert!(
            parse("SET 'a'b")
                .unwrap_err()
                .contains("line 1: a closing quote")
        );
        assert!(
            parse(r#"SET "\xZZ""#)
                .unwrap_err()
                .contains("two hex digits")
        );
    }
}
