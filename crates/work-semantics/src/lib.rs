//! What a ManifestWork means, as plain functions over plain data, written once for everyone who
//! needs it: the applier that writes manifests, the agent that reports on them and the authoring
//! tools that check them before they ship. A manifest's identity ([`ManifestId`]), which
//! `manifestConfigs` entry applies to it, sticky completion, orphaning and pruning
//! ([`manifests`]); what a work's AppliedManifestWork records ([`record`]);
//! the kind order manifests are applied in ([`order`]), what each manifest needs of the others
//! before it is applied ([`readiness`]), the gates a work declares on its manifests' conditions
//! ([`gates`]), how a manifest's object drifted from the work and what to do about it
//! ([`drift`]) and how long a rule's condition must hold before it is reported ([`holds`]). No I/O.

#![warn(missing_docs)]

mod annotations;
pub mod drift;
pub mod gates;
pub mod holds;
mod identity;
pub mod manifests;
pub mod order;
pub mod readiness;
pub mod record;

pub use identity::{InvalidManifest, ManifestId, SERVER_METADATA};
