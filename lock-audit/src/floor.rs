//! The oldest server a script runs on: for Redis and for Valkey, the first version that
//! has every command it calls (from [`commands`]' `since`) and understands its shebang
//! (`#!lua` came with Redis 7.0), and what raised it there.
//!
//! Valkey began at 7.2 (a fork of Redis 7.2.4): a command it inherited from an older
//! Redis runs on every Valkey, so its floor is 7.2.0, never an older name.
//!
//! ```
//! use lockscript_audit::floor::{Floor, Version};
//! use lockscript_audit::lua::analyze;
//!
//! let floor = Floor::of(&analyze("#!lua flags=no-writes\nreturn redis.call('GET', KEYS[1])"));
//! assert_eq!(floor.redis.as_ref().and_then(|n| n.version), Some(Version(7, 0, 0)));
//! // Every Valkey reads shebangs: no floor there.
//! assert_eq!(floor.valkey, None);
//! ```

use std::fmt;

use crate::commands::{self, Product, Servers};
use crate::lua::{Analysis, Position};

/// A server version, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// Reads "7.0", "7.0.15" or "8".
    ///
    /// ```
    /// use lockscript_audit::floor::Version;
    /// assert_eq!(Version::parse("7.4"), Some(Version(7, 4, 0)));
    /// assert_eq!(Version::parse("x"), None);
    /// ```
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next().map_or(Some(0), |p| p.parse().ok())?;
        let patch = parts.next().map_or(Some(0), |p| p.parse().ok())?;
        parts.next().is_none().then_some(Self(major, minor, patch))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The first Valkey: the fork of Redis 7.2.4.
pub const FIRST_VALKEY: Version = Version(7, 2, 0);

/// What one product needs to run a script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    /// The oldest version that runs it; `None` when no version of the product has a
    /// command it calls.
    pub version: Option<Version>,
    /// What sets it: a command (`HEXPIRE`) or the shebang (`#!lua`).
    pub because: String,
    /// Where that is in the (expanded) script.
    pub at: Position,
}

impl Need {
    /// "Redis 7.4.0 or later (for `HEXPIRE`)", "no Valkey (it lacks `XACKDEL`)".
    pub fn describe(&self, product: Product) -> String {
        match self.version {
            Some(v) => format!("{product} {v} or later (for {})", self.because),
            None => format!("no {product} (none has {})", self.because),
        }
    }
}

/// The oldest Redis and Valkey a script runs on: `None` for a product means any version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Floor {
    /// What Redis needs.
    pub redis: Option<Need>,
    /// What Valkey needs.
    pub valkey: Option<Need>,
}

impl Floor {
    /// The floor of an analysed script.
    pub fn of(analysis: &Analysis) -> Self {
        let mut floor = Self::default();
        let first_line = Position { line: 1, column: 1 };
        if analysis.shebang {
            floor.raise(
                Product::Redis,
                Version::parse(commands::SHEBANG_SINCE),
                "the `#!lua` shebang",
                first_line,
            );
            floor.raise(
                Product::Valkey,
                Some(FIRST_VALKEY),
                "the `#!lua` shebang",
                first_line,
            );
        }
        for used in &analysis.commands {
            let Some(c) = commands::find(&used.name) else {
                continue;
            };
            let shown = format!("`{}`", used.name.replace('|', " ").to_ascii_uppercase());
            for product in [Product::Redis, Product::Valkey] {
                let version = if c.on.of(product).is_empty() {
                    None
                } else {
                    let since = match product {
                        Product::Redis => c.redis_since,
                        Product::Valkey => c.valkey_since,
                    };
                    let v = since.and_then(Version::parse).unwrap_or(Version(0, 0, 0));
                    Some(match product {
                        Product::Valkey => v.max(FIRST_VALKEY),
                        Product::Redis => v,
                    })
                };
                floor.raise(product, version, &shown, used.at);
            }
        }
        floor
    }

    /// What `product` needs (`None`: any version).
    pub fn of_product(&self, product: Product) -> Option<&Need> {
        match product {
            Product::Redis => self.redis.as_ref(),
            Product::Valkey => self.valkey.as_ref(),
        }
    }

    fn raise(&mut self, product: Product, version: Option<Version>, because: &str, at: Position) {
        // Versions everything has set no floor (Valkey's 7.2.0 is where it starts).
        let trivial = match (product, version) {
            (Product::Redis, Some(v)) => v <= Version(2, 6, 0),
            (Product::Valkey, Some(v)) => v <= FIRST_VALKEY,
            (_, None) => false,
        };
        if trivial {
            return;
        }
        let slot = match product {
            Product::Redis => &mut self.redis,
            Product::Valkey => &mut self.valkey,
        };
        // `None` (never) is above every version.
        let higher = match (slot.as_ref().map(|n| n.version), version) {
            (None, _) | (Some(Some(_)), None) => true,
            (Some(Some(old)), Some(new)) => new > old,
            (Some(None), _) => false,
        };
        if higher {
            *slot = Some(Need {
                version,
                because: because.to_owned(),
                at,
            });
        }
    }
}

/// The servers a script's author says it must run on: `requires = "redis 7.0, valkey 8.0"`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requires {
    /// The oldest Redis it must run on, when named.
    pub redis: Option<Version>,
    /// The oldest Valkey it must run on, when named.
    pub valkey: Option<Version>,
}

impl Requires {
    /// Reads `"redis 7.0, valkey 8.0"` (either product, any order).
    ///
    /// ```
    /// use lockscript_audit::floor::{Requires, Version};
    /// let r = Requires::parse("redis 7.0, valkey 8.0").unwrap();
    /// assert_eq!(r.redis, Some(Version(7, 0, 0)));
    /// assert!(Requires::parse("valkey 7.0").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requires = Self::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, version) = part.split_once(' ').ok_or_else(|| {
                format!("`{part}`: write a product and a version, as in \"redis 7.0, valkey 8.0\"")
            })?;
            let version = Version::parse(version)
                .ok_or_else(|| format!("`{part}`: `{}` is not a version", version.trim()))?;
            let slot = match name.to_ascii_lowercase().as_str() {
                "redis" => &mut requires.redis,
                "valkey" => {
                    if version < FIRST_VALKEY {
                        return Err(format!(
                            "`{part}`: no Valkey {version} exists; Valkey began at 7.2 (a fork of Redis 7.2.4)"
                        ));
                    }
                    &mut requires.valkey
                }
                other => {
                    return Err(format!(
                        "`{part}`: unknown server `{other}`: expected `redis` or `valkey`"
                    ));
                }
            };
            if slot.replace(version).is_some() {
                return Err(format!("`{name}` is named twice"));
            }
        }
        if requires == Self::default() {
            return Err("name at least one server, as in \"redis 7.0, valkey 8.0\"".to_owned());
        }
        Ok(requires)
    }

    /// The servers of `servers` a script declared so is meant for: of a product it names,
    /// those at or above the version named (the newest of the product when the version is
    /// newer than every server of the matrix); of a product it does not name, all of them.
    /// What [`crate::lua::analyze_on`] checks a script with `requires` against.
    ///
    /// ```
    /// use lockscript_audit::commands::{Product, Servers};
    /// use lockscript_audit::floor::Requires;
    ///
    /// let newer = Requires::parse("redis 8.0").unwrap().narrow(Servers::all());
    /// assert!(newer.of(Product::Redis).iter().all(|s| !s.version.starts_with("7.")));
    /// assert_eq!(newer.of(Product::Valkey), Servers::all().of(Product::Valkey));
    /// ```
    pub fn narrow(&self, servers: Servers) -> Servers {
        let mut kept = Servers::NONE;
        for (product, declared) in [(Product::Redis, self.redis), (Product::Valkey, self.valkey)] {
            let of = servers.of(product);
            let Some(declared) = declared else {
                kept = kept.or(of);
                continue;
            };
            let at_least =
                Servers::from_fn(|s| Version::parse(s.version).is_some_and(|v| v >= declared));
            let newest = of
                .iter()
                .filter_map(|s| Version::parse(s.version))
                .max()
                .map_or(Servers::NONE, |top| {
                    Servers::from_fn(|s| Version::parse(s.version) == Some(top))
                });
            let chosen = of.and(at_least);
            kept = kept.or(if chosen.is_empty() {
                of.and(newest)
            } else {
                chosen
            });
        }
        kept
    }

    /// Each declared server the script cannot run on: the product, the declared version
    /// and what the script needs there.
    pub fn unmet<'a>(&self, floor: &'a Floor) -> Vec<(Product, Version, &'a Need)> {
        let mut unmet = Vec::new();
        for (product, declared) in [(Product::Redis, self.redis), (Product::Valkey, self.valkey)] {
            let (Some(declared), Some(need)) = (declared, floor.of_product(product)) else {
                continue;
            };
            if need.version.is_none_or(|v| v > declared) {
                unmet.push((product, declared, need));
            }
        }
        unmet
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lua::analyze;

    #[test]
    fn a_plain_script_runs_everywhere() {
        let floor = Floor::of(&analyze("return redis.call('GET', KEYS[1])"));
        assert_eq!(floor, Floor::default());
    }

    #[test]
    fn the_newest_command_sets_the_floor_and_valkey_starts_at_7_2() {
        let floor = Floor::of(&analyze(
            "redis.call('GETEX', KEYS[1])\nreturn redis.call('LMPOP', 1, KEYS[1], 'LEFT')",
        ));
        let redis = floor.redis.unwrap();
        assert_eq!(redis.version, Some(Version(7, 0, 0)));
        assert_eq!(redis.because, "`LMPOP`");
        assert_eq!(
            redis.at,
            Position {
                line: 2,
                column: 19
            }
        );
        // Valkey has both from its first version: no floor, never "Valkey 7.0".
        assert_eq!(floor.valkey, None);
    }

    #[test]
    fn a_command_one_product_lacks_is_never_there() {
        let floor = Floor::of(&analyze("return redis.call('DELIFEQ', KEYS[1], ARGV[1])"));
        assert_eq!(floor.redis.as_ref().unwrap().version, None);
        assert_eq!(
            floor.redis.unwrap().describe(Product::Redis),
            "no Redis (none has `DELIFEQ`)"
        );
        assert_eq!(floor.valkey.unwrap().version, Some(Version(9, 0, 0)));
    }

    #[test]
    fn requires_is_checked_against_the_floor() {
        let floor = Floor::of(&analyze(
            "#!lua\nreturn redis.call('LMPOP', 1, KEYS[1], 'LEFT')",
        ));
        assert!(
            Requires::parse("redis 7.0")
                .unwrap()
                .unmet(&floor)
                .is_empty()
        );
        let unmet = Requires::parse("redis 6.2, valkey 8.0").unwrap();
        let unmet = unmet.unmet(&floor);
        assert_eq!(unmet.len(), 1);
        assert_eq!(unmet[0].0, Product::Redis);
        assert!(Requires::parse("redis seven").is_err());
        assert!(Requires::parse("keydb 6").is_err());
        assert!(Requires::parse("").is_err());
    }
}
