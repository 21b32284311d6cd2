//! Files of redis-cli commands, the format of fixtures: one command per line, words
//! separated by blanks, `"double"` or `'single'` quotes around a word with blanks, `\n`,
//! `\t`, `\\`, `\"` and `\xHH` inside double quotes (as `redis-cli` reads them), `#`
//! comments and blank lines ignored.
//!
//! ```text
//! # orders of customer 7
//! HSET order:{7}:1 status paid total 120
//! SET "customer:{7}:name" "Ada Lovelace"
//! RPUSH queue:{7} 'job one' "job\ttwo"
//! ```

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
/// let lines = lockscript_test::commands::parse("SET k 'a b'\n# note\nDEL k").unwrap();
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
