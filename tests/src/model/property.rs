//! What must hold in every state the search reaches, each as the guide promises it
//! ([What a lock promises](lockscript::guide::locks)), read from the world after each
//! action.

use lockscript::__private::model::Belief;

use super::world::{Released, Stage, World, name};

/// One promise the model checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Property {
    /// No two leases of one name valid at once by their holders' own clocks. Leases
    /// granted on either side of a restart that lost the data are not held to it: the
    /// topology table promises nothing there (fencing does).
    Exclusion,
    /// A lease its holder finds valid is held on the server by its token: the holder
    /// believes in it no longer than the server keeps it (the rule exclusion rests on;
    /// it needs no second client to fail). Not across a restart that lost the data.
    ServerAgrees,
    /// Fencing tokens rise strictly in the order the server grants, restarts included;
    /// and a counter never restarts more than 2 ms ahead of the server's clock (1 ms by
    /// design, 1 ms for the model's microseconds; unless that clock stepped back), which
    /// is what keeps them rising across later restarts.
    FencesRise,
    /// A lease whose `release()` returned `Ok` is never reported lost afterwards.
    ReleasedNotLost,
    /// `lost` is true from the validity end on: no holder finds its lease valid past it.
    LostByValidityEnd,
    /// Nothing orphaned: a grant nobody owns is never a guard's, and once its background
    /// release has ended on the server's answer the server does not hold it (a release
    /// that ends on an error, or on no reply, leaves it to its TTL, as the guide says).
    NothingOrphaned,
    /// A lease no fault touched is never reported lost, nor its release `NotHeld`: none
    /// of its calls got no answer within its bound or was cut by a restart, its watchdog
    /// never let a due renewal wait, its caller never called `extend`, and the server
    /// never lost its data since the grant. What a refused native command must not
    /// cost (it did not run, and its script runs in its place within the call's bound),
    /// nor a refused notification beside a native release (the release is its delete's
    /// reply).
    Kept,
}

impl Property {
    /// Every property, in the order they are checked.
    pub const ALL: [Property; 7] = [
        Property::LostByValidityEnd,
        Property::NothingOrphaned,
        Property::ReleasedNotLost,
        Property::FencesRise,
        Property::ServerAgrees,
        Property::Exclusion,
        Property::Kept,
    ];

    /// The property's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Property::Exclusion => "exclusion",
            Property::ServerAgrees => "the server holds what a holder believes",
            Property::FencesRise => "fences rise in grant order",
            Property::ReleasedNotLost => "released with Ok, never lost",
            Property::LostByValidityEnd => "lost by the validity end",
            Property::NothingOrphaned => "nothing orphaned",
            Property::Kept => "kept unless a fault touched it",
        }
    }

    /// What breaks the property in `world`, if anything does.
    pub fn broken(self, world: &World<'_>) -> Option<String> {
        let now = world.now();
        let held = || {
            world.clients.iter().enumerate().flat_map(|(c, client)| {
                let c = u8::try_from(c).unwrap_or(u8::MAX);
                client
                    .slots
                    .iter()
                    .filter_map(move |slot| match slot.belief {
                        Belief::Held { valid_until } => Some((c, slot, valid_until)),
                        Belief::Lost | Belief::Released => None,
                    })
            })
        };
        match self {
            Property::Exclusion => {
                let held: Vec<_> = held().collect();
                held.iter().enumerate().find_map(|(i, (a, first, _))| {
                    held[i + 1..]
                        .iter()
                        .find(|(_, second, _)| second.epoch == first.epoch)
                        .map(|(b, second, _)| {
                            format!(
                                "{} (fence {}) and {} (fence {}) both find their leases valid",
                                name(*a),
                                first.holder.fence(),
                                name(*b),
                                second.holder.fence()
                            )
                        })
                })
            }
            Property::ServerAgrees => {
                let now_ms = world.server_ms();
                held()
                    .filter(|(_, slot, _)| slot.epoch == world.server.epoch)
                    .find(|(_, slot, _)| world.server.holder(now_ms) != Some(slot.holder.token()))
                    .map(|(c, slot, _)| {
                        let on_server = match world.server.holder(now_ms) {
                            Some(_) => "another owner's token",
                            None => "no key",
                        };
                        format!(
                            "{} finds its lease (fence {}) valid; the server has {on_server}",
                            name(c),
                            slot.holder.fence()
                        )
                    })
            }
            Property::FencesRise => (world.server.fence_fault)
                .map(|f| {
                    format!(
                        "the server granted fence {} after fence {}",
                        f.granted, f.before
                    )
                })
                .or_else(|| {
                    world.server.counter_ahead.map(|(started, clock)| {
                        format!(
                            "a counter restarted at {started}, more than 2 ms ahead of the \
                             server's clock ({clock} µs): a restart from the clock would \
                             repeat its fences"
                        )
                    })
                }),
            Property::ReleasedNotLost => {
                world.clients.iter().enumerate().find_map(|(c, client)| {
                    client
                        .slots
                        .iter()
                        .find(|s| {
                            s.stage == Stage::Released(Released::Ok) && s.belief == Belief::Lost
                        })
                        .map(|s| {
                            let c = u8::try_from(c).unwrap_or(u8::MAX);
                            format!(
                                "{}'s release (fence {}) returned Ok, and the lease is lost",
                                name(c),
                                s.holder.fence()
                            )
                        })
                })
            }
            Property::NothingOrphaned => orphaned(world),
            Property::Kept => untouched_lost(world),
            Property::LostByValidityEnd => held()
                .find(|&(_, _, valid_until)| now >= valid_until)
                .map(|(c, slot, valid_until)| {
                    let late = now.saturating_duration_since(valid_until);
                    format!(
                        "{} finds its lease (fence {}) valid {} ms past its validity end",
                        name(c),
                        slot.holder.fence(),
                        late.as_millis()
                    )
                }),
        }
    }
}

/// What breaks [`Property::Kept`] in `world`, if anything does.
fn untouched_lost(world: &World<'_>) -> Option<String> {
    world.clients.iter().enumerate().find_map(|(c, client)| {
        client
            .slots
            .iter()
            .find(|s| {
                let lost = s.stage == Stage::Held && s.belief == Belief::Lost;
                let not_held = s.stage == Stage::Released(Released::NotHeld);
                (lost || not_held) && !s.touched && s.epoch == world.server.epoch
            })
            .map(|s| {
                let c = u8::try_from(c).unwrap_or(u8::MAX);
                let what = if s.stage == Stage::Held {
                    "finds its lease"
                } else {
                    "has its release answer NotHeld for its lease"
                };
                format!(
                    "{} {what} (fence {}) lost, and no fault touched it",
                    name(c),
                    s.holder.fence()
                )
            })
    })
}

/// What breaks [`Property::NothingOrphaned`] in `world`, if anything does.
fn orphaned(world: &World<'_>) -> Option<String> {
    let on_server = world.server.holder(world.server_ms());
    let jobs = || {
        world.clients.iter().enumerate().flat_map(|(c, client)| {
            let c = u8::try_from(c).unwrap_or(u8::MAX);
            client.jobs.iter().map(move |job| (c, job))
        })
    };
    let ended = jobs()
        .find(|(_, job)| job.settled() && on_server == Some(job.token()))
        .map(|(c, _)| {
            format!(
                "{}'s background release ended on the server's answer, and the \
                 server holds the grant it released, owned by nobody",
                name(c)
            )
        });
    ended.or_else(|| {
        jobs().find_map(|(c, job)| {
            let guard = world.clients.iter().enumerate().find_map(|(g, client)| {
                client
                    .slots
                    .iter()
                    .any(|s| s.stage == Stage::Held && s.holder.token() == job.token())
                    .then_some(g)
            })?;
            job.live().then(|| {
                let g = u8::try_from(guard).unwrap_or(u8::MAX);
                format!(
                    "{}'s background release undoes a grant {}'s guard holds",
                    name(c),
                    name(g)
                )
            })
        })
    })
}
