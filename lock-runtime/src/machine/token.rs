//! Owner tokens: 128 bits from the OS CSPRNG, never shown.

use std::fmt;

use crate::LockError;

/// A lock owner's secret: 128 random bits as 32 lowercase hex digits.
///
/// Whoever knows it can release or renew the lock, so it is never logged and its
/// `Debug` is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Draws a fresh token from the operating system's CSPRNG.
    pub(crate) fn new() -> Result<Self, LockError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| LockError::Entropy(e.to_string()))?;
        let mut hex = String::with_capacity(32);
        for b in bytes {
            hex.push(char::from(HEX[usize::from(b >> 4)]));
            hex.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        Ok(Self(hex))
    }

    /// The value stored in Redis.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::Token;

    #[test]
    fn tokens_are_32_hex_digits_and_unique() {
        let mut seen = HashSet::new();
        for _ in 0..10_000 {
            let t = Token::new().unwrap();
            assert_eq!(t.as_str().len(), 32);
            assert!(
                t.as_str()
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            );
            assert!(seen.insert(t.as_str().to_owned()), "duplicate token");
        }
    }

    #[test]
    fn debug_never_shows_the_token() {
        let t = Token::new().unwrap();
        let shown = format!("{t:?}");
        assert!(!shown.contains(t.as_str()));
        assert_eq!(shown, "Token(<redacted>)");
    }
}
