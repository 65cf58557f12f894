//! The seeded id source both engines mint ids and secrets from (moved here from the engines).
