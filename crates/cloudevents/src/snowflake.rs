//! snowflake
