//! The CloudEvents clients and the test sources on real wires: MQTT against mosquitto (the one
//! `e2e/scripts/mosquitto.sh run` starts, or private ones with a packet-size ceiling or TLS), gRPC
//! against the test gRPC source. One binary for these suites, so they link once.
//! Filter by module: `grpc_client::`, `mqtt_broker::`, `mqtt_ceiling::`, `mqtt_source::`, `mqtt_tls::`.

mod grpc_client;
mod mqtt_broker;
mod mqtt_ceiling;
mod mqtt_source;
mod mqtt_tls;
