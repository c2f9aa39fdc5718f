//! MQTT 5 binding (CloudEvents binary and structured modes, as OCM's Go client writes them) and
//! the topic rules of the MQTT config.

pub mod binding;
pub mod topics;

pub use binding::{Message, from_message, to_binary, to_structured};
pub use topics::Topics;
