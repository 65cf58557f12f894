//! awcp-smol (filled by later work).
