//! Where a problem in a script is, and what it is: what every check of the analysis
//! reports, and the "did you mean" they share.

#[cfg(feature = "analysis")]
use std::fmt;

/// A 1-based line and column in the script file.
#[cfg(feature = "analysis")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

#[cfg(feature = "analysis")]
impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Something the server would refuse, or that cannot be what the author meant; as a
/// warning, something only some servers would refuse.
#[cfg(feature = "analysis")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Where in the file.
    pub at: Position,
    /// What is wrong, in one sentence.
    pub message: String,
}

/// The candidate closest to `name` by edit distance (ignoring case), when it is close
/// enough to be a typo: for "did you mean".
pub(crate) fn closest<'a>(
    name: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    let wanted = name.to_ascii_lowercase();
    let limit = (wanted.chars().count() / 3).max(1);
    candidates
        .filter(|c| !c.eq_ignore_ascii_case(name))
        .map(|c| (distance(&wanted, &c.to_ascii_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance, by characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}
