//! The script machinery, which knows nothing of locks: a script and its digest
//! ([`script::Script`]), one call of it ([`invocation::Invocation`]) delivered by EVALSHA,
//! EVAL or Redis Functions ([`functions`]), pipelines ([`batch`]), the registry of every
//! script in the build ([`registry`]), and the built-in scripts the locks use
//! ([`builtin`]).

pub(crate) mod batch;
pub mod builtin;
pub(crate) mod functions;
pub(crate) mod invocation;
pub(crate) mod registry;
#[allow(clippy::module_inception)] // the `Script` type's home, inside the script layer
pub(crate) mod script;
