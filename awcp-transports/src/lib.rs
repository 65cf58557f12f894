//! awcp-transports (filled by later work).
