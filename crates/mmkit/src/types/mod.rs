//! Shared types and constants every layer uses: GFP and migratetypes, the
//! error types. Imports nothing from the rest of the crate.

pub mod error;
pub mod gfp;
