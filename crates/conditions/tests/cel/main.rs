//! The CEL engine as rules see it: functions and the Kubernetes libraries, cel-go parity and
//! upstream's test tables, the cost budget and the bounds. One binary for these suites, so they link
//! once; the property tests are `prop_cel`.

mod budget;
mod cel_go_parity;
mod functions;
mod k8s_libraries;
mod limits;
mod upstream_tables;
