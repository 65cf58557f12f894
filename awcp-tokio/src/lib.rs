//! awcp-tokio (filled by later work).
