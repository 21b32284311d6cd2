//! The hash states are told apart by: 64 bits, every word mixed in through splitmix64's
//! finalizer (a bijection with full avalanche), so that two states collide with
//! probability about 2^-64 each (for a million states, about 3 in 10^8 that any two do).
//!
//! Not `std`'s `DefaultHasher`: SipHash guards hash tables against chosen inputs, which
//! a search does not face, and costs a fifth of a debug build's search time.

use std::hash::Hasher;

/// A 64-bit fingerprint of what is written to it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fingerprint(u64);

impl Fingerprint {
    fn mix(&mut self, word: u64) {
        let mut z = (self.0.rotate_left(23) ^ word).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        self.0 = z ^ (z >> 31);
    }
}

impl Hasher for Fingerprint {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            // The length too: "a" and "a\0" differ.
            self.mix(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 56));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }

    fn write_u16(&mut self, i: u16) {
        self.mix(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.mix(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
}

#[cfg(test)]
mod tests {
    use std::hash::Hash;

    use super::*;

    fn of(value: impl Hash) -> u64 {
        let mut h = Fingerprint::default();
        value.hash(&mut h);
        h.finish()
    }

    #[test]
    fn order_and_content_change_the_fingerprint() {
        assert_ne!(of((1u32, 2u32)), of((2u32, 1u32)));
        assert_ne!(of("a"), of("a\0"));
        assert_ne!(of([0u8; 0]), of([0u8; 1]));
        assert_eq!(of((7u64, "x")), of((7u64, "x")));
    }
}
