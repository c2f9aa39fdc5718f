//! MQTT 5 binding (CloudEvents binary and structured modes, as OCM's Go client writes them), the
//! topic rules of the MQTT config, and the transport the agent's client drives.

pub mod binding;
pub mod topics;
pub mod transport;

pub use binding::{Message, from_message, to_binary, to_structured};
pub use topics::Topics;
pub use transport::{MqttClientOptions, MqttSender, MqttTransport};

use crate::Error;
use crate::client::{Client, SubscribedHook};

/// Starts the agent's client on the MQTT broker of `opts`.
pub fn start(opts: &MqttClientOptions, on_subscribed: SubscribedHook) -> Result<Client, Error> {
    Ok(Client::start(
        MqttTransport::new(opts)?,
        opts,
        on_subscribed,
    ))
}
